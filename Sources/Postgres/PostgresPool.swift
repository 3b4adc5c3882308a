import Metrics
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
///   open sat out that time with other sessions idle.
///
/// The decisions are `PostgresPoolStateMachine`'s; this class keeps the callers' continuations,
/// opens and closes sessions, and runs the one acquire timer and the idle sweep on the group's
/// first loop. All state lives in one `Mutex`; each step of the machine runs under it, and what the
/// step returns is carried out after it is released (no lock is held across an `await`).
public final class PostgresPool: Sendable {
    public struct Configuration: Sendable {
        public var maxConnections = 16
        public var minIdleConnections = 0
        public var acquireTimeout: Duration = .seconds(5)
        public var idleTimeout: Duration = .seconds(60)
        public init() {}
    }

    private typealias Machine = PostgresPoolStateMachine<PostgresConnection>

    private struct State {
        var machine: Machine
        /// The callers the machine's waiters stand for.
        var waiters: [Machine.WaiterID: CheckedContinuation<PostgresConnection, any Error>] = [:]
        /// The loop timer armed for `machine.armedTimer` (touched only on `timerLoop`).
        var timer: (id: TimerID, at: NanoTime)?
        /// Sessions handed out and not yet released (diagnostics: `leasedSessionStates`).
        var leased: [ObjectIdentifier: PostgresConnection] = [:]
        /// Sessions opened so far, and the longest time one took to open (diagnostics).
        var opened = 0
        var longestOpen: Duration = .zero
    }

    /// What a step of the machine leaves to do once the lock is released.
    private enum Effect {
        case resume(CheckedContinuation<PostgresConnection, any Error>, Result<PostgresConnection, any Error>)
        case connect(Machine.ConnectID)
        case close(PostgresConnection)
        case syncTimer
    }

    public let configuration: Configuration
    public let connectionConfiguration: PostgresConfiguration
    private let group: EventLoopGroup
    private let state: Mutex<State>
    /// The loop that runs the acquire timer and the idle sweep.
    private var timerLoop: EventLoop { group.loops[0] }
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
        state = Mutex(State(machine: Machine(configuration: configuration)))
        scheduleSweep()
    }

    /// Sessions currently open (idle + leased + connecting).
    public var openConnections: Int { state.withLock { $0.machine.open } }
    public var idleConnections: Int { state.withLock { $0.machine.idleCount } }
    /// A loop of this pool's group, for work that should run beside its sessions (a task with this
    /// executor preference never waits for Swift's shared cooperative threads).
    public var preferredLoop: EventLoop { group.next() }
    /// The caller's own loop when it runs on one of this pool's loops (then sessions owned by that
    /// loop serve it with no thread hop), else any of them.
    public var callersLoop: EventLoop { group.loops.first(where: { $0.inEventLoop }) ?? group.next() }

    /// Sessions being opened right now.
    public var connectingCount: Int { state.withLock { $0.machine.connectingCount } }

    /// Sessions this pool has opened, and the longest an open took (a caller that opens a
    /// session waits for it, even if another one is released meanwhile).
    public var openStatistics: (opened: Int, longest: Duration) { state.withLock { ($0.opened, $0.longestOpen) } }

    /// Callers waiting for a session right now (those whose own open is under way included).
    public var waitingCount: Int { state.withLock { $0.machine.waitingCount } }

    /// How long `acquire` took, successful ones only (`bigpeer_db_pool_acquire_seconds`).
    public let acquireTime = Histogram(.latency)

    /// Whether the acquire timer is armed (tests: it is cancelled once no caller waits).
    var hasArmedTimer: Bool { state.withLock { $0.machine.armedTimer != nil } }

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
        let asked = NanoTime.now()
        let conn = try await acquireSession()
        acquireTime.observe(NanoTime.now().duration(since: asked))
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
        // The caller's own loop: sessions owned by it serve the caller with no thread hop (HTTP
        // handlers run with their connection's loop as executor).
        let preferring: @Sendable (PostgresConnection) -> Bool = { $0.loop.inEventLoop }
        if let idle = state.withLock({ $0.machine.takeIdle(preferring: preferring) }) { return idle }
        return try await withCheckedThrowingContinuation { (cont: CheckedContinuation<PostgresConnection, any Error>) in
            let effects = state.withLock { s -> [Effect] in
                switch s.machine.acquire(now: .now(), preferring: preferring) {
                case .session(let c): return [.resume(cont, .success(c))]
                case .shutDown: return [.resume(cont, .failure(PostgresError.shutDown))]
                case .wait(let id, let actions):
                    s.waiters[id] = cont
                    return Self.effects(of: actions, in: &s, configuration: configuration, connectError: nil)
                }
            }
            run(effects)
        }
    }

    public func release(_ conn: PostgresConnection) {
        let reusable = !conn.isBroken && conn.isIdleOutsideTransaction
        step { s in
            s.leased[ObjectIdentifier(conn)] = nil
            return s.machine.release(conn, reusable: reusable, now: .now())
        }
    }

    /// Closes idle sessions and fails waiters; leased sessions close when released.
    public func shutdown() async {
        let effects = state.withLock { s in
            Self.effects(of: s.machine.shutdown(), in: &s, configuration: configuration, connectError: nil)
        }
        var closing: [PostgresConnection] = []
        for effect in effects {
            if case .close(let c) = effect { closing.append(c) } else { run([effect]) }
        }
        for c in closing { await c.close() }
    }

    // MARK: - Carrying out the machine's actions

    /// Runs one step of the machine under the lock, then its effects outside it.
    private func step(connectError: (any Error)? = nil, _ body: (inout State) -> [Machine.Action]) {
        let effects = state.withLock { s in
            Self.effects(of: body(&s), in: &s, configuration: configuration, connectError: connectError)
        }
        run(effects)
    }

    /// Pairs the machine's actions with the callers they concern (under the lock, so a caller is
    /// resumed exactly once).
    private static func effects(of actions: [Machine.Action], in s: inout State, configuration: Configuration,
                                connectError: (any Error)?) -> [Effect] {
        var effects: [Effect] = []
        for action in actions {
            switch action {
            case .handOver(let conn, let id):
                if let cont = s.waiters.removeValue(forKey: id) { effects.append(.resume(cont, .success(conn))) }
            case .failWaiter(let id, let failure):
                guard let cont = s.waiters.removeValue(forKey: id) else { continue }
                let error: any Error = switch failure {
                case .timeout: PostgresError.poolTimeout(waited: configuration.acquireTimeout, maxConnections: configuration.maxConnections)
                case .shutDown: PostgresError.shutDown
                case .connectFailed: connectError ?? PostgresError.connectionFailed("the session could not be opened")
                }
                effects.append(.resume(cont, .failure(error)))
            case .connect(let id): effects.append(.connect(id))
            case .close(let conn): effects.append(.close(conn))
            case .armTimer, .cancelTimer: effects.append(.syncTimer)
            }
        }
        return effects
    }

    private func run(_ effects: [Effect]) {
        var closing: [PostgresConnection] = []
        for effect in effects {
            switch effect {
            case .resume(let cont, let result): cont.resume(with: result)
            case .connect(let id): connect(id, on: callersLoop)
            case .close(let conn): closing.append(conn)
            case .syncTimer:
                let loop = timerLoop
                loop.execute { [weak self] in self?.syncTimer() }
            }
        }
        if !closing.isEmpty { Task { for c in closing { await c.close() } } }
    }

    /// Opens a session for the machine's `connect` action.
    private func connect(_ id: Machine.ConnectID, on loop: EventLoop) {
        Task {
            let started = ContinuousClock.now
            let opened: Result<PostgresConnection, any Error>
            do { opened = .success(try await opener(connectionConfiguration, loop)) } catch { opened = .failure(error) }
            let took = ContinuousClock.now - started
            switch opened {
            case .success(let conn):
                step { s in
                    s.opened += 1
                    s.longestOpen = max(s.longestOpen, took)
                    return s.machine.connected(id, conn, now: .now())
                }
            case .failure(let error):
                step(connectError: error) { s in
                    s.opened += 1
                    s.longestOpen = max(s.longestOpen, took)
                    return s.machine.connectFailed(id)
                }
            }
        }
    }

    /// On `timerLoop`: moves the loop timer to the machine's `armedTimer` (cancels it when nil).
    /// Arm and cancel requests from several threads may arrive in any order; each one re-reads
    /// where the timer should be, so the last one leaves it right.
    private func syncTimer() {
        let loop = timerLoop
        let (stale, wanted) = state.withLock { s -> (TimerID?, NanoTime?) in
            let wanted = s.machine.armedTimer
            guard s.timer?.at != wanted else { return (nil, nil) }
            let stale = s.timer?.id
            s.timer = nil
            return (stale, wanted)
        }
        if let stale { loop.cancelTimer(stale) }
        guard let wanted else { return }
        let id = loop.scheduleTimer(after: max(.zero, wanted.duration(since: .now()))) { [weak self] in
            guard let self else { return }
            self.step { s in
                s.timer = nil
                return s.machine.timerFired(now: .now())
            }
        }
        state.withLock { $0.timer = (id, wanted) }
    }

    /// Every half idle-timeout, closes sessions idle longer than the timeout.
    private func scheduleSweep() {
        let loop = timerLoop
        let period = configuration.idleTimeout / 2
        loop.execute { [weak self] in
            loop.scheduleTimer(after: period) { [weak self] in
                guard let self else { return }
                self.step { $0.machine.sweepIdle(now: .now()) }
                self.scheduleSweep()
            }
        }
    }
}

extension PostgresConnection: PoolSession {}
