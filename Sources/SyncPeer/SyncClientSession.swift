// The peer side of one sync session (PROTOCOL.md §5), sans-I/O: bytes and clock readings in,
// actions out. A driver (SmallPeer's SyncClient, the server's upstream replicator) moves the bytes
// over a `SyncLink`, applies what the session hands it to its store, and feeds the outcome back
// (`applied`). A new link gets a new session. `Upload` is the driver's record of one uploaded
// document: the session only reads its reference and delta, and hands it back in `acknowledged`.
//
//   [idle] --start--> send hello --> [awaitingWelcome] --welcome--> [ready] --bye/violation/timeout--> [closed]
//                                          |  refuse / 10 s
//                                          v
//                                       [closed]
//
// In [ready]: `sub` for every subscription (with `cp` + `have` when resuming); `docs`/`changes`
// are applied, then their bytes are granted back as credit and undeliverable deltas are asked for
// with `want`; `synced`/`checkpoint` are persisted after what came before them; `up` is sent only
// while upload credit is positive, one batch per free slot, and acked batches leave the outbox.

import SyncProtocol
import Values

/// One document's upload as a driver records it (PROTOCOL.md §4.8).
public protocol SyncUpload: Sendable, Equatable {
    var ref: DocumentRef { get }
    var delta: [UInt8] { get }
}

public struct SyncClientSession<Upload: SyncUpload>: Sendable {
    public struct Configuration: Sendable {
        public var site: UInt64
        public var peerKey: [UInt8]
        public var deviceName: String
        public var credentials: SyncCredentials?
        public var metadata: [String: Value] = [:]
        /// Download credit granted in `hello` (bytes); every applied message is granted back.
        public var credit: UInt64 = 1 << 20
        /// Largest message this peer accepts (`hello.max`).
        public var maxMessageSize: UInt64 = 16 << 20
        public var handshakeTimeoutMillis: UInt64 = 10_000
        /// Documents and delta bytes per `up` (the server accepts 10 000 documents per message).
        public var uploadBatchDocuments = 500
        public var uploadBatchBytes = 512 << 10
        /// Uploads in flight at once (each waits for its ack).
        public var uploadsInFlight = 4
        /// Whether the peer announces remote queries (`hello.caps`) and runs them (PROTOCOL.md §4.15).
        public var remoteQueries = RemoteQuerySupport.unsupported
        /// Ask for a session that survives its link (PROTOCOL.md §4.16): after `linkClosed` it is
        /// `detached`, and `start` on the next link resumes it.
        public var resumable = false
        /// Ask to be told before the credentials expire (`hello.caps` `renew`, PROTOCOL.md §4.13):
        /// the session then hands the driver `credentialsExpiring`, and the driver sends fresh
        /// credentials with `refreshCredentials`.
        public var renewsCredentials = false

        public init(site: UInt64, peerKey: [UInt8], deviceName: String, credentials: SyncCredentials?) {
            self.site = site
            self.peerKey = peerKey
            self.deviceName = deviceName
            self.credentials = credentials
        }
    }

    public enum State: Sendable, Equatable {
        case idle, awaitingWelcome, ready, closed
        /// A resumable session whose link went away: `start` on a new link resumes it.
        case detached
    }

    /// What the driver must do, in order.
    public enum Action: Sendable, Equatable {
        case send([UInt8])
        /// Close the link with this code (after sending `bye`, already in the actions before it).
        case close(code: UInt16, reason: String)
        /// The handshake finished: call `subscribe(_:)` for the subscriptions and `uploadTaken` for the outbox.
        /// After a resume the server did not accept, the session starts over: uploads that were in
        /// flight are no longer (`uploadingDocuments` is empty) and every subscription is sent again.
        case connected(Welcome)
        /// The session goes on over the new link (PROTOCOL.md §4.16): subscriptions, uploads in
        /// flight and credit are as they were; what neither side received was sent again.
        case resumed(Welcome)
        /// A move to another link (`beginMove`) did not happen: the session stays where it was.
        case moveFailed(reason: String)
        /// The server refused the session (4001 credentials, 4002 version, 4003 policy).
        case refused(code: UInt16, reason: String)
        /// Apply these entries to the store, then call `applied(bytes:wanted:)`.
        case apply([ChangeEntry], bytes: Int)
        /// Persist these checkpoints (everything received before them has been applied).
        case saveCheckpoints([String: Int64])
        /// The server committed (or rejected) an upload: update the outbox.
        case acknowledged([Upload], rejected: [UploadRejection])
        /// The server refused a subscription; it is dropped for this session.
        case subscriptionFailed(key: String, message: String)
        /// A resumed subscription was fully re-sent (the server's log did not reach back to its
        /// checkpoint): evict what the peer holds for it that was not delivered again (§4.5).
        case fullResyncFinished(key: String, delivered: Set<DocumentRef>)
        /// The server accepted the credentials sent with `refreshCredentials` (`auth_ok`): how
        /// long they stay valid, the login's `clientInfo`.
        case credentialsRefreshed(CredentialStatus)
        /// The session's credentials expire in this many milliseconds (`renew`): send fresh ones
        /// with `refreshCredentials`, or the server closes the session with 4001 then.
        case credentialsExpiring(inMillis: UInt64)
        /// The server has none of these documents it was asked for with `want`, or may not show
        /// them to this peer (`gone`, PROTOCOL.md §4.7): they are no longer awaited; the driver
        /// may evict its copies (a peer's copy the server has no row for never gets another change).
        case gone([DocumentRef])
        /// Presence records from the server (PROTOCOL.md §4.14): hand them to the peer's gossip.
        case presence([PresenceRecord])
        /// Run this SELECT on the local store and hand the outcome to `answerQuery` (only with
        /// `remoteQueries` `.allowed`; PROTOCOL.md §4.15).
        case remoteQuery(RemoteQuery)
    }

    public internal(set) var state: State = .idle
    public let configuration: Configuration
    var limits = SyncLimits.default
    public private(set) var welcome: Welcome?
    private var uploadCredit: Int64 = 0
    var lastReceivedAt: UInt64 = 0
    private var lastPingAt: UInt64 = 0
    private var pingCounter: UInt64 = 0
    /// When the current handshake began (the `hello` went out).
    public internal(set) var startedAt: UInt64 = 0
    /// A live subscription of this session.
    struct SessionSubscription: Sendable {
        var key: String
        var collection: String
        var synced = false
        /// Sent with a checkpoint (resume).
        var resumed = false
        /// A resume the server answered with `docs`: its log did not reach back (PROTOCOL.md §4.5).
        var fullResync = false
        /// During a full re-sync: every document delivered, so the rest can be evicted at `synced`.
        var delivered: Set<DocumentRef> = []
    }

    /// Live subscriptions of this session by id.
    private var subscriptions: [UInt32: SessionSubscription] = [:]
    private var nextSubscriptionID: UInt32 = 1
    /// Keys the server refused with `sub_error` in this session: not sent again on this link.
    private var refusedKeys: Set<String> = []
    private var inFlight: [UInt64: [Upload]] = [:]
    private var wanted: Set<DocumentRef> = []
    /// Documents uploaded on this link: the server has them, so a full re-sync never evicts them.
    private var uploaded: Set<DocumentRef> = []
    /// When the last data (`docs`, `changes`, `synced`, `ack`) arrived: "caught up" needs a quiet period.
    public private(set) var lastDataAt: UInt64 = 0
    /// The newest `txn` of an `ack`, and of a `checkpoint` or `synced`, on this link. Caught up
    /// needs the second to reach the first: the server has then handled the change-log rows of
    /// this peer's uploads, and sent the merged state of a document the peer created over a
    /// server version (PROTOCOL.md §4.6). Without it a session could end in between, and the next
    /// one would list that document in `have` with a history it lacks.
    private var ackedThrough: Int64 = -1
    private var checkpointThrough: Int64 = -1
    /// Remote queries handed to the driver and not answered yet (SyncClientSession+RemoteQuery.swift).
    var queriesRunning: [UInt32: RunningQuery] = [:]
    /// Set once the server welcomed this peer into a resumable session.
    public internal(set) var resumption: SessionResumption?
    /// The `hello` on this link asked to resume.
    var resuming = false
    /// The `rx` of the `hello` with `resume` in flight (on this link, or on the link the session
    /// is moving to): the server replays from there, so what arrives meanwhile is skipped then.
    var resumeSentAt: UInt64?
    /// Replayed messages this peer already took on the link it left.
    var skipIncoming: UInt64 = 0
    var lastRackAt: UInt64 = 0
    /// When the pending move's `hello` went out (it times out like a handshake).
    var movingSince: UInt64?
    /// Links this session ran on (1 + the resumes).
    public internal(set) var linksUsed = 0

    public init(configuration: Configuration) {
        self.configuration = configuration
    }

    // MARK: - Inputs

    /// Sends new credentials for this session (`auth`, PROTOCOL.md §4.13): a fresh token before
    /// the old one expires. The server answers `auth_ok`, or closes with 4001 if it refuses them.
    /// Only in [ready] (before, the next `hello` carries them); one at a time (the driver waits
    /// for `credentialsRefreshed` before sending another).
    public mutating func refreshCredentials(_ credentials: SyncCredentials) -> [Action] {
        guard state == .ready else { return [] }
        return [emit(.refreshAuth(credentials))]
    }

    /// The link is up: say hello.
    /// A detached session asks to be resumed instead (PROTOCOL.md §4.16).
    public mutating func start(now: UInt64) -> [Action] {
        guard state == .idle || state == .detached else { return [] }
        if state == .detached, resumeSentAt != nil, let since = movingSince {
            // The resume hello went out on the link being moved to, which is this one.
            state = .awaitingWelcome
            resuming = true
            startedAt = since
            movingSince = nil
            return []
        }
        resuming = state == .detached
        state = .awaitingWelcome
        startedAt = now
        lastReceivedAt = now
        if resuming { resumeSentAt = resumption?.received }
        let request = resuming ? resumption.map { ResumeRequest(token: $0.token, received: $0.received) } : nil
        return [.send(SyncMessage.hello(hello(resume: request)).encode())]
    }

    func hello(resume: ResumeRequest?) -> Hello {
        var capabilities = configuration.remoteQueries == .unsupported ? [] : [SyncCapability.remoteQuery]
        if configuration.resumable { capabilities.append(SyncCapability.resume) }
        if configuration.renewsCredentials { capabilities.append(SyncCapability.renew) }
        capabilities.append(SyncCapability.gone)  // every driver handles `.gone`
        return Hello(site: configuration.site, peerKey: configuration.peerKey, deviceName: configuration.deviceName,
                     metadata: configuration.metadata, credentials: configuration.credentials,
                     credit: configuration.credit, maxMessageSize: configuration.maxMessageSize,
                     capabilities: capabilities, resume: resume)
    }

    /// One message from the server.
    public mutating func receive(_ bytes: [UInt8], now: UInt64) -> [Action] {
        guard state == .awaitingWelcome || state == .ready else { return [] }
        lastReceivedAt = now
        var limits = self.limits
        limits.maxMessageSize = Int(clamping: configuration.maxMessageSize)
        let message: SyncMessage
        do { message = try SyncMessageDecoder.decode(bytes, limits: limits) } catch {
            return fail(error.closeCode.rawValue, error.description)
        }
        if state == .awaitingWelcome {
            switch message {
            case .welcome(let w):
                guard w.version == SyncProtocol.version else { return fail(SyncCloseCode.protocolViolation.rawValue, "welcome for version \(w.version)") }
                if resuming, let rx = w.resumedReceived { return resumed(w, serverReceived: rx, now: now) }
                if resuming { startOver(now: now) }
                state = .ready
                welcome = w
                uploadCredit = Int64(clamping: w.credit)
                linksUsed += 1
                if configuration.resumable, let token = w.resumeToken { resumption = SessionResumption(token: token) }
                return [.connected(w)]
            case .refuse(let code, let reason):
                state = .closed
                return [.refused(code: code, reason: reason), .close(code: code, reason: reason)]
            case .bye(let code, let reason):
                state = .closed
                return [.close(code: code, reason: reason)]
            default:
                return fail(SyncCloseCode.protocolViolation.rawValue, "\(message.typeName) before welcome")
            }
        }
        var out: [Action] = []
        if resumption != nil {
            if skipIncoming > 0, message.isNumbered {
                skipIncoming -= 1  // taken already on the link the session left
                return []
            }
            if case .received(let n) = message {
                do { try resumption?.confirm(n) } catch { return fail(SyncCloseCode.protocolViolation.rawValue, "rack \(n): \(error)") }
                return []
            }
            // No rack while a resume is in flight: the server must not confirm past its `rx`.
            if message.isNumbered, resumption?.noteReceived(size: bytes.count) == true, resumeSentAt == nil { out.append(rack(now: now)) }
        }
        return out + dispatch(message, size: bytes.count, now: now)
    }

    private mutating func dispatch(_ message: SyncMessage, size: Int, now: UInt64) -> [Action] {
        switch message {
        case .documents(let id, let entries):
            if let sub = subscriptions[id], sub.resumed, !sub.synced { subscriptions[id]?.fullResync = true }
            return received(entries, bytes: size, now: now)
        case .changes(_, let entries):
            return received(entries, bytes: size, now: now)
        case .synced(let id, let cp):
            lastDataAt = now
            checkpointThrough = max(checkpointThrough, cp)
            guard var sub = subscriptions[id] else { return [] }  // unsubscribed meanwhile
            sub.synced = true
            let delivered = sub.delivered
            sub.delivered = []
            subscriptions[id] = sub
            var out: [Action] = []
            if sub.fullResync { out.append(.fullResyncFinished(key: sub.key, delivered: delivered.union(uploaded))) }
            out.append(.saveCheckpoints([sub.key: cp]))
            return out
        case .checkpoint(let txn):
            checkpointThrough = max(checkpointThrough, txn)
            var cps: [String: Int64] = [:]
            for (_, sub) in subscriptions where sub.synced { cps[sub.key] = txn }
            return cps.isEmpty ? [] : [.saveCheckpoints(cps)]
        case .subscriptionError(let id, let msg):
            guard let sub = subscriptions.removeValue(forKey: id) else { return [] }
            refusedKeys.insert(sub.key)
            forgetWantsWithoutSubscription()
            return [.subscriptionFailed(key: sub.key, message: msg)]
        case .ack(let seq, let txn, let rejected):
            lastDataAt = now
            ackedThrough = max(ackedThrough, txn)
            guard let sent = inFlight.removeValue(forKey: seq) else {
                return fail(SyncCloseCode.protocolViolation.rawValue, "ack for an unknown upload \(seq)")
            }
            return [.acknowledged(sent, rejected: rejected)]
        case .credit(let n):
            let (sum, overflow) = uploadCredit.addingReportingOverflow(Int64(clamping: n))
            guard !overflow, sum <= limits.maxOutstandingCredit else {
                return fail(SyncCloseCode.protocolViolation.rawValue, "credit above 2^40 bytes")
            }
            uploadCredit = sum
            return []
        case .ping(let n):
            return [emit(.pong(n))]
        case .pong:
            return []
        case .bye(let code, let reason):
            state = .closed
            return [.close(code: code, reason: reason)]
        case .authRefreshed(let status):
            return [.credentialsRefreshed(status)]
        case .credentialsExpiring(let millis):
            return [.credentialsExpiring(inMillis: millis)]
        case .presence(let records):
            return [.presence(records)]
        case .query(let query):
            return received(query, now: now)
        case .gone(let refs):
            // Only what this session asked for: an answer to no `want` of it evicts nothing.
            let awaited = refs.filter { wanted.remove($0) != nil }
            return awaited.isEmpty ? [] : [.gone(awaited)]
        case .hello, .welcome, .refuse, .subscribe, .unsubscribe, .upload, .want, .refreshAuth, .result, .received:
            return fail(SyncCloseCode.protocolViolation.rawValue, "unexpected \(message.typeName) from the server")
        }
    }

    private mutating func received(_ entries: [ChangeEntry], bytes: Int, now: UInt64) -> [Action] {
        lastDataAt = now
        for e in entries { wanted.remove(e.document) }
        for (id, sub) in subscriptions where sub.fullResync && !sub.synced {
            subscriptions[id]?.delivered.formUnion(entries.map(\.document))
        }
        return [.apply(entries, bytes: bytes)]
    }

    /// The driver applied an `.apply`: grant its bytes back and ask for what could not be applied.
    public mutating func applied(bytes: Int, wanted refs: [DocumentRef]) -> [Action] {
        guard state == .ready else { return [] }
        var out: [Action] = [emit(.credit(bytes: UInt64(max(1, bytes))))]
        let fresh = refs.filter { !wanted.contains($0) }
        var at = 0
        while at < fresh.count {
            let chunk = Array(fresh[at..<min(fresh.count, at + limits.maxWantDocuments)])
            wanted.formUnion(chunk)
            out.append(emit(.want(chunk)))
            at += chunk.count
        }
        return out
    }

    /// Timers: handshake timeout, heartbeat ping after `hb` of silence, close after 3 × `hb`.
    public mutating func tick(now: UInt64) -> [Action] {
        switch state {
        case .awaitingWelcome:
            if now &- startedAt >= configuration.handshakeTimeoutMillis {
                // A resume may have reached the server, which then runs the session on this link:
                // leave the link (4010), do not end the session (PROTOCOL.md §4.16).
                if resuming { return leaveLink("no welcome within the handshake timeout") }
                return fail(SyncCloseCode.timeout.rawValue, "no welcome within the handshake timeout")
            }
        case .ready:
            if let movingSince, now &- movingSince >= configuration.handshakeTimeoutMillis {
                moveAbandoned()
                return [.moveFailed(reason: "no welcome within the handshake timeout")]
            }
            let hb = max(1000, welcome?.heartbeatMillis ?? 20_000)
            let silent = now &- lastReceivedAt
            if silent >= 3 * hb { return fail(SyncCloseCode.timeout.rawValue, "nothing received for \(silent) ms") }
            if resumption?.rackPending == true, resumeSentAt == nil, now &- lastRackAt >= 1000 { return [rack(now: now)] }
            if silent >= hb && now &- lastPingAt >= hb {
                lastPingAt = now
                pingCounter += 1
                return [emit(.ping(pingCounter))]
            }
        case .idle, .closed, .detached:
            break
        }
        return []
    }

    /// Subscribes (now ready). `resume` is the stored checkpoint and held-document hashes, if any;
    /// without one, `known` lists documents held already with their state digests, which the
    /// initial sync then does not send again (PROTOCOL.md §4.3).
    public mutating func subscribe(_ sub: SyncSubscription, resume: (checkpoint: Int64, have: [UInt64])?, known: [KnownState]? = nil) -> [Action] {
        guard state == .ready, !refusedKeys.contains(sub.key), !subscriptions.values.contains(where: { $0.key == sub.key }) else { return [] }
        let id = nextSubscriptionID
        nextSubscriptionID &+= 1
        subscriptions[id] = SessionSubscription(key: sub.key, collection: sub.collection, resumed: resume != nil)
        let message = SyncMessage.subscribe(Subscribe(id: id, query: sub.query, arguments: sub.arguments,
                                                     checkpoint: resume?.checkpoint, have: resume?.have,
                                                     known: resume == nil ? known.flatMap { $0.isEmpty ? nil : $0 } : nil))
        return [emit(message)]
    }

    /// Drops the session's subscriptions whose keys are not in `keys` (sends `unsub`).
    public mutating func keepOnly(_ keys: Set<String>) -> [Action] {
        guard state == .ready else { return [] }
        var out: [Action] = []
        for (id, sub) in subscriptions where !keys.contains(sub.key) {
            subscriptions[id] = nil
            out.append(emit(.unsubscribe(id: id)))
        }
        forgetWantsWithoutSubscription()
        return out
    }

    /// The server answers `want` only in collections a subscription of the session reads
    /// (PROTOCOL.md §4.7): a document asked for in a collection no longer subscribed will not come,
    /// and waiting for it would keep the session from ever being caught up.
    private mutating func forgetWantsWithoutSubscription() {
        let collections = Set(subscriptions.values.map(\.collection))
        wanted = wanted.filter { collections.contains($0.collection) }
    }

    /// Subscription keys the server refused in this session (`sub_error`): not sent again on it.
    public var refusedSubscriptionKeys: Set<String> { refusedKeys }

    /// Subscription keys this session has sent (synced or not).
    public var subscriptionKeys: Set<String> { Set(subscriptions.values.map(\.key)) }

    /// Whether an upload may go out now: ready, every subscription synced, positive credit, a free
    /// in-flight slot. Uploads wait for `synced` so that they commit after the initial sync's
    /// snapshot: the server then handles them as live changes and sends the merged state of a
    /// document the peer created over a server version it never received (a tombstone is not in
    /// an initial sync's pages; committed before the snapshot, the peer would never hear of it).
    public var canUpload: Bool {
        state == .ready && uploadCredit > 0 && inFlight.count < configuration.uploadsInFlight && subscriptions.values.allSatisfy(\.synced)
    }

    /// Documents currently uploaded and not yet acknowledged.
    public var uploadingDocuments: Set<DocumentRef> { Set(inFlight.values.flatMap { $0.map(\.ref) }) }

    /// Sends `uploads` as one `up` with sequence number `seq` (the caller checked `canUpload`).
    public mutating func upload(_ uploads: [Upload], seq: UInt64) -> [Action] {
        guard canUpload, !uploads.isEmpty else { return [] }
        let message = SyncMessage.upload(seq: seq, entries: uploads.map { UploadEntry(document: $0.ref, delta: $0.delta) }).encode()
        uploadCredit -= Int64(message.count)
        inFlight[seq] = uploads
        uploaded.formUnion(uploads.map(\.ref))
        resumption?.recordSent(message)
        return [.send(message)]
    }

    /// Every subscription synced, no upload or `want` outstanding, and nothing received for
    /// `quietMillis` (the server sends live changes after `synced` without a marker for "done").
    public func isCaughtUp(now: UInt64, quietMillis: UInt64, outboxEmpty: Bool) -> Bool {
        waitingFor(now: now, quietMillis: quietMillis, outboxEmpty: outboxEmpty) == nil
    }

    /// What keeps the session from being caught up (nil: caught up), for the message of a peer
    /// that gives up waiting: "still receiving" alone said nothing about which condition held.
    public func waitingFor(now: UInt64, quietMillis: UInt64, outboxEmpty: Bool) -> String? {
        var reasons: [String] = []
        if state != .ready { reasons.append("session \(state)") }
        let unsynced = subscriptions.values.filter { !$0.synced }.count
        if unsynced > 0 { reasons.append("\(unsynced) subscription(s) not synced") }
        if !inFlight.isEmpty { reasons.append("\(inFlight.values.map(\.count).reduce(0, +)) uploaded document(s) not acknowledged") }
        if !outboxEmpty { reasons.append("local changes not uploaded") }
        if !subscriptions.isEmpty, ackedThrough > checkpointThrough {
            reasons.append("no checkpoint yet at or after txn \(ackedThrough) of the last upload's ack (at \(checkpointThrough))")
        }
        if !wanted.isEmpty {
            let some = wanted.prefix(3).map { "\($0.collection) \(JSON.string($0.id))" }.joined(separator: ", ")
            reasons.append("\(wanted.count) document(s) asked for with want and not received (\(some))")
        }
        if reasons.isEmpty, now &- lastDataAt < quietMillis { reasons.append("data received \(now &- lastDataAt) ms ago") }
        return reasons.isEmpty ? nil : reasons.joined(separator: "; ")
    }

    /// Closes on purpose (shutdown): `bye` then close.
    public mutating func close(code: UInt16 = SyncCloseCode.normal.rawValue, reason: String = "") -> [Action] {
        guard state == .awaitingWelcome || state == .ready else { state = .closed; return [] }
        return fail(code, reason)
    }

    /// The link went away: a resumable session that was ready waits, `detached`, for the next
    /// link; any other ends.
    public mutating func linkClosed() {
        guard resumption != nil, state == .ready || (state == .awaitingWelcome && resuming) else { state = .closed; return }
        // With a move under way, its link's `welcome` resumes the session (`start` sends nothing).
        state = .detached
        resuming = false
        if resumeSentAt != nil, state == .detached, movingSince == nil { resumeSentAt = nil }
    }

    /// Presence records to send (control traffic, no credit: PROTOCOL.md §4.14); nothing before `welcome`.
    public mutating func presence(_ records: [PresenceRecord]) -> [Action] {
        guard state == .ready, !records.isEmpty else { return [] }
        return [emit(.presence(records))]
    }

    mutating func fail(_ code: UInt16, _ reason: String) -> [Action] {
        state = .closed
        let r = limits.closeReason(reason)
        return [.send(SyncMessage.bye(code: code, reason: r).encode()), .close(code: code, reason: r)]
    }
}
