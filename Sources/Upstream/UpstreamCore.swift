// The loop-confined half of `UpstreamReplicator`: the link, the current session, the download
// queue (UpstreamCore+Download.swift) and the upload pipeline (UpstreamCore+Upload.swift). Every
// method runs on the replicator's event-loop thread; store calls run as tasks and come back here
// with `onLoop`.
//
// A session, once the upstream's `welcome` has come:
//   1. record the upstream's site id (another one than before drops the download checkpoints);
//   2. subscribe, resuming each subscription from its stored checkpoint with its `have`;
//   3. upload from the stored upload position once every subscription is synced (the session's
//      `canUpload`), and whenever the change feed's head moves.
// A session that ends loses only what was in flight: downloads already received are still merged
// (their checkpoints with them), and uploads not acknowledged are read again from the stored
// position on the next session.

import CRDT
import DQL
import Glibc
import Logging
import Sockets
import Store
import SyncPeer
import SyncProtocol
import Values

/// How a subscription starts (PROTOCOL.md §4.3): resumed from its stored checkpoint with the
/// documents held (`have`), or, with no checkpoint, from nothing with the documents already here
/// and their state digests (`known`), so that what is held is not sent again.
enum SubscriptionStart: Sendable {
    case resume(checkpoint: Int64, have: [UInt64])
    case fresh(known: [KnownState])
}

/// One document uploaded: the session sends `ref` and `delta`; `position` is its change-log row.
struct UpstreamUpload: SyncUpload {
    var ref: DocumentRef
    var delta: [UInt8]
    var position: ChangeLogPosition
    /// The delta is the document's full state (a creation, or a retry after `deltaGap`).
    var isFullState: Bool
    /// The upstream lacked an earlier change (`deltaGap`): send the current full state instead.
    var needsFullState = false
    /// The `up` it went in.
    var seq: UInt64 = 0
}

final class UpstreamCore: SyncLinkDelegate {
    typealias Session = SyncClientSession<UpstreamUpload>

    let store: DocumentStore
    let configuration: UpstreamConfiguration
    /// The database row's name: the URL without user information.
    let upstreamKey: String
    let link: SyncLink
    let loop: EventLoop
    let status: StatusBox
    let logger: Logger
    let configured: [SyncSubscription]

    var session: Session?
    /// The server's presence gossip, with the upstream as one of its links (UpstreamPresence.swift).
    var presence: UpstreamPresence?
    var presenceLinked = false
    /// Counts sessions, so a store call's result can tell whether its session is still the current one.
    var generation = 0
    /// The upstream's site id as stored (nil before any session): changes with this origin came from it.
    var upstreamSite: Int64?
    /// Set once the session's subscriptions went out (after the store told where each resumes).
    var subscribed = false
    /// The change feed's head when the session began: uploads reach it before subscriptions go out.
    var drainTarget: Int64?
    var relayed = RelayedSubscriptions()
    var stopped = false
    /// This instance may replicate: it holds the database's replication lock (`UpstreamLease`),
    /// or runs without one. A standby instance keeps no link.
    var leading = false
    private var tickTimer: TimerID?
    private var headListener: UInt64?
    /// Credentials of the next `hello` (a JWT file is read again at each connection).
    var credentials: SyncCredentials?
    private var sessionCredentials: SyncCredentials?
    private var refreshInFlight = false
    private var credentialsReadAt: UInt64 = 0
    /// The JWT file's modification time when last read: a changed file is read at the next tick.
    private var credentialsFileStamp: timespec?

    // Download queue (UpstreamCore+Download.swift).
    var inbound: [Inbound] = []
    var merging = false
    /// Documents asked for with `want` (a delta did not apply) and not merged yet: no checkpoint
    /// is stored meanwhile, since it would cover a change not held here.
    var wantedRefs: Set<DocumentRef> = []
    /// When the entries of the merge in progress arrived.
    var mergingSince: Double?

    // Upload pipeline (UpstreamCore+Upload.swift).
    var uploads = UploadPipeline()
    var reading = false
    /// Store calls that failed in a row (the retry delay grows with them).
    var storeFailures = 0
    /// A local commit came while a backlog read was running: read again after it.
    var committedDuringRead = false
    /// Uploading the documents themselves (UpstreamCore+DocumentPass.swift), when set.
    var documentPass: DocumentPass?
    var preparing = false
    var savingPosition = false
    /// The upload position as last stored.
    var savedPosition = ChangeLogPosition(txn: 0, seq: -1)
    var nextSeq: UInt64 = 1
    var retryTimer: TimerID?

    init(store: DocumentStore, configuration: UpstreamConfiguration, subscriptions: [SyncSubscription], link: SyncLink,
         status: StatusBox, logger: Logger) {
        self.store = store
        self.configuration = configuration
        self.upstreamKey = configuration.rowKey
        self.configured = subscriptions
        self.link = link
        self.loop = link.loop
        self.status = status
        var logger = logger
        logger[metadataKey: "upstream"] = .string(configuration.displayURL)
        self.logger = logger
    }

    static func nowMillis() -> UInt64 { NanoTime.now().nanoseconds / 1_000_000 }
    static func epochSeconds() -> Double { Double(Replica.systemMillis()) / 1000 }

    /// Runs `body` on this core's loop (from a store task).
    func onLoop(_ body: @escaping (UpstreamCore) -> Void) -> @Sendable () -> Void {
        let bound = LoopBound((core: self, body: body), loop: loop)
        return { bound.loop.execute { let b = bound.value; b.body(b.core) } }
    }

    /// Runs store work as a task and hands its result to `then` on this core's loop.
    func run<T: Sendable>(_ work: @escaping @Sendable () async throws(StoreError) -> T,
                          then: @escaping (UpstreamCore, Result<T, StoreError>) -> Void) {
        let bound = LoopBound((core: self, then: then), loop: loop)
        Task {
            let result: Result<T, StoreError>
            do throws(StoreError) { result = .success(try await work()) } catch { result = .failure(error) }
            bound.loop.execute { let b = bound.value; b.then(b.core, result) }
        }
    }

    var isIdle: Bool { stopped && !merging && !link.isActive }

    // MARK: - Lifecycle

    func start(leading: Bool) {
        self.leading = leading
        let wake = onLoop { $0.localCommitted() }
        headListener = store.changeFeed.addHeadListener { _ in wake() }
        // The stored state first, for the status (each session reads it again before it starts).
        let store = self.store, key = upstreamKey
        run({ () async throws(StoreError) in try await store.upstreamRecord(key) }) { core, record in
            switch record {
            case .success(let r):
                if core.upstreamSite == nil { core.upstreamSite = r.upstreamSite }
                core.status.update { $0.uploadedThrough = r.uploaded; $0.upstreamSite = r.upstreamSite.map { UInt64(bitPattern: $0) } }
            case .failure(let error):
                core.logger.warning("cannot read the upstream's replication state yet", metadata: ["error": "\(error)"])
            }
        }
        if leading { connect() }
        scheduleTick()
    }

    func connect() {
        guard !stopped, leading else { return }
        readCredentials()
        link.connectNow()
    }

    /// The replication lock was taken (replicate) or is held elsewhere or lost (stand by: end the
    /// session and keep no link; what is being merged still commits, harmlessly).
    func lead(_ held: Bool, why: String) {
        guard !stopped, !(held && leading) else { return }
        leading = held
        if held {
            logger.notice("replicating with the upstream from this instance", metadata: ["why": "\(why)"])
            connect()
            return
        }
        logger.notice("standing by: not replicating with the upstream from this instance", metadata: ["why": "\(why)"])
        status.update { $0.state = .standby; $0.standbyReason = why }
        link.halt()
        if var s = session {
            let actions = s.close(code: SyncCloseCode.normal.rawValue, reason: "another instance of this node replicates")
            session = s
            perform(actions)
        } else if link.isActive {
            link.close(code: SyncCloseCode.normal.rawValue, reason: "another instance of this node replicates")
        }
    }

    func stop() {
        stopped = true
        if let t = tickTimer { loop.cancelTimer(t); tickTimer = nil }
        if let t = retryTimer { loop.cancelTimer(t); retryTimer = nil }
        if let token = headListener { store.changeFeed.removeListener(token); headListener = nil }
        if var s = session {
            let actions = s.close(code: SyncCloseCode.normal.rawValue, reason: "local node shutting down")
            session = s
            perform(actions)
        }
        link.stop()
    }

    // MARK: - The link

    func syncLinkConnected(_ link: SyncLink) {
        guard leading else {
            // Connected while going to stand by.
            return link.close(code: SyncCloseCode.normal.rawValue, reason: "another instance of this node replicates")
        }
        status.update { $0.standbyReason = nil }
        generation += 1
        subscribed = false
        drainTarget = nil
        var c = Session.Configuration(site: store.siteID.rawValue, peerKey: Self.peerKey(store.siteID.rawValue),
                                      deviceName: configuration.deviceName, credentials: credentials)
        c.metadata = ["client": .string("BigPeer"), "role": .string("local-node")]
        c.credit = configuration.downloadCredit
        c.uploadBatchDocuments = configuration.uploadBatchDocuments
        c.uploadBatchBytes = configuration.uploadBatchBytes
        c.uploadsInFlight = configuration.uploadsInFlight
        // Told before the credentials expire (`renew`), the link reads its token source at once
        // instead of at the next `credentialsRereadInterval` (which stays, for servers without `renew`).
        c.renewsCredentials = credentials != nil
        sessionCredentials = credentials
        refreshInFlight = false
        var s = Session(configuration: c)
        let actions = s.start(now: Self.nowMillis())
        session = s
        perform(actions)
    }

    func syncLink(_ link: SyncLink, received bytes: [UInt8]) {
        guard var s = session else { return }
        let actions = s.receive(bytes, now: Self.nowMillis())
        session = s
        perform(actions)
        pumpUploads()
    }

    func syncLinkDown(_ link: SyncLink, reason: String, wasOpen: Bool) {
        presenceLinkDown()
        session?.linkClosed()
        session = nil
        subscribed = false
        uploads.linkDown()
        preparing = false
        // What was received and not yet merged goes: its checkpoints were not stored, so the next
        // session resumes before it (and the upstream's credit, granted anew, bounds it again).
        // Wanted documents come again with that resume.
        inbound.removeAll()
        wantedRefs.removeAll()
        noteDownloadQueue()
        let now = Self.epochSeconds()
        status.update { st in
            st.session = nil
            if !leading && !stopped {
                st.state = .standby
            } else if st.state != .refused || !wasOpen {
                st.state = stopped ? .offline : (wasOpen ? .connecting : .offline)
            }
            st.lastError = reason
            st.lastErrorAt = now
            st.subscriptions = [:]
        }
        if stopped || !leading { return }
        logger.notice("upstream link down", metadata: ["reason": "\(reason)", "attempts": "\(link.failedAttempts)"])
        readCredentials()
    }

    // MARK: - The session's actions

    func perform(_ actions: [Session.Action]) {
        for action in actions {
            switch action {
            case .send(let bytes):
                link.send(bytes)
            case .close(let code, let reason):
                link.close(code: code, reason: reason)
            case .connected(let welcome), .resumed(let welcome):
                connected(welcome)  // never resumed: the replicator does not ask for it
            case .moveFailed:
                break  // the replicator has one link and never moves
            case .refused(let code, let reason):
                let now = Self.epochSeconds()
                status.update { st in
                    st.state = .refused
                    st.lastError = "the upstream refused the session (\(code)): \(reason)"
                    st.lastErrorAt = now
                }
                logger.error("the upstream refused the session", metadata: ["code": "\(code)", "reason": "\(reason)"])
            case .apply(let entries, let bytes):
                status.update { $0.downloadedBytes += bytes }
                enqueue(.entries(entries, bytes: bytes, generation: generation, receivedAt: Self.epochSeconds()))
            case .saveCheckpoints(let checkpoints):
                enqueue(.checkpoints(checkpoints))
            case .acknowledged(let sent, let rejected):
                acknowledged(sent, rejected: rejected)
            case .subscriptionFailed(let key, let message):
                status.update { $0.subscriptionErrors[key] = message; $0.subscriptions[key] = nil }
                logger.error("the upstream refused a subscription", metadata: ["subscription": "\(key)", "error": "\(message)"])
            case .fullResyncFinished(let key, let delivered):
                // A small peer evicts what a full re-sync did not send again; a local node keeps
                // it: its documents are also its local peers' and its own (docs/LOCAL-NODE.md).
                logger.info("full re-sync of a subscription finished", metadata: ["subscription": "\(key)", "documents": "\(delivered.count)"])
            case .gone(let refs):
                // The upstream has none of them (or may not show them): no longer awaited, so
                // checkpoints are stored again. The copies stay, as after a full re-sync: they
                // are also this node's local peers' and its own (docs/LOCAL-NODE.md).
                wantedRefs.subtract(refs)
                logger.info("the upstream has no such documents", metadata: ["documents": "\(refs.count)"])
            case .presence(let records):
                presence?.received(records)
            case .remoteQuery:
                break  // not produced: the upstream link leaves remote queries unsupported (answered `not_allowed`)
            case .credentialsExpiring(let millis):
                credentialsExpiring(inMillis: millis)
            case .credentialsRefreshed:
                refreshInFlight = false
                sessionCredentials = credentials
                status.update { $0.credentialRefreshes += 1 }
                logger.info("the upstream accepted renewed credentials")
            }
        }
    }

    private func connected(_ welcome: Welcome) {
        link.sessionWasAccepted()
        presenceLinkUp(welcome)
        let site = Int64(bitPattern: welcome.site)
        let now = Self.epochSeconds()
        status.update { st in
            st.state = .connected
            st.session = welcome.sessionID
            st.sessions += 1
            st.upstreamSite = welcome.site
            st.lastExchangeAt = now
        }
        logger.notice("upstream session accepted", metadata: ["session": "\(welcome.sessionID)", "site": "\(welcome.site)"])
        let generation = self.generation
        let store = self.store, key = upstreamKey
        let wanted = wantedSubscriptions()
        run({ () async throws(StoreError) in
            let before = try await store.upstreamRecord(key)
            var record = before
            if before.upstreamSite != site {
                _ = try await store.recordUpstreamSite(key, site: site)
                record = try await store.upstreamRecord(key)
            }
            let fresh = wanted.filter { record.checkpoints[Self.storageKey($0.key)] == nil }
            var known: [String: [KnownState]] = [:]
            for sub in fresh { known[sub.key] = try await Self.known(store, sub) }
            return (previous: before.upstreamSite, record: record, logHolds: try await store.changeLogHolds(after: record.uploaded),
                    fresh: fresh, known: known)
        }) { core, prepared in
            guard core.generation == generation, core.session != nil else { return }
            switch prepared {
            case .success(let (previous, record, logHolds, fresh, known)):
                if let previous, previous != site {
                    core.logger.warning("another database answers at the upstream URL (new site id): its checkpoints are dropped and everything in the change log is uploaded again",
                                        metadata: ["previous": "\(UInt64(bitPattern: previous))", "site": "\(welcome.site)"])
                }
                core.upstreamSite = site
                // The stored position, unless this process has seen acks past it (still being stored).
                let start = previous == site ? max(record.uploaded, core.uploads.acknowledged) : record.uploaded
                core.savedPosition = record.uploaded
                core.uploads.start(at: start)
                core.status.update { $0.uploadedThrough = record.uploaded }
                // The change log no longer holds everything after the position (pruned before any
                // upstream held it back): the documents themselves go up first.
                core.documentPass = logHolds ? nil : DocumentPass()
                if !logHolds {
                    core.logger.notice("the change log does not reach back to the upload position: uploading every document's state first")
                }
                // Subscriptions without a checkpoint first (an initial sync: uploads wait for it,
                // as a small peer's do, so that a document created here over one the upstream
                // deleted comes back merged, PROTOCOL.md §4.6); then the uploads; then the resumed
                // subscriptions (`subscribeWhenDrained`).
                core.subscribeFresh(fresh, known: known)
                core.drainTarget = core.store.changeFeed.head
                core.pumpUploads()
                core.subscribeWhenDrained()
            case .failure(let error):
                core.localFailure("cannot prepare the session: \(error)")
            }
        }
    }

    /// Subscribes, without waiting for the uploads, to subscriptions that start from nothing
    /// (listing in `known` what is here already).
    private func subscribeFresh(_ fresh: [SyncSubscription], known: [String: [KnownState]]) {
        guard var s = session, !fresh.isEmpty else { return }
        var actions: [Session.Action] = []
        for sub in fresh { actions += s.subscribe(sub, resume: nil, known: known[sub.key]) }
        session = s
        let listed = fresh.reduce(0) { $0 + (known[$1.key]?.count ?? 0) }
        status.update { $0.knownListed += listed }
        status.update { st in for sub in fresh where st.subscriptions[sub.key] == nil { st.subscriptions[sub.key] = false } }
        perform(actions)
    }

    /// Subscribes the rest once the uploads have caught up with what was committed here when the
    /// session began (`drainTarget`). Uploading first lets every resumed subscription list in `have`
    /// every document held here — those changed while apart included, which are uploaded by then
    /// — so the upstream sends deltas for them and does not send their merged states back; a
    /// document created here is only ever listed once uploaded (PROTOCOL.md §4.3, §4.6).
    func subscribeWhenDrained() {
        guard let target = drainTarget, uploads.started, uploads.acknowledged.completeThrough >= target else { return }
        drainTarget = nil
        let generation = self.generation, site = upstreamSite ?? 0
        let subscriptions = wantedSubscriptions()
        let added = subscriptions.filter { !(session?.subscriptionKeys.contains($0.key) ?? false) }  // not the fresh ones
        let store = self.store, key = upstreamKey, uploaded = uploads.acknowledged
        run({ () async throws(StoreError) in
            var record = try await store.upstreamRecord(key)
            record.uploaded = max(record.uploaded, uploaded)  // acknowledged, perhaps not stored yet
            return try await Self.starts(store, added, record: record, site: site)
        }) { core, prepared in
            guard core.generation == generation, core.session != nil else { return }
            switch prepared {
            case .success(let starts): core.subscribe(subscriptions, starts: starts)
            case .failure(let error): core.localFailure("cannot read the subscriptions' checkpoints: \(error)")
            }
        }
    }

    /// How each subscription starts: from its stored checkpoint, or from nothing with `known`.
    static func starts(_ store: DocumentStore, _ subscriptions: [SyncSubscription], record: UpstreamRecord, site: Int64)
        async throws(StoreError) -> [String: SubscriptionStart] {
        var out: [String: SubscriptionStart] = [:]
        for sub in subscriptions {
            if let cp = record.checkpoints[storageKey(sub.key)] {
                out[sub.key] = .resume(checkpoint: cp, have: try await have(store, sub, record: record, site: site))
            } else {
                out[sub.key] = .fresh(known: try await known(store, sub))
            }
        }
        return out
    }

    /// The `known` of a subscription without a checkpoint: the documents here that match it, with
    /// their state digests, ascending by document hash (PROTOCOL.md §4.3, `knownStates`); at most
    /// `maxKnown` (any subset is correct: the others are sent whole).
    static func known(_ store: DocumentStore, _ sub: SyncSubscription) async throws(StoreError) -> [KnownState] {
        guard case .select(let statement)? = try? DQL.parse(sub.query) else { return [] }
        let states = try await store.knownStates(matching: statement, arguments: sub.arguments, limit: maxKnown)
        var known = states.map { KnownState(document: DocumentHash.of(collection: sub.collection, id: $0.id), state: $0.digest) }
        known.sort()
        // Two ids with one hash: neither is listed (the server could not tell which is meant).
        var unique: [KnownState] = []
        unique.reserveCapacity(known.count)
        var i = 0
        while i < known.count {
            var j = i + 1
            while j < known.count, known[j].document == known[i].document { j += 1 }
            if j == i + 1 { unique.append(known[i]) }
            i = j
        }
        return unique
    }

    /// The `have` of a resumed subscription: hashes of the documents held here with every change
    /// up to the checkpoint (PROTOCOL.md §4.3, `heldDocumentIDs`); empty when there are too many.
    static func have(_ store: DocumentStore, _ sub: SyncSubscription, record: UpstreamRecord, site: Int64) async throws(StoreError) -> [UInt64] {
        guard case .select(let statement)? = try? DQL.parse(sub.query) else { return [] }
        guard let ids = try await store.heldDocumentIDs(matching: statement, arguments: sub.arguments, uploadedThrough: record.uploaded.completeThrough,
                                                       upstreamSite: site, limit: maxHave) else { return [] }
        var hashes = ids.map { DocumentHash.of(collection: sub.collection, id: $0) }
        hashes.sort()
        var unique: [UInt64] = []
        unique.reserveCapacity(hashes.count)
        for h in hashes where unique.last != h { unique.append(h) }
        return unique
    }

    /// How a subscription's key (query, NUL, arguments) is stored: as the JSON array
    /// `[query, arguments]`, which holds no NUL byte (PostgreSQL text cannot) and reads back
    /// unambiguously.
    static func storageKey(_ key: String) -> String {
        let parts = key.split(separator: "\u{0}", maxSplits: 1, omittingEmptySubsequences: false)
        return JSON.string(.array(parts.map { .string(String($0)) }))
    }

    /// Most documents listed in one `have` (8 bytes each: 8 MiB of the 16 MiB a message may have).
    static let maxHave = 1 << 20
    /// Most documents listed in one `known` (16 bytes each: 8 MiB).
    static let maxKnown = 1 << 19

    /// Configured subscriptions plus the relayed ones.
    func wantedSubscriptions() -> [SyncSubscription] {
        var out = configured
        if configuration.relaySubscriptions {
            for sub in relayed.relayed.sorted(by: { $0.key < $1.key }) where !out.contains(sub) { out.append(sub) }
        }
        return out
    }

    private func subscribe(_ subscriptions: [SyncSubscription], starts: [String: SubscriptionStart]) {
        guard var s = session else { return }
        var actions = s.keepOnly(Set(subscriptions.map(\.key)))
        for sub in subscriptions where !s.subscriptionKeys.contains(sub.key) {
            switch starts[sub.key] {
            case .resume(let checkpoint, let have)?: actions += s.subscribe(sub, resume: (checkpoint, have))
            case .fresh(let known)?:
                actions += s.subscribe(sub, resume: nil, known: known)
                status.update { $0.knownListed += known.count }
            case nil: actions += s.subscribe(sub, resume: nil)  // wanted since the store was asked
            }
        }
        session = s
        subscribed = true
        let keys = Set(subscriptions.map(\.key)).subtracting(s.refusedSubscriptionKeys)
        status.update { st in
            st.subscriptions = st.subscriptions.filter { keys.contains($0.key) }  // a relayed one whose linger ended
            for sub in subscriptions where keys.contains(sub.key) && st.subscriptions[sub.key] == nil { st.subscriptions[sub.key] = false }
        }
        perform(actions)
        pumpUploads()
        // Relayed subscriptions that changed while the store was asked where these resume.
        resubscribe()
    }

    /// The relayed subscriptions changed (from the server's sessions).
    func relay(_ subscriptions: Set<SyncSubscription>) {
        guard configuration.relaySubscriptions else { return }
        relayed.update(subscriptions, at: Self.nowMillis(), linger: UInt64(configuration.relayLinger.components.seconds * 1000))
        resubscribe()
    }

    /// Brings the session's subscriptions in line with `wantedSubscriptions()`: new ones resume
    /// from their stored checkpoints (read again: a relayed query may have been held before).
    func resubscribe() {
        guard subscribed, session?.state == .ready else { return }
        // Keys the upstream refused in this session are not asked for again (nor compared: they
        // would never match, and each pass costs store reads).
        guard let s = session else { return }
        let wanted = wantedSubscriptions().filter { !s.refusedSubscriptionKeys.contains($0.key) }
        guard Set(wanted.map(\.key)) != s.subscriptionKeys else { return }
        let generation = self.generation
        let site = upstreamSite ?? 0
        let added = wanted.filter { !s.subscriptionKeys.contains($0.key) }
        let store = self.store, key = upstreamKey
        run({ () async throws(StoreError) in
            try await Self.starts(store, added, record: try await store.upstreamRecord(key), site: site)
        }) { core, prepared in
            guard core.generation == generation else { return }
            switch prepared {
            case .success(let starts): core.subscribe(core.wantedSubscriptions(), starts: starts)
            case .failure(let error): core.localFailure("cannot read the subscriptions' checkpoints: \(error)")
            }
        }
    }

    /// The store failed under the session: end it (nothing unpersisted was acknowledged either
    /// way) and let the link reconnect.
    func localFailure(_ why: String) {
        logger.error("upstream replication: local store failure", metadata: ["error": "\(why)"])
        status.update { $0.lastError = "local store: \(why)"; $0.lastErrorAt = Self.epochSeconds() }
        guard var s = session else { return }
        let actions = s.close(code: SyncCloseCode.internalError.rawValue, reason: "local store failure")
        session = s
        perform(actions)
    }

    // MARK: - Timers and credentials

    private func scheduleTick() {
        tickTimer = loop.scheduleTimer(after: .milliseconds(100)) { [weak self] in
            guard let self, !self.stopped else { return }
            self.tickTimer = nil
            let now = Self.nowMillis()
            if var s = self.session {
                let actions = s.tick(now: now)
                self.session = s
                self.perform(actions)
            }
            if self.relayed.expire(at: now) { self.resubscribe() }
            if now &- self.credentialsReadAt >= UInt64(self.configuration.credentialsRereadInterval.components.seconds * 1000)
                || self.credentialsFileChanged() {
                self.readCredentials()
            }
            self.scheduleTick()
        }
    }

    /// Reads the credentials (a JWT file again); a new token reaches a running session with `auth`.
    func readCredentials() {
        credentialsReadAt = Self.nowMillis()
        switch configuration.credentials {
        case nil: credentials = nil
        case .apiKey(let key): credentials = .apiKey(key)
        case .jwtFile(let path):
            credentialsFileStamp = Self.modificationTime(path)
            guard let token = Self.readToken(path) else {
                logger.warning("cannot read the upstream JWT file", metadata: ["path": "\(path)"])
                return
            }
            credentials = .jwt(token)
        }
        guard let credentials, credentials != sessionCredentials, !refreshInFlight, var s = session, s.state == .ready else { return }
        let actions = s.refreshCredentials(credentials)
        session = s
        refreshInFlight = true
        perform(actions)
    }

    /// The upstream says the session's credentials expire in `millis` (`renew`, PROTOCOL.md §4.13):
    /// the token source is read now, and a new token goes up with `auth`. When it holds none (an
    /// API key, or a JWT file not yet replaced) the operator is told; the file is still watched,
    /// and a token written later is sent as before.
    private func credentialsExpiring(inMillis millis: UInt64) {
        readCredentials()
        if credentials == sessionCredentials && !refreshInFlight {
            logger.warning("the upstream credentials expire soon and their source holds no new token",
                           metadata: ["expires_in_ms": "\(millis)"])
        }
    }

    /// Whether the JWT file's modification time differs from when it was last read (one `stat`).
    private func credentialsFileChanged() -> Bool {
        guard case .jwtFile(let path)? = configuration.credentials else { return false }
        return Self.modificationTime(path).map { m in credentialsFileStamp.map { $0.tv_sec != m.tv_sec || $0.tv_nsec != m.tv_nsec } ?? true } ?? false
    }

    static func modificationTime(_ path: String) -> timespec? {
        var st = stat()
        guard stat(path, &st) == 0 else { return nil }
        return st.st_mtim
    }

    static func readToken(_ path: String) -> String? {
        guard let bytes = FileBytes.read(path, maxBytes: 16 << 10) else { return nil }
        let token = String(decoding: bytes, as: UTF8.self).filter { !$0.isWhitespace }  // a JWT has none; files end in a newline
        return token.isEmpty ? nil : token
    }

    /// A stable peer key derived from the site id (8 bytes, big-endian), as SmallPeer's.
    static func peerKey(_ site: UInt64) -> [UInt8] { (0..<8).map { UInt8(truncatingIfNeeded: site >> (56 - 8 * $0)) } }
}
