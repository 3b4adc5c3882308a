// The server side of one sync session, as a sans-I/O state machine (PROTOCOL.md §5).
//
//   driver ──input──► SyncSession.handle(input, now:) ──► [action]  ──► driver does I/O
//        ▲                                                                 │
//        └──────────── results of the store requests it asked for ◄────────┘
//
//   awaitingHello ─hello─► authenticating ─accept─► ready ─bye/violation/timeout─► closed
//                                 └─refuse──────────────────────────────────────► closed
//
// Delivery state per session is small and bounded: the change-log cursor, the set of 64-bit hashes
// of the documents the peer holds, the subscriptions, one outstanding store read (or two page reads
// of an initial sync, the second read ahead within the credit), and the uploads awaiting commit
// (bounded by the upload credit). Nothing is queued for a peer without
// credit: the session just stops reading the log and resumes from its cursor when credit returns.
//
// Credit is only the peer's promise. What the session has handed to its transport and the socket
// has not taken yet (`transportQueued`, reported by the driver) is the truth: at
// `maxQueuedBytes` the session stops producing exactly as without credit, and goes on when the
// driver reports the queue drained (`.transportDrained`). So a peer that grants a huge credit and
// never reads holds at most about `maxQueuedBytes` plus one message of server memory.

import SyncProtocol
import DQL
import Values

public struct SyncSession: Sendable {
    public struct Configuration: Sendable {
        public var serverSite: UInt64
        public var sessionID: String
        public var heartbeatMillis: UInt64 = 20_000
        public var handshakeTimeoutMillis: UInt64 = 10_000
        /// How long the check of a `hello` (credentials, connection policy) may take from its
        /// arrival: the handshake ends at the later of the two deadlines. A connection webhook
        /// may think for 10 s, which the handshake timeout alone would not leave it.
        public var authenticationTimeoutMillis: UInt64 = 0
        /// Upload credit granted in `welcome` (bytes).
        public var uploadCredit: UInt64 = 4 << 20
        /// Rows per initial-sync page.
        public var pageRows = 500
        /// How often a checkpoint is sent when the cursor moved over transactions the peer did not need.
        public var idleCheckpointMillis: UInt64 = 5_000
        public var limits = SyncLimits.default
        public var supportedVersions: [UInt64] = [SyncProtocol.version]
        /// Bytes the session lets wait in its transport (sent, not yet taken by the socket) before
        /// it stops producing `docs`/`changes`, whatever credit the peer granted.
        public var maxQueuedBytes = 1 << 20
        /// Documents a session tracks as held, counting the `have` lists of resumes not yet
        /// checked: without a bound, repeated `sub`s with 16 MiB `have`s (2 million hashes each)
        /// would grow the server's memory without end (~16 bytes a hash as a set member).
        public var maxTrackedDocuments = 1 << 22
        /// Remote queries (`query`, PROTOCOL.md §4.15) the session has outstanding at once.
        public var maxOutstandingQueries = 4
        /// Whether a peer that asks (`hello.caps` `resume`) gets a session it can resume on
        /// another link (PROTOCOL.md §4.16): its driver must be able to hand links over.
        public var resumable = false

        public init(serverSite: UInt64, sessionID: String) {
            self.serverSite = serverSite
            self.sessionID = sessionID
        }
    }

    public enum State: Sendable, Equatable { case awaitingHello, authenticating, ready, closed }

    struct Subscription {
        enum Phase: Equatable {
            /// Waiting for its turn (one initial sync at a time).
            case queued
            /// Checking whether the change log reaches back to the resume checkpoint.
            case checkingResume
            /// Streaming pages; `after` is the last id sent.
            case paging(after: Value?)
            case live
        }
        var id: UInt32
        var generation: UInt64
        var query: SubscriptionQuery
        var checkpoint: Int64?
        var have: [UInt64]
        /// Without `checkpoint`: what the peer has (`sub.known`), ascending by document hash; the
        /// initial sync does not send a document whose state digest it names. Emptied once live.
        var known: [KnownState]
        var phase: Phase
    }

    /// The one kind of store read a session may have outstanding (pages, log and fetches are
    /// serialized); `page` may stand for two page reads of one subscription (`pageReads`).
    enum Outstanding: Equatable {
        case page(UInt32)
        case resume(UInt32)
        case log
        case fetch(request: UInt64, purpose: FetchPurpose)
    }

    enum FetchPurpose: Equatable {
        /// The documents a `want` named (up to `maxWantDocuments` of them): those the read does not
        /// return are answered with `gone` (PROTOCOL.md §4.7).
        case want([DocumentRef])
        /// Documents entering a subscription in the middle of transaction `txn` of a log batch.
        case entering
    }

    public internal(set) var configuration: Configuration
    public private(set) var state: State = .awaitingHello
    public private(set) var peer: Hello?
    /// Messages received after `hello` while the credentials are checked (dropped on refusal).
    var early: [(message: SyncMessage, size: Int)] = []
    var earlyBytes = 0
    /// Set when the peer is accepted; nothing is allowed before.
    public private(set) var permissions = SyncPermissions(read: .only([]), write: .only([]))
    let openedAt: UInt64
    /// When `hello` arrived (the check of it started).
    var helloAt: UInt64?
    var lastReceived: UInt64
    var lastPingSent: UInt64 = 0
    var pingCounter: UInt64 = 0

    /// Download credit left (may go negative by one message, PROTOCOL.md §6).
    public internal(set) var credit: Int64 = 0
    /// Bytes waiting in the transport: reported by the driver before each step
    /// (`noteTransportQueue`), plus what the step itself sends.
    public internal(set) var transportQueued = 0
    /// Bumped each time the peer's `auth` is accepted: re-checks made for older credentials are
    /// ignored (`.credentialsChecked`).
    public internal(set) var credentialEpoch: UInt64 = 0
    /// The epoch an `auth` being checked will get; nil when none is.
    var refreshInFlight: UInt64?
    /// When the credentials stop being valid (session clock); nil: never.
    public internal(set) var credentialDeadline: UInt64?
    /// How long before `credentialDeadline` the `renew` notice is due (SyncSession+Credentials.swift).
    var renewalLeadMillis: UInt64?
    /// The credential epoch whose `renew` notice has gone out.
    var renewalSentForEpoch: UInt64?
    public internal(set) var uploadCredit: Int64 = 0
    /// Everything in the change log up to this transaction has been handled for the live subscriptions.
    public internal(set) var cursor: Int64?
    /// Set while the session is inside a large transaction read in pieces: the rows of transaction
    /// `cursor + 1` up to this `seq` have been handled too (`changes` for them may have gone out;
    /// no checkpoint covers that transaction until its last row is handled).
    public internal(set) var partialSeq: Int32?
    var lastCheckpointSent: Int64 = -1
    var lastCheckpointAt: UInt64 = 0
    /// The newest `txn` of an `ack` sent: a checkpoint covering it follows as soon as the position
    /// passes it (PROTOCOL.md §4.8), so a peer knows when everything its uploads caused for it
    /// (the merged state of a document it created over a server version) has been sent.
    var ackedThrough: Int64 = -1
    var logHead: Int64 = 0

    var subscriptions: [UInt32: Subscription] = [:] {
        didSet { liveQueriesCache = nil }
    }
    var liveQueriesCache: LiveQueries?
    /// Bumped whenever a subscription is accepted or ends (not when one changes phase): a driver
    /// that relays the session's subscriptions compares it around each step (`acceptedQueries`).
    public internal(set) var subscriptionSetVersion: UInt64 = 0
    /// The live matches of the batch being processed (`LogBatch.liveMatches`), kept while its
    /// rows are: a batch suspended for a fetch resumes with them.
    var batchMatches: LiveMatches?
    /// Subscription ids in the order they were requested (initial syncs run in this order).
    var order: [UInt32] = []
    var generations: UInt64 = 0
    /// Hashes (`DocumentHash`) of the documents the peer holds.
    public internal(set) var held: Set<UInt64> = []
    /// Held only because the peer listed them in a resume's `have`, not sent in this session;
    /// tracked while the session has read rules. Such a document that leaves hidden by the rules
    /// is forgotten without its state: a `have` can name any document, and must not read one.
    var heldByClaimOnly: Set<UInt64> = []
    var outstanding: Outstanding?
    /// Page reads in flight, oldest first: at most two, the second read ahead (`readAhead`).
    var pageReads: [PageRead] = []
    var requestCounter: UInt64 = 0
    /// A log batch interrupted to fetch the full states of documents entering a subscription.
    var suspended: SuspendedBatch?
    /// Documents the peer asked for with `want`, not yet fetched (bounded: `maxPendingWants`).
    var pendingWants: [DocumentRef] = []
    /// Entries skipped because one alone exceeds the peer's maximum message size.
    public internal(set) var skippedOversized = 0
    /// Initial-sync pages read ahead (while the page before was decoded and sent), and those of
    /// them dropped because the peer had no credit left when they arrived (tests, metrics).
    public internal(set) var pagesReadAhead = 0
    public internal(set) var pagesDroppedWithoutCredit = 0
    /// Initial-sync documents not sent because the peer listed their state in `known`.
    public internal(set) var statesAlreadyKnown = 0
    /// Uploads in the order received, with their size and, once committed, their ack.
    var uploads: [PendingUpload] = []
    /// Remote queries sent and not yet answered (`SyncSession+RemoteQuery.swift`).
    var remoteQueries: [UInt32: PendingRemoteQuery] = [:]
    /// Set once the peer was welcomed into a resumable session (SyncSession+Resumption.swift).
    public internal(set) var resumption: SessionResumption?
    /// Its link is gone and the peer may resume it on another (until the heartbeat timeout).
    public internal(set) var detached = false
    /// `hello.resume` was handed to the driver: waiting for a handover or `.resumeNotFound`.
    var resumeLookup = false
    /// The peer let more than `maxUnconfirmedBytes` go unconfirmed (checked after each step).
    var unconfirmedOverflow = false
    /// What a resumable session keeps for a peer that does not `rack`: data stops at the queue
    /// limit, but control messages (a `pong` per `ping`) do not, so they are bounded here.
    var maxUnconfirmedBytes: Int { 2 * max(configuration.maxQueuedBytes, 64 << 10) }

    public init(configuration: Configuration, now: UInt64) {
        self.configuration = configuration
        openedAt = now
        lastReceived = now
    }

    public var subscriptionCount: Int { subscriptions.count }

    /// What the session may still produce: the peer's credit, but no more than the room left
    /// under `maxQueuedBytes` in the transport.
    public var sendWindow: Int64 {
        min(credit, Int64(configuration.maxQueuedBytes - max(transportQueued, resumption?.unconfirmedBytes ?? 0)))
    }

    /// The session has credit but stopped producing because its transport is full: the driver
    /// must send `.transportDrained` when the queue goes down.
    public var isWaitingForTransport: Bool { state == .ready && credit > 0 && sendWindow <= 0 }

    /// The driver's measure of the bytes waiting in the transport, before a step.
    public mutating func noteTransportQueue(_ bytes: Int) { transportQueued = max(0, bytes) }

    /// When the driver should call `.tick` at the latest.
    public var nextDeadline: UInt64 {
        switch state {
        case .awaitingHello, .authenticating: return handshakeDeadline
        case .closed: return UInt64.max
        case .ready:
            let hb = configuration.heartbeatMillis
            var next = lastReceived + 3 * hb
            next = min(next, max(lastReceived, lastPingSent) + hb)
            if let credentialDeadline { next = min(next, credentialDeadline) }
            if let renewalDue { next = min(next, renewalDue) }
            if let queryDeadline = remoteQueries.values.map(\.deadline).min() { next = min(next, queryDeadline) }
            // The same conditions as in `tick`: a deadline `tick` would not act on stays in the
            // past, and the driver's timer loop would spin on it (it did, for a whole initial sync).
            if let cursor, cursor > lastCheckpointSent, suspended == nil, !isSyncing {
                next = min(next, lastCheckpointAt + configuration.idleCheckpointMillis)
            }
            return next
        }
    }

    var handshakeDeadline: UInt64 {
        max(openedAt + configuration.handshakeTimeoutMillis, helloAt.map { $0 + configuration.authenticationTimeoutMillis } ?? 0)
    }

    /// Feeds one input; returns what to do, in order.
    public mutating func handle(_ input: SyncSessionInput, now: UInt64) -> [SyncSessionAction] {
        var out: [SyncSessionAction] = []
        guard state != .closed else {
            if case .sendQuery(let query) = input { sendQuery(query, now: now, into: &out) }  // answered: not open
            return out
        }
        switch input {
        case .received(let bytes):
            lastReceived = now
            received(bytes, now: now, into: &out)
        case .authenticated(let decision):
            authenticated(decision, now: now, into: &out)
        case .page(let id, let generation, let page):
            pageArrived(id, generation, page, into: &out)
        case .pageBoundary(let id, let generation, let boundary):
            if let i = pageReads.firstIndex(where: { $0.subscription == id && $0.generation == generation && $0.boundary == nil }) {
                pageReads[i].boundary = boundary
            }
        case .resumeChecked(let id, let generation, let reachable):
            resumeChecked(id, generation, reachable, into: &out)
        case .log(let batch):
            if outstanding == .log { outstanding = nil }
            logArrived(batch, now: now, into: &out)
        case .fetched(let request, let docs):
            fetched(request, docs, now: now, into: &out)
        case .uploadCommitted(let seq, let txn, let rejected):
            uploadCommitted(seq, txn, rejected, now: now, into: &out)
        case .storeFailed(let code, let reason):
            close(code, reason, into: &out)
        case .logHead(let n):
            logHead = max(logHead, n)
        case .tick:
            tick(now: now, into: &out)
        case .transportClosed:
            if resumption != nil && state == .ready { detached = true } else { state = .closed }
        case .resumeNotFound:
            if state == .authenticating, resumeLookup { startFresh(now: now, into: &out) }
        case .transportDrained:
            break  // the pump below goes on if the window opened
        case .reauthenticated(let decision, let epoch):
            reauthenticated(decision, epoch: epoch, now: now, into: &out)
        case .sendPresence(let records):
            if state == .ready, !records.isEmpty { send(.presence(records), into: &out) }
        case .sendQuery(let query):
            sendQuery(query, now: now, into: &out)
        case .credentialsChecked(let decision, let epoch):
            guard epoch == credentialEpoch, refreshInFlight == nil else { break }
            switch decision {
            case .refuse(_, let reason): close(.unauthorized, reason, into: &out)
            case .accept(let granted): replacePermissions(granted, now: now, into: &out)
            }
        }
        if state == .ready { pump(now: now, into: &out) }
        if unconfirmedOverflow, state != .closed {
            close(.protocolViolation, "more than \(maxUnconfirmedBytes) bytes not confirmed with rack", into: &out)
        }
        if state == .closed { answerPendingQueriesAtClose(now: now, into: &out) }
        return out
    }

    // MARK: - Receiving

    mutating func received(_ bytes: [UInt8], now: UInt64, into out: inout [SyncSessionAction]) {
        let message: SyncMessage
        do {
            message = try SyncMessageDecoder.decode(bytes, limits: configuration.limits)
        } catch {
            return close(error.closeCode, error.description, into: &out)
        }
        if case .bye(let code, _) = message {
            // The peer leaves this link, not the session: it resumes on another (PROTOCOL.md §4.16).
            if code == SyncCloseCode.linkLeft.rawValue, resumption != nil, state == .ready { detached = true; return }
            return close(.normal, "", into: &out)
        }
        if resumption != nil, state == .ready, !counted(message, size: bytes.count, into: &out) { return }
        if state == .authenticating {
            // Pipelining (PROTOCOL.md §4.2): messages sent right after `hello` wait for the
            // credentials check, bounded so a peer cannot make the server hold much for it.
            if case .hello = message { return close(.protocolViolation, "a second hello", into: &out) }
            earlyBytes += bytes.count
            guard early.count < Self.maxEarlyMessages, earlyBytes <= Self.maxEarlyBytes else {
                return close(.protocolViolation, "more than \(Self.maxEarlyMessages) messages or \(Self.maxEarlyBytes >> 20) MiB before welcome", into: &out)
            }
            early.append((message, bytes.count))
            return
        }
        dispatch(message, size: bytes.count, now: now, into: &out)
    }

    /// Messages a peer may pipeline behind `hello`, and their total size.
    static let maxEarlyMessages = 64
    static let maxEarlyBytes = 4 << 20

    mutating func dispatch(_ message: SyncMessage, size: Int, now: UInt64, into out: inout [SyncSessionAction]) {
        switch (state, message) {
        case (.awaitingHello, .hello(let h)):
            helloAt = now
            handshake(h, into: &out)
        case (.ready, .subscribe(let s)):
            subscribe(s, now: now, into: &out)
        case (.ready, .unsubscribe(let id)):
            unsubscribe(id)
        case (.ready, .want(let refs)):
            want(refs, into: &out)
        case (.ready, .upload(let seq, let entries)):
            upload(seq, entries, size: size, now: now, into: &out)
        case (.ready, .credit(let bytes)):
            guard credit <= configuration.limits.maxOutstandingCredit - Int64(bytes) else {
                return close(.protocolViolation, "credit above 2^40 bytes", into: &out)
            }
            credit += Int64(bytes)
        case (.ready, .ping(let n)):
            send(.pong(n), into: &out)
        case (.ready, .pong):
            break  // any message counts as a sign of life (lastReceived)
        case (.ready, .presence(let records)):
            out.append(.presenceReceived(records))  // control traffic: no credit (PROTOCOL.md §4.14)
        case (.ready, .result(let result)):
            queryAnswered(result, size: size, now: now, into: &out)
        case (.ready, .refreshAuth(let credentials)):
            guard refreshInFlight == nil else {
                return close(.protocolViolation, "auth sent while the previous auth is being checked", into: &out)
            }
            refreshInFlight = credentialEpoch + 1
            out.append(.reauthenticate(credentials, epoch: credentialEpoch + 1))
        default:
            close(.protocolViolation, "unexpected \"\(message.typeName)\" in state \(state)", into: &out)
        }
    }

    // MARK: - Handshake

    mutating func handshake(_ hello: Hello, into out: inout [SyncSessionAction]) {
        let limits = configuration.limits
        guard hello.credit >= limits.minPeerWindow, hello.maxMessageSize >= limits.minPeerWindow,
              hello.credit <= UInt64(limits.maxOutstandingCredit) else {
            return close(.protocolViolation, "hello: credit and max must be at least \(limits.minPeerWindow) bytes", into: &out)
        }
        guard configuration.supportedVersions.contains(hello.version) else {
            let list = configuration.supportedVersions.map(String.init).joined(separator: ", ")
            return refuse(.unsupportedVersion, "unsupported protocol version \(hello.version); supported: \(list)", into: &out)
        }
        guard hello.site != configuration.serverSite else {
            return refuse(.policy, "the peer's site id is the server's own", into: &out)
        }
        peer = hello
        state = .authenticating
        out.append(.authenticate(hello))
    }

    mutating func authenticated(_ decision: AuthDecision, now: UInt64, into out: inout [SyncSessionAction]) {
        guard state == .authenticating, let peer else { return }
        switch decision {
        case .refuse(let code, let reason):
            refuse(code, reason, into: &out)
        case .accept(let granted):
            permissions = granted
            credentialDeadline = granted.validForMillis.map { now + $0 }
            scheduleRenewal(granted)
            if configuration.resumable, let request = peer.resume {
                resumeLookup = true
                out.append(.resume(request, site: peer.site))  // answered by a handover or `.resumeNotFound`
                return
            }
            startFresh(now: now, into: &out)
        }
    }

    /// `welcome` for a new session, then what the peer pipelined behind its `hello`.
    mutating func startFresh(now: UInt64, into out: inout [SyncSessionAction]) {
        guard let peer else { return }
        resumeLookup = false
        state = .ready
        credit = Int64(peer.credit)
        uploadCredit = Int64(configuration.uploadCredit)
        if configuration.resumable && peer.capabilities.contains(SyncCapability.resume) {
            resumption = SessionResumption(token: SessionResumption.newToken())
        }
        send(.welcome(Welcome(site: configuration.serverSite, sessionID: configuration.sessionID,
                              heartbeatMillis: configuration.heartbeatMillis,
                              maxMessageSize: UInt64(configuration.limits.maxMessageSize),
                              credit: configuration.uploadCredit, resumeToken: resumption?.token,
                              credentials: credentialStatus(now: now))), into: &out)
        let pipelined = early
        early = []
        for (message, size) in pipelined where state == .ready { dispatch(message, size: size, now: now, into: &out) }
    }

    /// The answer to the peer's `auth`: new permissions and expiry, or the end of the session.
    mutating func reauthenticated(_ decision: AuthDecision, epoch: UInt64, now: UInt64, into out: inout [SyncSessionAction]) {
        guard state == .ready, refreshInFlight == epoch else { return }
        refreshInFlight = nil
        switch decision {
        case .refuse(let code, let reason):
            close(code, reason, into: &out)
        case .accept(let granted):
            credentialEpoch = epoch
            replacePermissions(granted, now: now, into: &out)
            scheduleRenewal(granted)
            send(.authRefreshed(credentialStatus(now: now)), into: &out)
        }
    }

    /// Credentials' scopes replace the old ones (they are not merged): a subscription on a
    /// collection no longer readable ends with `sub_error`, and nothing more of that collection is
    /// delivered (`decide` forgets held documents there as their changes pass).
    mutating func replacePermissions(_ granted: SyncPermissions, now: UInt64, into out: inout [SyncSessionAction]) {
        let old = permissions
        permissions = granted
        credentialDeadline = granted.validForMillis.map { now + $0 }
        for id in order {
            guard let sub = subscriptions[id] else { continue }
            let c = sub.query.collection
            if !granted.read.covers(c) {
                unsubscribe(id)
                send(.subscriptionError(id: id, message: "not permitted to read collection \(c) (credentials changed)"), into: &out)
            } else if old.readRules.condition(for: c) != granted.readRules.condition(for: c) {
                // The subscription's query holds the old rule; the peer subscribes again under the new one.
                unsubscribe(id)
                send(.subscriptionError(id: id, message: "the read rules for collection \(c) changed (credentials changed); subscribe again"), into: &out)
            }
        }
    }

    mutating func refuse(_ code: SyncCloseCode, _ reason: String, into out: inout [SyncSessionAction]) {
        send(.refuse(code: code.rawValue, reason: reason), into: &out)
        close(code, reason, into: &out)
    }

    // MARK: - Time

    mutating func tick(now: UInt64, into out: inout [SyncSessionAction]) {
        switch state {
        case .awaitingHello, .authenticating:
            if now >= handshakeDeadline { close(.timeout, "no handshake within \(handshakeDeadline - openedAt) ms", into: &out) }
        case .ready:
            if let credentialDeadline, now >= credentialDeadline {
                return close(.unauthorized, "credentials expired", into: &out)
            }
            sendRenewalIfDue(now: now, into: &out)
            expireQueries(now: now, into: &out)
            let hb = configuration.heartbeatMillis
            let idle = now >= lastReceived ? now - lastReceived : 0
            if idle >= 3 * hb { return close(.timeout, "nothing received for \(idle) ms", into: &out) }
            if detached { return }  // nothing goes out until the peer resumes
            if resumption?.rackPending == true { sendRack(into: &out) }
            if idle >= hb && now >= max(lastReceived, lastPingSent) + hb {
                pingCounter += 1
                lastPingSent = now
                send(.ping(pingCounter), into: &out)
            }
            if let cursor, cursor > lastCheckpointSent, suspended == nil, !isSyncing,
               now >= lastCheckpointAt + configuration.idleCheckpointMillis {
                sendCheckpoint(cursor, now: now, into: &out)
            }
        case .closed:
            break
        }
    }

    // MARK: - Sending and closing

    mutating func send(_ m: SyncMessage, capacity: Int = 64, into out: inout [SyncSessionAction]) {
        let bytes = m.encode(capacity: capacity)
        if m.consumesCredit { credit -= Int64(bytes.count) }
        if resumption != nil && m.isNumbered {
            resumption?.recordSent(bytes)
            if (resumption?.unconfirmedBytes ?? 0) > maxUnconfirmedBytes { unconfirmedOverflow = true }
        }
        transportQueued += bytes.count
        out.append(.send(bytes, m))
    }

    mutating func sendCheckpoint(_ txn: Int64, now: UInt64, into out: inout [SyncSessionAction]) {
        lastCheckpointSent = txn
        lastCheckpointAt = now
        send(.checkpoint(txn: txn), into: &out)
    }

    /// Closes with `code`; the reason is cut to the close-frame limit at a character boundary.
    mutating func close(_ code: SyncCloseCode, _ reason: String, into out: inout [SyncSessionAction]) {
        guard state != .closed else { return }
        state = .closed
        out.append(.close(code: code.rawValue, reason: configuration.limits.closeReason(reason)))
    }
}
