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
public final class PostgresConnection: @unchecked Sendable {
    public let loop: EventLoop
    var pg: OpaquePointer?
    private var registration: Registration?
    private var interest: Interest = []
    var op: Operation?
    private var connectTimer: TimerID?
    private var connectContinuation: CheckedContinuation<Void, any Error>?
    /// SQL text -> name of the statement this session prepared for it (loop-owned).
    var prepared: [String: String] = [:]
    /// Source of unique prepared-statement names (a pipeline may prepare several at once).
    var nextPreparedID = 0
    private let broken = Atomic<Bool>(false)
    /// libpq's transaction status after the last statement (PQTRANS_*), for the pool's hygiene check.
    private let transactionStatus = Atomic<UInt8>(UInt8(PQTRANS_IDLE.rawValue))
    /// Called on `loop` for every NOTIFY this session receives (set through `setNotificationHandler`).
    private var notificationHandler: ((PostgresNotification) -> Void)?
    /// Called on `loop` once when the session breaks.
    private var brokenHandler: ((PostgresError) -> Void)?

    static let maxPreparedStatements = 512

    /// True once the session failed; a broken connection never recovers (the pool replaces it).
    public var isBroken: Bool { broken.load(ordering: .acquiring) }

    /// True when the session is outside any transaction block (safe to hand to another user).
    public var isIdleOutsideTransaction: Bool {
        transactionStatus.load(ordering: .acquiring) == UInt8(PQTRANS_IDLE.rawValue)
    }

    private init(loop: EventLoop) { self.loop = loop }

    deinit {
        if let pg { PQfinish(pg) }
    }

    // MARK: - Connect

    /// Opens a session without blocking any thread: `PQconnectStartParams` + `PQconnectPoll`
    /// driven by the loop's epoll, with `configuration.connectTimeout` enforced by a loop timer.
    public static func connect(_ configuration: PostgresConfiguration, on loop: EventLoop) async throws -> PostgresConnection {
        let conn = PostgresConnection(loop: loop)
        try await withCheckedThrowingContinuation { (cont: CheckedContinuation<Void, any Error>) in
            loop.execute { conn.startConnect(configuration, cont) }
        }
        return conn
    }

    private func startConnect(_ configuration: PostgresConfiguration, _ cont: CheckedContinuation<Void, any Error>) {
        let params = configuration.effectiveParameters
        let keys = params.map { strdup($0.key) } + [nil]
        let values = params.map { strdup($0.value) } + [nil]
        defer {
            keys.forEach { free($0) }
            values.forEach { free($0) }
        }
        let handle = keys.withUnsafeBufferPointer { k in
            values.withUnsafeBufferPointer { v in
                k.withMemoryRebound(to: UnsafePointer<CChar>?.self) { kp in
                    v.withMemoryRebound(to: UnsafePointer<CChar>?.self) { vp in
                        PQconnectStartParams(kp.baseAddress, vp.baseAddress, 0)
                    }
                }
            }
        }
        guard let handle else {
            cont.resume(throwing: PostgresError.connectionFailed("out of memory"))
            return
        }
        pg = handle
        // Server NOTICEs (e.g. "relation already exists, skipping") would go to stderr by default.
        PQsetNoticeProcessor(handle, { _, _ in }, nil)
        if PQstatus(handle) == CONNECTION_BAD {
            failConnect(PostgresError.connectionFailed(errorMessage()), cont)
            return
        }
        connectContinuation = cont
        connectTimer = loop.scheduleTimer(after: configuration.connectTimeout) { [weak self] in
            guard let self, let c = self.connectContinuation else { return }
            self.connectContinuation = nil
            self.failConnect(.connectionFailed("timed out after \(configuration.connectTimeout)"), c)
        }
        pollConnect(PGRES_POLLING_WRITING)
    }

    /// One step of the connect state machine; libpq may change sockets between steps.
    private func pollConnect(_ status: PostgresPollingStatusType) {
        guard let pg, let cont = connectContinuation else { return }
        switch status {
        case PGRES_POLLING_OK:
            connectContinuation = nil
            if let t = connectTimer { loop.cancelTimer(t) }
            PQsetnonblocking(pg, 1)
            do {
                try watch(.readable)
                cont.resume()
            } catch {
                failConnect(.connectionFailed("\(error)"), cont)
            }
        case PGRES_POLLING_FAILED:
            connectContinuation = nil
            failConnect(.connectionFailed(errorMessage()), cont)
        default:
            do {
                try watch(status == PGRES_POLLING_READING ? .readable : .writable)
            } catch {
                connectContinuation = nil
                failConnect(.connectionFailed("\(error)"), cont)
            }
        }
    }

    private func failConnect(_ error: PostgresError, _ cont: CheckedContinuation<Void, any Error>) {
        if let t = connectTimer { loop.cancelTimer(t) }
        teardown()
        cont.resume(throwing: error)
    }

    /// Registers (or re-registers, if libpq switched sockets) the session's socket for `interest`.
    private func watch(_ newInterest: Interest) throws(IOError) {
        guard let pg else { return }
        let fd = PQsocket(pg)
        if let reg = registration, reg.fd != fd {
            loop.deregister(reg)
            registration = nil
        }
        if let reg = registration {
            if newInterest != interest { try loop.modify(reg, interest: newInterest) }
        } else {
            registration = try loop.register(fd: fd, interest: newInterest) { [unowned self] r in self.onReady(r) }
        }
        interest = newInterest
    }

    // MARK: - Readiness

    private func onReady(_ r: Readiness) {
        guard let pg else { return }
        if connectContinuation != nil {
            pollConnect(PQconnectPoll(pg))
            return
        }
        if r.isWritable && interest.contains(.writable) {
            if !flush() { return }
            if case .copyIn = op?.phase { pumpCopyIn() }
        }
        if r.isReadable {
            if PQconsumeInput(pg) == 0 {
                markBroken(.connectionClosed(errorMessage()))
                return
            }
            deliverNotifications()
            if op != nil { drain() }
        }
    }

    /// Sends what libpq has buffered; watches for writability while anything is left.
    /// Returns false if the session broke.
    @discardableResult
    func flush() -> Bool {
        guard let pg else { return false }
        switch PQflush(pg) {
        case 0:
            try? watch(.readable)
            return true
        case 1:
            do { try watch([.readable, .writable]) } catch { markBroken(.connectionClosed("\(error)")); return false }
            return true
        default:
            markBroken(.connectionClosed(errorMessage()))
            return false
        }
    }

    private func deliverNotifications() {
        guard let pg else { return }
        while let n = PQnotifies(pg) {
            let note = PostgresNotification(
                channel: String(cString: n.pointee.relname),
                payload: String(cString: n.pointee.extra),
                backendPID: n.pointee.be_pid)
            PQfreemem(n)
            notificationHandler?(note)
        }
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

    private func run(_ request: Request) async throws -> PostgresResult {
        try await withCheckedThrowingContinuation { (cont: CheckedContinuation<PostgresResult, any Error>) in
            // Already on our loop (a handler running with the loop as its executor): start now, no hop.
            if loop.inEventLoop { start(request, .one(cont)) } else { loop.execute { [self] in start(request, .one(cont)) } }
        }
    }

    /// Starts `request` now; called on `loop` only.
    func start(_ request: Request, _ completion: Completion) {
        guard let pg, !isBroken else {
            completion.fail(PostgresError.connectionClosed("connection is not open"))
            return
        }
        guard op == nil else {
            completion.fail(PostgresError.protocolViolation("a statement is already running on this connection"))
            return
        }
        var newOp = Operation(completion: completion, phase: .results)
        let sent: Int32
        switch request {
        case .pipeline(let queries):
            guard let state = sendPipeline(queries) else {
                let e = PostgresError.connectionClosed(errorMessage())
                completion.fail(e)
                markBroken(e)
                return
            }
            newOp.phase = .pipeline(state)
            sent = 1
        case .simple(let sql):
            sent = PQsendQuery(pg, sql)
        case .statement(let q) where q.prepared:
            if let name = prepared[q.sql] {
                sent = sendPrepared(name, q)
            } else if prepared.count < Self.maxPreparedStatements {
                let name = "bp_\(nextPreparedID)"
                nextPreparedID += 1
                let types = q.binds.map { $0.type }
                sent = PQsendPrepare(pg, name, q.sql, Int32(types.count), types)
                newOp.phase = .preparing(name, q)
            } else {
                sent = sendParams(q)
            }
        case .statement(let q):
            sent = sendParams(q)
        case .copyIn(let q, let data):
            sent = sendParams(q)
            newOp.copyData = data
        case .copyOut(let q, let sink):
            sent = sendParams(q)
            newOp.copySink = sink
        }
        guard sent == 1 else {
            let e = PostgresError.connectionClosed(errorMessage())
            completion.fail(e)
            markBroken(e)
            return
        }
        op = newOp
        flush()
    }

    func sendParams(_ q: PostgresQuery) -> Int32 {
        withBindPointers(q.binds) { types, values, lengths, formats in
            PQsendQueryParams(pg, q.sql, Int32(q.binds.count), types, values, lengths, formats, 0)
        }
    }

    func sendPrepared(_ name: String, _ q: PostgresQuery) -> Int32 {
        withBindPointers(q.binds) { _, values, lengths, formats in
            PQsendQueryPrepared(pg, name, Int32(q.binds.count), values, lengths, formats, 0)
        }
    }

    /// Reads every result libpq has completed; finishes the operation on the final NULL result.
    private func drain() {
        guard let pg else { return }
        while var current = op {
            switch current.phase {
            case .copyOut:
                if !pumpCopyOut() { return }
                continue
            case .copyIn:
                return  // driven by writability
            case .pipeline:
                drainPipeline()
                return
            default:
                break
            }
            if PQisBusy(pg) == 1 { return }
            guard let res = PQgetResult(pg) else {
                op = nil
                finish(current)
                return
            }
            switch PQresultStatus(res) {
            case PGRES_TUPLES_OK, PGRES_COMMAND_OK, PGRES_EMPTY_QUERY:
                current.result = PostgresResult(handle: res)
            case PGRES_COPY_IN:
                PQclear(res)
                current.phase = .copyIn(offset: 0)
                op = current
                pumpCopyIn()
                return
            case PGRES_COPY_OUT:
                PQclear(res)
                current.phase = .copyOut
            case PGRES_FATAL_ERROR:
                if current.error == nil { current.error = .server(PostgresServerError(result: res)) }
                PQclear(res)
            default:
                PQclear(res)  // notices and other non-final results
            }
            op = current
        }
    }

    /// Moves COPY rows from libpq to the sink; false when it must wait for more input.
    private func pumpCopyOut() -> Bool {
        guard let pg, var current = op else { return false }
        while true {
            var buf: UnsafeMutablePointer<CChar>?
            let n = PQgetCopyData(pg, &buf, 1)
            if n > 0, let buf {
                let chunk = UnsafeRawBufferPointer(start: buf, count: Int(n))
                current.copySink?(Array(chunk))
                PQfreemem(buf)
            } else if n == 0 {
                return false
            } else {
                current.phase = .results  // -1: done; -2: error reported by PQgetResult
                op = current
                return true
            }
        }
    }

    /// Pushes COPY data to libpq in 64 KiB pieces, pausing whenever its buffer is full.
    private func pumpCopyIn() {
        guard let pg, var current = op, case .copyIn(var offset) = current.phase else { return }
        let data = current.copyData ?? []
        while offset < data.count {
            let end = min(offset + 65536, data.count)
            let r = data.withUnsafeBufferPointer { b in
                UnsafeRawPointer(b.baseAddress! + offset).withMemoryRebound(to: CChar.self, capacity: end - offset) {
                    PQputCopyData(pg, $0, Int32(end - offset))
                }
            }
            if r == 1 {
                offset = end
            } else if r == 0 {
                current.phase = .copyIn(offset: offset)
                op = current
                flush()
                return
            } else {
                markBroken(.connectionClosed(errorMessage()))
                return
            }
        }
        switch PQputCopyEnd(pg, nil) {
        case 1:
            current.phase = .results
            current.copyData = nil
            op = current
            flush()
            drain()
        case 0:
            current.phase = .copyIn(offset: offset)
            op = current
            flush()
        default:
            markBroken(.connectionClosed(errorMessage()))
        }
    }

    func finish(_ done: Operation) {
        if let pg { transactionStatus.store(UInt8(PQtransactionStatus(pg).rawValue), ordering: .releasing) }
        if case .pipeline(let state) = done.phase {
            finishPipeline(state, done.completion)
            return
        }
        guard case .one(let continuation) = done.completion else {
            done.completion.fail(PostgresError.protocolViolation("a single statement finished a pipeline"))
            return
        }
        if case .preparing(let name, let q) = done.phase {
            if let error = done.error {
                continuation.resume(throwing: error)
                return
            }
            prepared[q.sql] = name
            var next = done
            next.phase = .results
            next.result = nil
            guard sendPrepared(name, q) == 1 else {
                let e = PostgresError.connectionClosed(errorMessage())
                continuation.resume(throwing: e)
                markBroken(e)
                return
            }
            op = next
            flush()
            return
        }
        if let error = done.error {
            continuation.resume(throwing: error)
        } else if let result = done.result {
            continuation.resume(returning: result)
        } else {
            continuation.resume(throwing: PostgresError.protocolViolation("no result"))
        }
    }

    func markBroken(_ error: PostgresError) {
        broken.store(true, ordering: .releasing)
        if let current = op {
            op = nil
            current.completion.fail(error)
        }
        teardown()
        if let h = brokenHandler {
            brokenHandler = nil
            h(error)
        }
    }

    private func teardown() {
        if let reg = registration { loop.deregister(reg) }
        registration = nil
        if let pg { PQfinish(pg) }
        pg = nil
        broken.store(true, ordering: .releasing)
    }

    func errorMessage() -> String {
        guard let pg, let m = PQerrorMessage(pg) else { return "no connection" }
        let s = String(cString: m).trimmingTrailingNewlines()
        return s.isEmpty ? "connection lost" : s
    }

    // MARK: - Types

    enum Request {
        case simple(String)
        /// Several extended-protocol statements sent at once (libpq pipeline mode), one Sync.
        case pipeline([PostgresQuery])
        case statement(PostgresQuery)
        case copyIn(PostgresQuery, [UInt8])
        case copyOut(PostgresQuery, @Sendable ([UInt8]) -> Void)
    }

    /// Who waits for an operation: one statement's caller or a pipeline's.
    enum Completion {
        case one(CheckedContinuation<PostgresResult, any Error>)
        case many(CheckedContinuation<[PostgresResult], any Error>)

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

    struct Operation {
        var completion: Completion
        var phase: Phase
        var result: PostgresResult?
        var error: PostgresError?
        var copyData: [UInt8]?
        var copySink: (@Sendable ([UInt8]) -> Void)?
    }
}

/// Lays all bind values out in one buffer and hands libpq the parallel arrays it wants.
func withBindPointers<R>(
    _ binds: [PostgresBind],
    _ body: (UnsafePointer<PostgresOID>?, UnsafePointer<UnsafePointer<CChar>?>?, UnsafePointer<Int32>?, UnsafePointer<Int32>?) -> R
) -> R {
    if binds.isEmpty { return body(nil, nil, nil, nil) }
    var storage: [UInt8] = []
    storage.reserveCapacity(binds.reduce(0) { $0 + ($1.bytes?.count ?? 0) + 1 })
    var offsets: [Int] = []
    for b in binds {
        offsets.append(storage.count)
        if let bytes = b.bytes { storage.append(contentsOf: bytes) }
        storage.append(0)  // NUL terminator for text-format values
    }
    let types = binds.map { $0.type }
    let lengths = binds.map { Int32($0.bytes?.count ?? 0) }
    let formats = binds.map { Int32($0.isBinary ? 1 : 0) }
    return storage.withUnsafeBufferPointer { buf in
        let base = UnsafeRawPointer(buf.baseAddress!).assumingMemoryBound(to: CChar.self)
        let values: [UnsafePointer<CChar>?] = binds.indices.map { binds[$0].bytes == nil ? nil : base + offsets[$0] }
        return body(types, values, lengths, formats)
    }
}
