import Sockets
import Synchronization

/// A bounded pool of sessions spread over an `EventLoopGroup`.
///
/// - At most `maxConnections` sessions exist (open, leased or connecting).
/// - A caller that finds none free waits up to `acquireTimeout`, then gets `.poolTimeout`.
/// - Broken sessions (server restart, network) are dropped when noticed — idle sessions watch their
///   socket, so a restart is seen before the next lease — and replaced on demand, so the pool
///   recovers by itself once the database is back. A session returned inside a transaction block
///   is closed rather than reused.
/// - Sessions idle longer than `idleTimeout` are closed (down to `minIdleConnections`).
/// - A caller that finds none free but room for one more opens a session, and takes whichever
///   comes first: its new session or one another caller releases meanwhile. Opening can take a
///   long time on a loaded server (a backend to fork and initialise); a caller bound to its own
///   open sat out that time with other sessions idle — an initial sync's page read stalled for
///   seconds that way (see `PostgresPoolTests`).
///
/// All state lives in one `Mutex`; no lock is held across an `await`.
public final class PostgresPool: Sendable {
    public struct Configuration: Sendable {
        public var maxConnections = 16
        public var minIdleConnections = 0
        public var acquireTimeout: Duration = .seconds(5)
        public var idleTimeout: Duration = .seconds(60)
        public init() {}
    }

    private struct Idle {
        var connection: PostgresConnection
        var since: NanoTime
    }

    private struct Waiter {
        var id: UInt64
        var continuation: CheckedContinuation<PostgresConnection, any Error>
    }

    private struct State {
        var idle: [Idle] = []
        var open = 0
        var waiters: [Waiter] = []
        var nextWaiterID: UInt64 = 0
        var isShutDown = false
        /// Sessions handed out and not yet released (diagnostics: `leasedSessionStates`).
        var leased: [ObjectIdentifier: PostgresConnection] = [:]
        /// Sessions being opened right now (counted in `open`, neither idle nor leased yet).
        var connecting = 0
        /// Sessions opened so far, and the longest time one took to open (diagnostics).
        var opened = 0
        var longestOpen: Duration = .zero
    }

    public let configuration: Configuration
    public let connectionConfiguration: PostgresConfiguration
    private let group: EventLoopGroup
    private let state = Mutex(State())
    /// Opens one session on a loop (tests replace it to control how long an open takes).
    private let opener: @Sendable (PostgresConfiguration, EventLoop) async throws -> PostgresConnection

    public convenience init(_ connection: PostgresConfiguration, configuration: Configuration = .init(), group: EventLoopGroup) {
        self.init(connection, configuration: configuration, group: group) { try await PostgresConnection.connect($0, on: $1) }
    }

    init(_ connection: PostgresConfiguration, configuration: Configuration, group: EventLoopGroup,
         opener: @escaping @Sendable (PostgresConfiguration, EventLoop) async throws -> PostgresConnection) {
        self.connectionConfiguration = connection
        self.configuration = configuration
        self.group = group
        self.opener = opener
        scheduleSweep()
    }

    /// Sessions currently open (idle + leased + connecting).
    public var openConnections: Int { state.withLock { $0.open } }
    public var idleConnections: Int { state.withLock { $0.idle.count } }
    /// A loop of this pool's group, for work that should run beside its sessions (a task with this
    /// executor preference never waits for Swift's shared cooperative threads).
    public var preferredLoop: EventLoop { group.next() }
    /// The caller's own loop when it runs on one of this pool's loops (then sessions owned by that
    /// loop serve it with no thread hop), else any of them.
    public var callersLoop: EventLoop { group.loops.first(where: { $0.inEventLoop }) ?? group.next() }

    /// Sessions being opened right now.
    public var connectingCount: Int { state.withLock { $0.connecting } }

    /// Sessions this pool has opened, and the longest an open took (a caller that opens a
    /// session waits for it, even if another one is released meanwhile).
    public var openStatistics: (opened: Int, longest: Duration) { state.withLock { ($0.opened, $0.longestOpen) } }

    /// Callers waiting for a session right now (those whose own open is under way included).
    public var waitingCount: Int { state.withLock { $0.waiters.count } }

    // MARK: - Use

    /// Leases a session for the duration of `body`.
    public func withConnection<R>(_ body: (PostgresConnection) async throws -> R) async throws -> R {
        let conn = try await acquire()
        do {
            let r = try await body(conn)
            release(conn)
            return r
        } catch {
            release(conn)
            throw error
        }
    }

    /// Runs one statement on any free session.
    public func query(_ q: PostgresQuery) async throws -> PostgresResult {
        try await withConnection { try await $0.query(q) }
    }

    public func acquire() async throws -> PostgresConnection {
        let conn = try await acquireSession()
        state.withLock { $0.leased[ObjectIdentifier(conn)] = conn }
        return conn
    }

    /// What each leased session is doing right now (each answered on its own loop): for the
    /// message of a timeout, to tell a statement the server is running from one never sent.
    public func leasedSessionStates() async -> [String] {
        let leased = state.withLock { Array($0.leased.values) }
        var out: [String] = []
        for conn in leased { out.append(await conn.diagnostics()) }
        return out
    }

    private func acquireSession() async throws -> PostgresConnection {
        enum Step { case got(PostgresConnection), connect, wait }
        let step: Step = try state.withLock { s throws(PostgresError) -> Step in
            if s.isShutDown { throw .shutDown }
            // Prefer a session on the caller's own loop: the statement then starts and completes on
            // this thread with no hop (HTTP handlers run with their connection's loop as executor).
            if let i = s.idle.lastIndex(where: { $0.connection.loop.inEventLoop && !$0.connection.isBroken }) {
                return .got(s.idle.remove(at: i).connection)
            }
            while let item = s.idle.popLast() {
                if !item.connection.isBroken { return .got(item.connection) }
                s.open -= 1
            }
            if s.open < configuration.maxConnections {
                s.open += 1
                return .connect
            }
            return .wait
        }
        switch step {
        case .got(let c): return c
        case .connect: return try await openOrTakeReleased()
        case .wait: return try await waitForConnection()
        }
    }

    /// Opens a session for a slot already counted in `open`, waiting meanwhile as a waiter: a
    /// session released before the open completes serves this caller at once, and the new
    /// session then goes to the next waiter or the idle list. If the open completes first, it is
    /// this caller's. If it fails while this caller still waits, the caller gets the error (as a
    /// caller that opened a session always did). No acquire timeout: the open's own
    /// `connectTimeout` bounds the wait, as before.
    private func openOrTakeReleased() async throws -> PostgresConnection {
        // The caller's own loop when it runs on one (then the session serves it with no hop).
        let loop = group.loops.first(where: { $0.inEventLoop }) ?? group.next()
        return try await withCheckedThrowingContinuation { (cont: CheckedContinuation<PostgresConnection, any Error>) in
            let id = state.withLock { s -> UInt64 in
                s.nextWaiterID += 1
                s.waiters.append(Waiter(id: s.nextWaiterID, continuation: cont))
                return s.nextWaiterID
            }
            Task {
                let opened: Result<PostgresConnection, any Error>
                do { opened = .success(try await self.openConnection(on: loop)) } catch { opened = .failure(error) }
                let mine = self.state.withLock { s -> Waiter? in
                    guard let i = s.waiters.firstIndex(where: { $0.id == id }) else { return nil }
                    return s.waiters.remove(at: i)
                }
                switch (opened, mine) {
                case (.success(let conn), let w?): w.continuation.resume(returning: conn)
                case (.success(let conn), nil): self.release(conn)  // served already: to the next waiter or idle
                case (.failure(let error), let w?): w.continuation.resume(throwing: error)
                case (.failure, nil): break  // served already; `openConnection` gave the slot back
                }
            }
        }
    }

    public func release(_ conn: PostgresConnection) {
        let reusable = !conn.isBroken && conn.isIdleOutsideTransaction
        if !reusable && !conn.isBroken { Task { await conn.close() } }
        enum Next { case none, hand(Waiter), replace(Waiter), close }
        let next: Next = state.withLock { s in
            s.leased[ObjectIdentifier(conn)] = nil
            if s.isShutDown {
                s.open -= 1
                return reusable ? .close : .none
            }
            if !reusable {
                s.open -= 1
                guard !s.waiters.isEmpty, s.open < configuration.maxConnections else { return .none }
                s.open += 1
                return .replace(s.waiters.removeFirst())
            }
            if !s.waiters.isEmpty { return .hand(s.waiters.removeFirst()) }
            s.idle.append(Idle(connection: conn, since: .now()))
            return .none
        }
        switch next {
        case .none: break
        case .close: Task { await conn.close() }
        case .hand(let w): w.continuation.resume(returning: conn)
        case .replace(let w):
            Task {
                do { w.continuation.resume(returning: try await self.openConnection()) } catch { w.continuation.resume(throwing: error) }
            }
        }
    }

    /// Closes idle sessions and fails waiters; leased sessions close when released.
    public func shutdown() async {
        let (idle, waiters) = state.withLock { s in
            s.isShutDown = true
            let r = (s.idle, s.waiters)
            s.open -= s.idle.count
            s.idle = []
            s.waiters = []
            return r
        }
        for w in waiters { w.continuation.resume(throwing: PostgresError.shutDown) }
        for i in idle { await i.connection.close() }
    }

    // MARK: - Internals

    /// Opens a session for a slot already counted in `open`; gives the slot back on failure.
    private func openConnection(on chosen: EventLoop? = nil) async throws -> PostgresConnection {
        state.withLock { $0.connecting += 1 }
        let started = ContinuousClock.now
        defer {
            let took = ContinuousClock.now - started
            state.withLock { s in
                s.connecting -= 1
                s.opened += 1
                s.longestOpen = max(s.longestOpen, took)
            }
        }
        do {
            let loop = chosen ?? group.loops.first(where: { $0.inEventLoop }) ?? group.next()
            return try await opener(connectionConfiguration, loop)
        } catch {
            state.withLock { $0.open -= 1 }
            throw error
        }
    }

    private func waitForConnection() async throws -> PostgresConnection {
        let timeout = configuration.acquireTimeout
        let max = configuration.maxConnections
        return try await withCheckedThrowingContinuation { (cont: CheckedContinuation<PostgresConnection, any Error>) in
            let id = state.withLock { s -> UInt64 in
                s.nextWaiterID += 1
                s.waiters.append(Waiter(id: s.nextWaiterID, continuation: cont))
                return s.nextWaiterID
            }
            let loop = group.next()
            loop.execute { [weak self] in
                loop.scheduleTimer(after: timeout) {
                    guard let self else { return }
                    let expired = self.state.withLock { s -> Waiter? in
                        guard let i = s.waiters.firstIndex(where: { $0.id == id }) else { return nil }
                        return s.waiters.remove(at: i)
                    }
                    expired?.continuation.resume(throwing: PostgresError.poolTimeout(waited: timeout, maxConnections: max))
                }
            }
        }
    }

    /// Every half idle-timeout, closes sessions idle longer than the timeout.
    private func scheduleSweep() {
        let loop = group.loops[0]
        let period = configuration.idleTimeout / 2
        loop.execute { [weak self] in
            loop.scheduleTimer(after: period) { [weak self] in
                guard let self else { return }
                self.sweepIdle()
                self.scheduleSweep()
            }
        }
    }

    private func sweepIdle() {
        let cutoff = NanoTime.now().adding(.zero - configuration.idleTimeout)
        let expired: [PostgresConnection] = state.withLock { s in
            guard !s.isShutDown else { return [] }
            var keep: [Idle] = [], drop: [PostgresConnection] = []
            for (i, item) in s.idle.enumerated().reversed() {
                let mustKeep = keep.count < configuration.minIdleConnections
                if item.connection.isBroken || (!mustKeep && item.since < cutoff) {
                    drop.append(item.connection)
                } else {
                    keep.append(s.idle[i])
                }
            }
            s.idle = keep.reversed()
            s.open -= drop.count
            return drop
        }
        if !expired.isEmpty { Task { for c in expired { await c.close() } } }
    }
}
