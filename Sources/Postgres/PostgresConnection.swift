import CLibPQ
import Glibc
import Sockets
import Synchronization

/// One PostgreSQL session, driven by libpq in non-blocking mode on one `EventLoop`.
///
/// Threading: every libpq call on this connection happens on `loop` (the public async methods hop
/// there with `execute` and resume their caller when the loop sees the answer), so libpq's
/// one-thread-per-PGconn rule holds without locks. That confinement is why the class may be
/// `@unchecked Sendable`: `pg`, `op`, `registration` and the caches are loop-owned, and the only
/// state read from other threads (`isBroken`) is an `Atomic`.
///
/// The socket stays registered for readability while idle, so a server that goes away (restart,
/// crash) is noticed at once and the connection marks itself broken for the pool.
///
/// Files: this one holds the state and the public statement API; `+Connect` opens the session,
/// `+Results` sends statements and reads their results as the socket becomes ready, `+Copy`
/// streams COPY data, `+Pipeline` runs several statements in one round trip.
public final class PostgresConnection: @unchecked Sendable {
    public let loop: EventLoop
    var pg: OpaquePointer?
    var registration: Registration?
    var interest: Interest = []
    var op: Operation?
    var connectTimer: TimerID?
    var connectContinuation: CheckedContinuation<Void, any Error>?
    /// SQL text -> name of the statement this session prepared for it (loop-owned).
    var prepared: [String: String] = [:]
    /// Source of unique prepared-statement names (a pipeline may prepare several at once).
    var nextPreparedID = 0
    let broken = Atomic<Bool>(false)
    /// libpq's transaction status after the last statement (PQTRANS_*), for the pool's hygiene check.
    let transactionStatus = Atomic<UInt8>(UInt8(PQTRANS_IDLE.rawValue))
    /// The socket's send buffer as last enlarged for COPY data (`enlargeSendBuffer`; loop-owned).
    var sendBufferBytes = 0
    /// Called on `loop` for every NOTIFY this session receives (set through `setNotificationHandler`).
    var notificationHandler: ((PostgresNotification) -> Void)?
    /// Called on `loop` once when the session breaks.
    var brokenHandler: ((PostgresError) -> Void)?

    /// The SQL of the last statement started (loop-owned; `diagnostics`). Keeps a reference to
    /// the query's own string: no copy per statement.
    var lastStatement = ""

    static let maxPreparedStatements = 512

    /// True once the session failed; a broken connection never recovers (the pool replaces it).
    public var isBroken: Bool { broken.load(ordering: .acquiring) }

    /// True when the session is outside any transaction block (safe to hand to another user).
    public var isIdleOutsideTransaction: Bool {
        transactionStatus.load(ordering: .acquiring) == UInt8(PQTRANS_IDLE.rawValue)
    }

    init(loop: EventLoop) { self.loop = loop }

    deinit {
        if let pg { PQfinish(pg) }
    }

    // MARK: - Statements

    /// Runs one statement with bound parameters (extended protocol; one round trip).
    public func query(_ query: PostgresQuery) async throws -> PostgresResult {
        try await run(.statement(query))
    }

    /// Runs SQL text that may hold several statements and no parameters (simple protocol), e.g. a
    /// migration file. Returns the last statement's result. Never pass text derived from input.
    public func simpleQuery(unsafeSQL sql: String) async throws -> PostgresResult {
        try await run(.simple(sql))
    }

    /// `COPY ... FROM STDIN`: streams `data` (the COPY text or CSV payload) to the server.
    public func copyIn(_ query: PostgresQuery, data: [UInt8]) async throws -> PostgresResult {
        try await run(.copyIn(query, data))
    }

    /// `COPY ... FROM STDIN` fed piece by piece: `next` is called for one piece at a time (on the
    /// global pool) while the previous one is being sent, and returns nil after the last. One COPY
    /// for the whole stream, so PostgreSQL never waits for a new statement between pieces.
    /// A piece is handed to libpq only once everything before it left for the socket, so at most
    /// one piece waits in memory besides the one being sent. If `next` throws, the COPY is
    /// abandoned (the server rolls its rows back and the transaction is aborted) and this throws
    /// `next`'s error. An error the server raises mid-stream (a unique violation, bad data) waits
    /// unread until the stream ends: libpq keeps the COPY open meanwhile, so the remaining pieces
    /// are still made and sent (and discarded), and this then throws the server's error.
    public func copyIn(_ query: PostgresQuery, from next: @escaping CopySource) async throws -> PostgresResult {
        try await run(.copyInStream(query, next))
    }

    /// Supplies a streamed COPY's pieces (`copyIn(_:from:)`); nil ends the data.
    public typealias CopySource = @Sendable () async throws -> [UInt8]?

    /// `COPY ... TO STDOUT`: returns the whole payload.
    public func copyOut(_ query: PostgresQuery) async throws -> [UInt8] {
        let collected = Mutex<[UInt8]>([])
        _ = try await run(.copyOut(query, { chunk in collected.withLock { $0.append(contentsOf: chunk) } }))
        return collected.withLock { $0 }
    }

    /// `COPY ... TO STDOUT` with each row chunk handed to `onData` on the connection's loop.
    public func copyOut(_ query: PostgresQuery, onData: @escaping @Sendable ([UInt8]) -> Void) async throws -> PostgresResult {
        try await run(.copyOut(query, onData))
    }

    /// Receives NOTIFY messages for channels this session LISTENs on; the handler runs on `loop`.
    public func setNotificationHandler(_ handler: @escaping @Sendable (PostgresNotification) -> Void) {
        loop.execute { [self] in notificationHandler = handler }
    }

    /// Called once, on `loop`, when the session breaks (used by listeners to reconnect).
    public func setBrokenHandler(_ handler: @escaping @Sendable (PostgresError) -> Void) {
        loop.execute { [self] in
            if isBroken { handler(.connectionClosed("already broken")) } else { brokenHandler = handler }
        }
    }

    /// Ends the session. Any statement in flight fails with `.shutDown`.
    public func close() async {
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            loop.execute { [self] in
                if let op { self.op = nil; op.completion.fail(PostgresError.shutDown) }
                broken.store(true, ordering: .releasing)
                teardown()
                done.resume()
            }
        }
    }

    func run(_ request: Request) async throws -> PostgresResult {
        try await withUnsafeThrowingContinuation { (cont: UnsafeContinuation<PostgresResult, any Error>) in
            // Already on our loop (a handler running with the loop as its executor): start now, no hop.
            if loop.inEventLoop { start(request, .one(cont)) } else { loop.execute { [self] in start(request, .one(cont)) } }
        }
    }

    // MARK: - Types

    enum Request {
        case simple(String)
        /// Several extended-protocol statements sent at once (libpq pipeline mode), one Sync.
        case pipeline([PostgresQuery])
        case statement(PostgresQuery)
        case copyIn(PostgresQuery, [UInt8])
        case copyInStream(PostgresQuery, CopySource)
        case copyOut(PostgresQuery, @Sendable ([UInt8]) -> Void)
    }

    /// Who waits for an operation: one statement's caller or a pipeline's.
    ///
    /// Unsafe (not checked) continuations: a checked one costs an extra allocation and atomic per
    /// statement. Each is resumed exactly once because a `Completion` is only ever held in one place
    /// at a time — passed to `start`, which either fails it at once or stores it in `op`; every path
    /// that resumes it (`finish`, `finishPipeline`, `markBroken`, `close`) first takes it out of `op`
    /// on the loop thread. `PostgresConnectionTests` drives each of those paths.
    enum Completion {
        case one(UnsafeContinuation<PostgresResult, any Error>)
        case many(UnsafeContinuation<[PostgresResult], any Error>)

        func fail(_ error: any Error) {
            switch self {
            case .one(let c): c.resume(throwing: error)
            case .many(let c): c.resume(throwing: error)
            }
        }
    }

    enum Phase {
        case pipeline(PipelineState)
        case preparing(String, PostgresQuery)
        case results
        case copyIn(offset: Int)
        case copyOut
    }

    /// The statement (or pipeline) in flight and what has arrived for it so far. A class so that
    /// the result loop updates it in place rather than copying it out of `op` and back for every
    /// result (the copies showed up in profiles); loop-owned like `op`.
    final class Operation {
        let completion: Completion
        var phase: Phase = .results
        var result: PostgresResult?
        var error: PostgresError?
        var copyData: [UInt8]?
        var copySink: (@Sendable ([UInt8]) -> Void)?
        /// A streamed COPY's supplier and where it stands (`copyIn(_:from:)`).
        var copySource: CopySource?
        var copyFetching = false
        /// A piece that arrived while the one before it was still being sent.
        var copyFetched: [UInt8]?
        var copySourceEnded = false
        var copySourceError: (any Error)?

        init(completion: Completion) { self.completion = completion }
    }
}
