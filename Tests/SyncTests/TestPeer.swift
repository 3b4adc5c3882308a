import BigPeerTestSupport
import CRDT
import Postgres
import Sockets
import Store
import Values
@testable import Sync
@testable import SyncProtocol

/// A minimal small peer for integration tests: a CRDT replica per document (`Document.merge`),
/// connected to an in-process `SyncConnection` through an in-memory transport.
actor TestPeer {
    let site: UInt64
    var replica: Replica
    var docs: [DocumentRef: Document] = [:]
    /// Every message received, in order.
    var received: [SyncMessage] = []
    var receivedDataBytes = 0
    var closed: UInt16?
    var grantCredit: Bool
    var connection: SyncConnection?
    var checkpoint: Int64 = 0
    var wants = 0
    private var uploadSeq: UInt64 = 0

    init(site: UInt64, grantCredit: Bool = true) {
        self.site = site
        self.replica = Replica(site: SiteID(site))
        self.grantCredit = grantCredit
    }

    /// Connects and completes the handshake.
    /// `executor`: where the server side's tasks run (`SyncConnection`'s default when nil).
    /// `capabilities`: the optional messages the peer announces (`hello.caps`).
    func connect(store: DocumentStore, credit: UInt64 = 1 << 20, executor: (any TaskExecutor)? = nil,
                 capabilities: [String] = []) async throws {
        let (stream, continuation) = AsyncStream.makeStream(of: [UInt8].self)
        let closeBox = MutexBox<UInt16?>(nil)
        let transport = SyncConnection.Transport(send: { continuation.yield($0) },
                                                 close: { code, _ in closeBox.withLock { $0 = code }; continuation.finish() })
        var config = SyncSession.Configuration(serverSite: store.siteID.rawValue, sessionID: "t-\(site)")
        config.pageRows = 2  // several pages even for small test collections
        let conn = SyncConnection(configuration: config, storage: DocumentSyncStorage(store), transport: transport, executor: executor) { hello in
            hello.credentials == .apiKey("test-key") ? .accept(.everything) : .refuse(code: .unauthorized, reason: "invalid API key")
        }
        connection = conn
        conn.start()
        Task { [weak self] in
            for await bytes in stream { await self?.handle(bytes) }
            await self?.setClosed(closeBox.withLock { $0 } ?? 0)
        }
        send(.hello(Hello(site: site, peerKey: [1, 2], deviceName: "peer-\(site)", credentials: .apiKey("test-key"),
                          credit: credit, maxMessageSize: 1 << 20, capabilities: capabilities)))
        _ = try await waitFor { if case .welcome = $0 { true } else { false } }
    }

    func setClosed(_ code: UInt16) { closed = code }

    func disconnect() {
        connection?.transportClosed()
        connection = nil
    }

    func send(_ m: SyncMessage) { connection?.receive(m.encode()) }

    func handle(_ bytes: [UInt8]) {
        guard let m = try? SyncMessageDecoder.decode(bytes) else { closed = 9999; return }
        received.append(m)
        switch m {
        case .documents(_, let entries), .changes(_, let entries):
            receivedDataBytes += bytes.count
            var wanted: [DocumentRef] = []
            for e in entries { if !apply(e) { wanted.append(e.document) } }
            if !wanted.isEmpty { wants += 1; send(.want(wanted)) }
            if grantCredit { send(.credit(bytes: UInt64(bytes.count))) }
        case .synced(_, let cp): checkpoint = cp
        case .checkpoint(let txn): checkpoint = txn
        default: break
        }
    }

    /// Applies an entry; false when the peer lacks the base of a delta (it then asks with `want`).
    func apply(_ e: ChangeEntry) -> Bool {
        do {
            switch e.payload {
            case .state(let bytes):
                let remote = try Document.decode(bytes)
                if var local = docs[e.document] {
                    _ = try local.merge(remote.delta(since: local.versionVector))
                    docs[e.document] = local
                } else {
                    docs[e.document] = remote
                }
            case .delta(let bytes):
                guard var local = docs[e.document] else { return false }
                _ = try local.merge(try Delta.decode(bytes))
                docs[e.document] = local
            }
            return true
        } catch {
            return false
        }
    }

    func grant(_ bytes: UInt64) { send(.credit(bytes: bytes)) }
    func setGrantCredit(_ on: Bool) { grantCredit = on }

    /// Edits a document locally (offline) and returns the delta to upload.
    func edit(_ ref: DocumentRef, _ fields: [String: Value]) throws -> [UInt8] {
        var doc = try docs[ref] ?? Document(id: ref.id)
        let before = doc.versionVector
        _ = try doc.upsert(fields, replica: &replica)
        docs[ref] = doc
        return doc.delta(since: before).encode()
    }

    /// Uploads deltas and waits for the ack.
    func upload(_ entries: [UploadEntry]) async throws -> SyncMessage {
        uploadSeq += 1
        let seq = uploadSeq
        send(.upload(seq: seq, entries: entries))
        return try await waitFor { if case .ack(seq, _, _) = $0 { true } else { false } }
    }

    func value(_ ref: DocumentRef) -> Value? { docs[ref]?.materialize() }
    func messages() -> [SyncMessage] { received }

    /// Waits (up to 30 s) for a received message matching `predicate`, searching from the start.
    /// With `atMost`, the wait goes on as long as messages keep arriving: it fails only once none
    /// has come for 30 s (a stall), or after `atMost` in all. (10 s was seen to pass on a machine
    /// running three suites and a build at once: one page query took 10.3 s in PostgreSQL.) A long exchange (an initial sync of
    /// many pages) then takes the time a loaded machine needs, and a stall is still caught.
    func waitFor(from start: Int = 0, atMost limit: Duration? = nil, _ predicate: (SyncMessage) -> Bool) async throws -> SyncMessage {
        let quiet = Duration.seconds(30)
        let begin = ContinuousClock.now
        var deadline = begin + quiet
        var index = start
        while ContinuousClock.now < deadline {
            while index < received.count {
                if predicate(received[index]) { return received[index] }
                index += 1
                if let limit { deadline = min(ContinuousClock.now + quiet, begin + limit) }
            }
            if closed != nil { break }
            try await Task.sleep(for: .milliseconds(5))
        }
        throw TestPeerError.timeout("waiting for a message; got \(received.map(\.typeName)), closed: \(String(describing: closed)); \(await sessionDump()); \(await starvation())\n\(await ThreadDump.capture())")
    }

    /// Waits until the peer has a checkpoint at or after `txn`.
    func waitForCheckpoint(_ txn: Int64) async throws {
        let deadline = ContinuousClock.now + .seconds(30)
        while checkpoint < txn {
            guard ContinuousClock.now < deadline, closed == nil else {
                throw TestPeerError.timeout("checkpoint \(checkpoint) < \(txn); \(await sessionDump()); \(await starvation())\n\(await ThreadDump.capture())")
            }
            try await Task.sleep(for: .milliseconds(5))
        }
    }
}

enum TestPeerError: Error { case timeout(String) }

extension TestPeer {
    /// The server session's scheduling state, for a timeout's message (what it was waiting for).
    func sessionDump() async -> String {
        guard let connection, let store = (connection.storage as? DocumentSyncStorage)?.store else { return "no connection" }
        let leased = await store.pool.leasedSessionStates()
        return connection.inspect { s in
            "session: state \(s.state), credit \(s.credit), outstanding \(String(describing: s.outstanding)), "
                + "pageReads \(s.pageReads), phases \(s.subscriptions.values.map { "\($0.id)/\($0.generation): \($0.phase)" }), "
                + "cursor \(String(describing: s.cursor)), partialSeq \(String(describing: s.partialSeq)), logHead \(s.logHead), suspended \(s.suspended != nil), wants \(s.pendingWants.count)"
        } + "; pool: open \(store.pool.openConnections), idle \(store.pool.idleConnections), waiting \(store.pool.waitingCount), connecting \(store.pool.connectingCount), opens \(store.pool.openStatistics), leased \(leased); page reads: \(connection.pageReadProgress)"
    }
}

/// A migrated database, a store and its running change feed (LISTEN + catch-up), for one test.
func withSyncServer(changeFeed: ChangeFeed.Limits = ChangeFeed.Limits(), _ body: (DocumentStore, ChangeFeed) async throws -> Void) async throws {
    try await TestPostgres.withDatabase { db in
        try await db.migrate()
        try await withSyncServer(on: db, changeFeed: changeFeed, body)
    }
}

/// The same on a database the test prepared (a restored backup, say).
func withSyncServer(on db: TestDatabase, changeFeed: ChangeFeed.Limits = ChangeFeed.Limits(),
                    _ body: (DocumentStore, ChangeFeed) async throws -> Void) async throws {
    let store = try await DocumentStore.open(pool: db.makePool(), changeFeed: changeFeed)
    let feed = store.changeFeed
    try await feed.start()
    // A 2 s reconnect delay gives the listener-down test a wide, timing-independent window.
    let listener = try await PostgresListener(db.configuration, channels: ["bigpeer_changes"], loop: TestLoops.group.next(),
                                              reconnectDelay: .seconds(2))
    let follower = Task { await feed.follow(listener) }
    defer { follower.cancel() }
    do {
        try await body(store, feed)
        await listener.stop()
    } catch {
        await listener.stop()
        throw error
    }
}

/// Whether the process was starved when a wait timed out (a full suite on two cores can keep
/// both cooperative threads busy with other tests' long synchronous work for seconds).
func starvation() async -> String {
    "cooperative pool: \(await probePool()); shared event loops: \(await probeLoops())"
}

/// How long a new task waits for one of Swift's cooperative threads (two on a 2-core machine):
/// other tests' long synchronous work on both of them starves every task in the process. (This
/// probe needs the pool too, so it reports a wait once the wait is over.)
func probePool() async -> String {
    let start = ContinuousClock.now
    let started = MutexBox<ContinuousClock.Instant?>(nil)
    Task.detached { started.withLock { $0 = ContinuousClock.now } }
    while started.withLock({ $0 }) == nil, ContinuousClock.now - start < .seconds(3) {
        try? await Task.sleep(for: .milliseconds(5))
    }
    return started.withLock { $0 }.map { "a new task ran after \($0 - start)" } ?? "no new task ran within \(ContinuousClock.now - start)"
}

/// How long each of the tests' shared event loops takes to run an empty job (3 s at most):
/// a loop busy with other tests' work stalls every PostgreSQL session it owns.
func probeLoops() async -> [String] {
    var probes: [String] = []
    for (i, loop) in TestLoops.group.loops.enumerated() {
        let start = ContinuousClock.now
        let done = MutexBox<Bool>(false)
        loop.execute { done.withLock { $0 = true } }
        while !done.withLock({ $0 }), ContinuousClock.now - start < .seconds(3) { try? await Task.sleep(for: .milliseconds(5)) }
        probes.append("loop \(i): " + (done.withLock { $0 } ? "\(ContinuousClock.now - start)" : "no answer in 3 s"))
    }
    return probes
}
