// The driver of one server-side session: connects a `SyncSession` (pure state machine) to the
// storage behind it and its change feed (`SyncStorage`: BigPeer's store or a small peer's), a
// clock, and a transport given as two closures. Transport adapters (WebSocket endpoint, TCP, BLE,
// the in-memory link of the tests) call `receive` with each complete protocol message and
// `transportClosed` when the link goes away.
//
// Ordering: the session runs under a mutex, and the transport's `send` is called inside it, so
// messages leave in exactly the order the session produced them. `send` must not block (it queues).
// Storage requests run as tasks and feed their results back as inputs. No storage call is made
// under the session's mutex, and the feed calls back (a new head) with no lock of its own held.
//
// Those tasks run on an event loop (`executor`: the transport's loop, or the storage's preferred
// one, for the store one of its pool's), not on Swift's cooperative pool (only a small peer's
// in-memory storage, served on a link without a loop, uses the pool). A page read is a chain of
// awaits (start, two statements, the page), and on the cooperative pool every step waits for one of
// its threads: two on a 2-core machine, held by any long synchronous work for as long as it runs.
// Under a loaded full test suite a page read waited up to 1.3 s to start and 3.5 s for its
// statements that way, and a 120-page initial sync overran its test's 10 s (the "initial-sync
// stall"; docs/ARCHITECTURE.md, "Sync sessions"). On a loop whose sessions the pool prefers, a
// statement starts and resumes on the same thread with no hop; credentials are still checked on the
// cooperative pool (a check may hash or wait, which must not hold a loop).

import SyncProtocol
import DQL
import Glibc
import Synchronization
import Values

public final class SyncConnection: Sendable {
    public struct Transport: Sendable {
        public var send: @Sendable ([UInt8]) -> Void
        public var close: @Sendable (UInt16, String) -> Void
        /// Bytes sent and not yet taken by the socket (the session stops producing at its
        /// `maxQueuedBytes`). Transports without a queue of their own report 0.
        public var queuedBytes: @Sendable () -> Int
        /// Asks for one `SyncConnection.transportDrained()` once the queue has gone down (at once
        /// if it already has). Called when the session paused for a full transport.
        public var notifyWhenDrained: @Sendable () -> Void
        public init(send: @escaping @Sendable ([UInt8]) -> Void, close: @escaping @Sendable (UInt16, String) -> Void,
                    queuedBytes: @escaping @Sendable () -> Int = { 0 }, notifyWhenDrained: @escaping @Sendable () -> Void = {}) {
            self.send = send
            self.close = close
            self.queuedBytes = queuedBytes
            self.notifyWhenDrained = notifyWhenDrained
        }
    }

    let session: Mutex<SyncSession>
    let storage: any SyncStorage
    /// The link the session runs on now (nil while a resumable session waits for its peer), and
    /// which one it is: input from any other link is dropped (SyncConnection+Handover.swift).
    /// Locked inside `session`'s lock, never the other way round.
    let attachment: Mutex<Attachment>
    /// This connection's own link (the one it was created with).
    let ownLink: UInt64
    /// Set once this connection handed its link to the session it resumed: its input goes there.
    let handedOver = Mutex<SyncConnection?>(nil)
    /// This connection's link closed while `handOver` ran, before the session it resumed attached it.
    let closedDuringHandover = Atomic<Bool>(false)
    /// Where resumable sessions are found by token; nil: sessions are not resumable here.
    let resumable: ResumableSessions?
    /// Told once when the session ends (the registry frees its slot).
    let ended = Mutex<(@Sendable () -> Void)?>(nil)
    let authenticate: @Sendable (Hello) async -> AuthDecision
    /// Checks credentials the peer sends with `auth` (for credential epoch `UInt64`).
    let reauthenticate: @Sendable (SyncCredentials, UInt64) async -> AuthDecision
    let clock: @Sendable () -> UInt64
    /// Where storage requests, page reads and the heartbeat run (see the top of this file).
    let executor: any TaskExecutor
    /// This session's turn on the evaluation threads (`InMemoryEvaluation.tenant`): each session is
    /// a tenant of its own, so one peer's expensive subscriptions wait behind each other, not in
    /// front of every other session's and REST client's work.
    let evaluationTenant = InMemoryEvaluation.Tenant("sync-session:\(SyncConnection.sessionNumbers.add(1, ordering: .relaxed).newValue)")
    static let sessionNumbers = Atomic<UInt64>(0)

    /// `body`, with its off-loop work queued in this session's turn (its tasks are not a
    /// request's: nothing else sets the tenant for them).
    func inOwnTurn<T: Sendable>(_ body: @Sendable () async throws -> T) async rethrows -> T {
        try await InMemoryEvaluation.$tenant.withValue(evaluationTenant) { try await body() }
    }
    let feedToken = Mutex<UInt64?>(nil)
    /// The newest change-log head the feed announced that this session's executor has not taken
    /// yet; -1 when no hop to it is scheduled (`headAnnounced`).
    let announcedHead = Atomic<Int64>(-1)
    let timer = Mutex<Task<Void, Never>?>(nil)
    /// The latest page read (`readPage`): the next one delivers its page only after it.
    let pageChain = Mutex<Task<Void, Never>?>(nil)
    /// Where the latest page reads stand, for the message of a stalled sync (`pageReadProgress`).
    let pageReadTrace = Mutex(PageReadTrace())
    /// Told the session's accepted subscriptions after each step that changed them, with the
    /// session's `subscriptionSetVersion` (calls from different threads may arrive out of order:
    /// the newer version wins). Called with no lock held; nil costs nothing per step.
    let subscriptionsChanged: (@Sendable (_ version: UInt64, _ accepted: [SubscriptionQuery]) -> Void)?
    /// The instance's presence gossip (PROTOCOL.md §4.14), told when the session becomes ready,
    /// what presence it receives, and when it ends; nil: presence messages are ignored.
    let presence: PresencePort?
    /// Told the entries of an upload the storage rejected (`ack.rejected`), with the permissions
    /// they were checked against (BigPeer audits write-rule refusals). Called with no lock held;
    /// nil costs nothing.
    let uploadRejected: (@Sendable (_ permissions: SyncPermissions, _ entries: [UploadEntry], _ rejected: [UploadRejection]) -> Void)?
    /// Callers of `remoteQuery` waiting for their answers (SyncConnection+RemoteQuery.swift).
    let queryWaiters = Mutex(RemoteQueryWaiters())

    /// How a session reaches the instance's presence gossip. Called with no lock held.
    public struct PresencePort: Sendable {
        public var ready: @Sendable (Hello) -> Void
        public var received: @Sendable ([PresenceRecord]) -> Void
        public var ended: @Sendable () -> Void
        /// The kind of link this port's session came on (nil: not said).
        public var linkType: LinkType?
        /// The session now runs on a link of another kind (it was resumed there, PROTOCOL.md §4.16).
        public var moved: @Sendable (Hello, LinkType) -> Void
        /// What the peer's login says about it for presence (`SyncPermissions.identityMetadata`):
        /// right after `ready`, and again when new credentials (`auth`) change it.
        public var identified: @Sendable ([String: Value]?) -> Void
        public init(ready: @escaping @Sendable (Hello) -> Void, received: @escaping @Sendable ([PresenceRecord]) -> Void,
                    ended: @escaping @Sendable () -> Void, linkType: LinkType? = nil,
                    moved: @escaping @Sendable (Hello, LinkType) -> Void = { _, _ in },
                    identified: @escaping @Sendable ([String: Value]?) -> Void = { _ in }) {
            self.ready = ready
            self.received = received
            self.ended = ended
            self.linkType = linkType
            self.moved = moved
            self.identified = identified
        }
    }

    /// `executor`: the transport's event loop when it has one (its sends then need no thread
    /// hop either), else the storage's `preferredExecutor` (for the store, one of its pool's loops).
    public init(configuration: SyncSession.Configuration, storage: any SyncStorage, transport: Transport,
                executor: (any TaskExecutor)? = nil,
                clock: @escaping @Sendable () -> UInt64 = SyncConnection.monotonicMillis,
                reauthenticate: @escaping @Sendable (SyncCredentials, UInt64) async -> AuthDecision = { _, _ in
                    .refuse(code: .unauthorized, reason: "this server does not accept new credentials in a session")
                },
                subscriptionsChanged: (@Sendable (_ version: UInt64, _ accepted: [SubscriptionQuery]) -> Void)? = nil,
                presence: PresencePort? = nil,
                resumable: ResumableSessions? = nil,
                uploadRejected: (@Sendable (_ permissions: SyncPermissions, _ entries: [UploadEntry], _ rejected: [UploadRejection]) -> Void)? = nil,
                ended: (@Sendable () -> Void)? = nil,
                authenticate: @escaping @Sendable (Hello) async -> AuthDecision) {
        self.clock = clock
        self.reauthenticate = reauthenticate
        self.subscriptionsChanged = subscriptionsChanged
        self.presence = presence
        self.uploadRejected = uploadRejected
        self.executor = executor ?? storage.preferredExecutor
        var configuration = configuration
        configuration.resumable = resumable != nil
        session = Mutex(SyncSession(configuration: configuration, now: clock()))
        self.storage = storage
        self.ownLink = Self.linkNumbers.add(1, ordering: .relaxed).newValue
        self.attachment = Mutex(Attachment(transport: transport, link: ownLink))
        self.resumable = resumable
        self.ended.withLock { $0 = ended }
        self.authenticate = authenticate
    }

    /// Milliseconds on a monotonic clock (heartbeats must not jump with the wall clock).
    public static let monotonicMillis: @Sendable () -> UInt64 = {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1000 + UInt64(ts.tv_nsec) / 1_000_000
    }

    /// Starts the heartbeat timer and the change-feed subscription.
    public func start() {
        let token = storage.addHeadListener { [weak self] head in self?.headAnnounced(head) }
        feedToken.withLock { $0 = token }
        deliver(.logHead(storage.logHead))
        let task = Task(executorPreference: executor) { [weak self] in
            while !Task.isCancelled {
                guard let self else { return }
                let (deadline, closed) = self.session.withLock { ($0.nextDeadline, $0.state == .closed) }
                if closed { return }
                let now = self.clock()
                let wait = deadline > now ? min(deadline - now, 1000) : 0
                if wait > 0 { try? await Task.sleep(for: .milliseconds(wait)) }
                self.deliver(.tick)
            }
        }
        timer.withLock { $0 = task }
    }

    /// A new head from the change feed, handled on the session's executor. The feed calls every
    /// listener in turn on the one task that read the change log: stepping each session there
    /// (its ring read, matching and encoding) served a thousand peers one after another on one
    /// thread, so the last waited for all the others; on their own loops they are served in
    /// parallel, where their sockets are. Heads announced while a hop is pending join it.
    func headAnnounced(_ head: Int64) {
        var pending = announcedHead.load(ordering: .acquiring)
        while true {
            let (exchanged, original) = announcedHead.compareExchange(expected: pending, desired: max(pending, head),
                                                                      ordering: .acquiringAndReleasing)
            if exchanged { break }
            pending = original
        }
        guard pending < 0 else { return }  // a hop is scheduled; it takes the newest head
        Task(executorPreference: executor) { [weak self] in
            guard let self else { return }
            self.deliver(.logHead(self.announcedHead.exchange(-1, ordering: .acquiringAndReleasing)))
        }
    }

    /// One complete protocol message from the transport.
    public func receive(_ bytes: [UInt8]) { fromOwnLink(.received(bytes)) }

    /// The link is gone: stop everything (unacknowledged uploads are re-sent by the peer), or,
    /// for a resumable session, wait for the peer to come back on another link.
    public func transportClosed() { fromOwnLink(.transportClosed) }

    /// The transport's queue went down after `Transport.notifyWhenDrained`.
    public func transportDrained() { fromOwnLink(.transportDrained) }

    /// A re-check of the credentials of epoch `epoch` (revocation, expiry, scope changes).
    public func credentialsChecked(_ decision: AuthDecision, epoch: UInt64) { deliver(.credentialsChecked(decision, epoch: epoch)) }

    public var state: SyncSession.State { session.withLock { $0.state } }

    /// Read-only view of the session (tests, metrics).
    public func inspect<R>(_ body: (SyncSession) -> R) -> R { session.withLock { body($0) } }

    func stop() {
        if let ended = ended.withLock({ e -> (@Sendable () -> Void)? in defer { e = nil }; return e }) { ended() }
        if let token = session.withLock({ $0.resumption?.token }) { resumable?.remove(token, self) }
        presence?.ended()
        if let token = feedToken.withLock({ t -> UInt64? in defer { t = nil }; return t }) { storage.removeHeadListener(token) }
        timer.withLock { $0?.cancel(); $0 = nil }
    }

    /// Sends presence records to the peer once the session is ready (dropped before and after).
    public func sendPresence(_ records: [PresenceRecord]) { deliver(.sendPresence(records)) }

    /// `via`: the link the input came from; dropped unless the session runs on that link now
    /// (false then).
    @discardableResult
    func deliver(_ input: SyncSessionInput, via link: UInt64? = nil) -> Bool {
        typealias Accepted = (version: UInt64, queries: [SubscriptionQuery])
        let step = session.withLock { s -> (actions: [SyncSessionAction], closed: Bool, waiting: Transport?, accepted: Accepted?,
                                            becameReady: Hello?, newToken: [UInt8]?, identity: [String: Value]??)? in
            let transport: Transport?
            if let link {
                let current = attachment.withLock { $0 }
                guard current.link == link else { return nil }  // a link the session has left
                if case .transportClosed = input { attachment.withLock { $0.transport = nil } }
                transport = current.transport
            } else {
                transport = attachment.withLock { $0.transport }
            }
            let version = s.subscriptionSetVersion
            let wasReady = s.state == .ready
            let hadToken = s.resumption != nil
            let identityBefore = s.permissions.identityMetadata
            s.noteTransportQueue(transport?.queuedBytes() ?? 0)
            let actions = s.handle(input, now: clock())
            let live = s.detached ? nil : attachment.withLock { $0.transport }
            if let live { Self.write(actions, to: live) }
            let changed = subscriptionsChanged != nil && s.subscriptionSetVersion != version
            return (actions, s.state == .closed, s.isWaitingForTransport ? live : nil,
                    changed ? (s.subscriptionSetVersion, s.acceptedQueries) : nil, !wasReady && s.state == .ready ? s.peer : nil,
                    !hadToken ? s.resumption?.token : nil,
                    s.state == .ready && (!wasReady || s.permissions.identityMetadata != identityBefore) ? .some(s.permissions.identityMetadata) : nil)
        }
        // Bound element by element: each `step.field` of the optional tuple copied the whole tuple
        // (its `Hello?`, `Transport?`, ... through the runtime's generic value witnesses), seven
        // times per step: 19% of the server's instructions in a fan-out (docs/PERFORMANCE.md).
        guard case let (actions, closed, waiting, accepted, becameReady, newToken, identity)? = step else { return false }
        if let token = newToken { resumable?.register(token, self) }
        if let accepted { subscriptionsChanged?(accepted.version, accepted.queries) }
        if let becameReady { presence?.ready(becameReady) }
        if let identity { presence?.identified(identity) }
        for action in actions { perform(action) }
        if closed { stop() } else if let waiting { waiting.notifyWhenDrained() }
        return true
    }

    /// The messages among `actions`, in order.
    static func write(_ actions: [SyncSessionAction], to transport: Transport) {
        for action in actions {
            switch action {
            case .send(let bytes, _), .resend(let bytes): transport.send(bytes)
            default: break
            }
        }
    }

    func perform(_ action: SyncSessionAction) {
        switch action {
        case .send, .resend:
            break  // sent in order inside `deliver`
        case .resume(let request, let site):
            handOver(request, site: site)
        case .presenceReceived(let records):
            presence?.received(records)
        case .queryAnswered(let result):
            answerQuery(result)
        case .close(let code, let reason):
            attachment.withLock { $0.transport }?.close(code, reason)
        case .authenticate(let hello):
            // On the cooperative pool, whatever the caller's executor (see the top of this file).
            Task(executorPreference: globalConcurrentExecutor) { self.deliver(.authenticated(await self.authenticate(hello))) }
        case .reauthenticate(let credentials, let epoch):
            Task(executorPreference: globalConcurrentExecutor) {
                self.deliver(.reauthenticated(await self.reauthenticate(credentials, epoch), epoch: epoch))
            }
        case .readPage(let id, let generation, let query, let after, let limit, let maxBytes):
            readPage(id, generation, query.value, after: after, limit: limit, maxBytes: maxBytes)
        case .checkResume(let id, let generation, let checkpoint):
            run { .resumeChecked(subscription: id, generation: generation, reachable: try await self.storage.changeLogReaches(back: checkpoint)) }
        case .readLog(let after):
            // About what the peer's credit lets the session send, at most the feed's page: a large
            // transaction is read in pieces the peer can take. At least 256 KiB: rows read past
            // the credit are dropped and read again, but a read per few rows costs more.
            let window = session.withLock { $0.sendWindow }
            let budget = Int(clamping: min(max(window, 256 << 10), Int64(storage.maxLogReadBytes)))
            // Up-to-date sessions are served from the ring at once; only laggards need a task.
            if let batch = storage.cachedLogRead(after: after, maxBytes: budget) { return deliverLog(batch) }
            Task(executorPreference: executor) {
                do {
                    self.deliverLog(try await self.storage.readLog(after: after, maxBytes: budget))
                } catch {
                    self.deliver(Self.failure(error))
                }
            }
        case .fetchDocuments(let request, let refs):
            run { .fetched(request: request, try await self.storage.fetchDocuments(refs)) }
        case .applyUpload(let seq, let origin, let entries, let writeRules):
            let permissions = uploadRejected != nil ? session.withLock { $0.permissions } : nil
            run {
                let r = try await self.storage.mergeDeltas(entries, origin: origin, writeRules: writeRules)
                if let permissions, !r.rejected.isEmpty { self.uploadRejected?(permissions, entries, r.rejected) }
                return .uploadCommitted(seq: seq, txn: r.txn, rejected: r.rejected)
            }
        }
    }

    /// Log batches whose live matching was too much for a loop's slice (`deliverLog`).
    public let batchesMatchedOffLoop = Atomic<Int>(0)

    /// Delivers a log batch with its rows' live matches worked out (`LiveMatches`): inline when
    /// the whole batch fits a loop's slice, else on the evaluation threads, after which the batch
    /// is delivered from there. The session has one read outstanding, so batches stay in order.
    func deliverLog(_ batch: LogBatch) {
        let queries = session.withLock { $0.liveQueries }
        guard !queries.isEmpty, !batch.entries.isEmpty else { deliver(.log(batch)); return }
        let slice = EvaluationBudget(maxSteps: InMemoryEvaluation.onLoopSteps, exhaustion: .yield)
        if let matches = try? LiveMatches.compute(batch.entries, queries, budget: slice) {
            var matched = batch
            matched.liveMatches = matches
            deliver(.log(matched))
            return
        }
        batchesMatchedOffLoop.add(1, ordering: .relaxed)
        Task(executorPreference: executor) {
            var matched = batch
            matched.liveMatches = try? await self.inOwnTurn {
                try await InMemoryEvaluation.offLoop { try LiveMatches.compute(batch.entries, queries, budget: EvaluationBudget()) }
            }
            self.deliver(.log(matched))
        }
    }

    /// Runs a storage request and feeds its result (or the failure, as a close) back to the session.
    func run(_ body: @escaping @Sendable () async throws -> SyncSessionInput) {
        Task(executorPreference: executor) {
            do {
                self.deliver(try await self.inOwnTurn(body))
            } catch {
                self.deliver(Self.failure(error))
            }
        }
    }

    static func failure(_ error: any Error) -> SyncSessionInput {
        switch error {
        case SyncStorageError.unavailable:
            .storeFailed(code: .tryAgainLater, reason: "the database is unavailable; retry later")
        default:
            .storeFailed(code: .internalError, reason: "internal error")
        }
    }

    /// A page read in two steps: the query, after which the session learns where the page ends
    /// (`.pageBoundary`: it may ask for the next page now), then the decoding of its states
    /// (`.page`). The session may have two page reads in flight; their pages are delivered in the
    /// order they were asked for (each waits for the previous one), as the session requires, while
    /// the database work of the second overlaps the decoding and sending of the first.
    func readPage(_ id: UInt32, _ generation: UInt64, _ query: SubscriptionQuery, after: Value?, limit: Int, maxBytes: Int) {
        // Created under the lock, so the next read (which the boundary below may trigger, on
        // another thread) always finds this one as its predecessor.
        pageChain.withLock { chain in
            let previous = chain
            let n = pageReadTrace.withLock { $0.add(after: after) }
            chain = Task(executorPreference: executor) {
                self.pageReadTrace.withLock { $0.set(n, .querying) }
                do {
                    let read = try await self.storage.readSyncPage(query, after: after, limit: limit, maxBytes: maxBytes)
                    let boundary = read.boundary
                    self.pageReadTrace.withLock { $0.set(n, .queried) }
                    self.deliver(.pageBoundary(subscription: id, generation: generation, boundary))
                    self.pageReadTrace.withLock { $0.set(n, .decoding) }
                    let rows = try await self.inOwnTurn { try await read.rows() }
                    self.pageReadTrace.withLock { $0.set(n, .waitingForPrevious) }
                    await previous?.value
                    self.deliver(.page(subscription: id, generation: generation,
                                       DocumentPage(rows: rows, txn: read.txn, isLast: boundary.isLast, nextAfter: boundary.nextAfter)))
                    self.pageReadTrace.withLock { $0.set(n, .delivered) }
                } catch {
                    self.pageReadTrace.withLock { $0.set(n, .failed) }
                    await previous?.value
                    self.deliver(Self.failure(error))
                }
            }
        }
    }

    /// The latest page reads of this connection and where each stands, oldest first.
    public var pageReadProgress: String { pageReadTrace.withLock { $0.description } }
}

/// The last few page reads of a connection and the step each has reached: a stalled initial
/// sync's message then says whether a read is still in the database, decoding, or waiting for
/// the read before it. A few entries, overwritten in place: no allocation per read once full.
struct PageReadTrace: CustomStringConvertible {
    enum Stage: Int, CaseIterable {
        case asked, querying, queried, decoding, waitingForPrevious, delivered, failed
        var name: String { ["asked", "querying", "queried", "decoding", "waitingForPrevious", "delivered", "failed"][rawValue] }
    }
    struct Entry { var number: Int; var after: Value?; var stage: Stage; var since: ContinuousClock.Instant }
    static let kept = 4
    private var entries: [Entry] = []
    private var count = 0
    /// Time all reads spent in each stage (index: `Stage.rawValue`), to tell a slow database from
    /// a task that waited for a thread.
    private var spent = [Duration](repeating: .zero, count: Stage.allCases.count)
    /// The longest time one read spent in each stage: a pause, not a slow average.
    private var longest = [Duration](repeating: .zero, count: Stage.allCases.count)

    /// Reads recorded so far.
    var reads: Int { count }

    /// Records a new read; returns its number.
    mutating func add(after: Value?) -> Int {
        count += 1
        let e = Entry(number: count, after: after, stage: .asked, since: .now)
        if entries.count < Self.kept { entries.append(e) } else { entries[(count - 1) % Self.kept] = e }
        return count
    }

    mutating func set(_ number: Int, _ stage: Stage) {
        let i = (number - 1) % Self.kept
        guard i < entries.count, entries[i].number == number else { return }
        let now = ContinuousClock.now
        let took = now - entries[i].since
        spent[entries[i].stage.rawValue] += took
        longest[entries[i].stage.rawValue] = max(longest[entries[i].stage.rawValue], took)
        entries[i].stage = stage
        entries[i].since = now
    }

    var description: String {
        func ms(_ d: Duration) -> Int64 { d.components.seconds * 1000 + d.components.attoseconds / 1_000_000_000_000_000 }
        let now = ContinuousClock.now
        let latest = entries.sorted { $0.number < $1.number }
            .map { "#\($0.number) after \($0.after.map { "\($0)" } ?? "start"): \($0.stage.name) for \(ms(now - $0.since)) ms" }
            .joined(separator: ", ")
        let totals = Stage.allCases.filter { spent[$0.rawValue] > .zero }
            .map { "\($0.name) \(ms(spent[$0.rawValue])) ms (longest \(ms(longest[$0.rawValue])))" }
            .joined(separator: ", ")
        return "\(count) reads; latest: \(latest); time per stage, all reads: \(totals)"
    }
}
