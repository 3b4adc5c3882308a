import Sockets

/// What the pool's state machine needs to know about a session.
protocol PoolSession: AnyObject {
    /// True once the session failed; a broken session is never handed out again.
    var isBroken: Bool { get }
}

/// The decisions of `PostgresPool`, with no I/O: who gets which session, when to open one, when
/// to close one, when a waiter has waited too long. Every step takes `now` and returns the actions
/// the pool must carry out (outside its lock); tests drive it with a manual clock.
///
///     acquire ──▶ idle session? ──yes──▶ leased
///                    │ no
///                    ├─ room for one more ──▶ waiter (no deadline) + .connect
///                    └─ pool full ──────────▶ waiter (deadline) + .armTimer
///     release / connected ──▶ first waiter (.handOver) or idle
///     broken release ──▶ replaced for the first waiter (.connect), or the slot is freed
///
/// Waiters are served first come, first served. One timer covers all of them: it is armed for the
/// earliest deadline, moved when that waiter is served, and cancelled when none is left.
/// A caller that opens a session waits in the queue too (without a deadline: the open's own
/// connect timeout bounds it), so a session released meanwhile serves it at once and the new one
/// goes to the next waiter or the idle list.
struct PostgresPoolStateMachine<Session: PoolSession> {
    typealias WaiterID = UInt64
    typealias ConnectID = UInt64

    enum Failure: Equatable, Sendable {
        /// Waited `acquireTimeout` for a session.
        case timeout
        case shutDown
        /// The open made for this waiter failed (the pool passes on the opener's error).
        case connectFailed
    }

    enum Action {
        case handOver(Session, to: WaiterID)
        case failWaiter(WaiterID, Failure)
        /// Open a session; report `connected` or `connectFailed` with this id.
        case connect(ConnectID)
        case close(Session)
        case armTimer(at: NanoTime)
        case cancelTimer
    }

    enum Acquired {
        case session(Session)
        /// The caller waits; `actions` start what will serve it.
        case wait(WaiterID, [Action])
        case shutDown
    }

    private struct Idle {
        var session: Session
        var since: NanoTime
    }

    private struct Waiter {
        var id: WaiterID
        var deadline: NanoTime?
    }

    /// Who an open under way is for.
    private enum Purpose {
        /// A waiter still in the queue: whichever comes first serves it, the open or a release.
        case queued(WaiterID)
        /// A waiter taken out of the queue for a replacement: the open's result is its answer.
        case bound(WaiterID)
    }

    let configuration: PostgresPool.Configuration
    private var idle: [Idle] = []
    private var waiters: [Waiter] = []
    private var connects: [ConnectID: Purpose] = [:]
    private var nextID: UInt64 = 0
    /// The deadline the timer is armed for (nil: no timer).
    private(set) var armedTimer: NanoTime?
    private(set) var isShutDown = false
    /// Sessions open, idle, leased or being opened.
    private(set) var open = 0

    init(configuration: PostgresPool.Configuration) {
        self.configuration = configuration
    }

    var idleCount: Int { idle.count }
    var waitingCount: Int { waiters.count }
    var connectingCount: Int { connects.count }

    // MARK: - Steps

    /// A caller wants a session. `preferring` picks the sessions that serve it best (those on the
    /// caller's own loop: the statement then starts and completes with no thread hop).
    mutating func acquire(now: NanoTime, preferring: (Session) -> Bool) -> Acquired {
        if isShutDown { return .shutDown }
        if let session = takeIdle(preferring: preferring) { return .session(session) }
        let waiter = newID()
        if open < configuration.maxConnections {
            open += 1
            waiters.append(Waiter(id: waiter, deadline: nil))
            let connect = newID()
            connects[connect] = .queued(waiter)
            return .wait(waiter, [.connect(connect)])
        }
        waiters.append(Waiter(id: waiter, deadline: now.adding(configuration.acquireTimeout)))
        var actions: [Action] = []
        syncTimer(&actions)
        return .wait(waiter, actions)
    }

    /// An idle session for a caller, if there is one (the first half of `acquire`, which the pool
    /// tries before it suspends the caller).
    mutating func takeIdle(preferring: (Session) -> Bool) -> Session? {
        guard !isShutDown else { return nil }
        if let i = idle.lastIndex(where: { preferring($0.session) && !$0.session.isBroken }) {
            return idle.remove(at: i).session
        }
        while let item = idle.popLast() {
            if !item.session.isBroken { return item.session }
            open -= 1  // already dead: nothing to close
        }
        return nil
    }

    /// A leased session comes back. `reusable`: not broken and outside any transaction block.
    mutating func release(_ session: Session, reusable: Bool, now: NanoTime) -> [Action] {
        var actions: [Action] = []
        if !reusable && !session.isBroken { actions.append(.close(session)) }
        if isShutDown {
            open -= 1
            if reusable { actions.append(.close(session)) }
            return actions
        }
        if !reusable {
            open -= 1
            guard !waiters.isEmpty, open < configuration.maxConnections else { return actions }
            open += 1
            let waiter = waiters.removeFirst()
            let connect = newID()
            connects[connect] = .bound(waiter.id)
            actions.append(.connect(connect))
        } else if !waiters.isEmpty {
            actions.append(.handOver(session, to: waiters.removeFirst().id))
        } else {
            idle.append(Idle(session: session, since: now))
        }
        syncTimer(&actions)
        return actions
    }

    /// The open `connect` succeeded.
    mutating func connected(_ connect: ConnectID, _ session: Session, now: NanoTime) -> [Action] {
        switch connects.removeValue(forKey: connect) {
        case .bound(let waiter):
            return [.handOver(session, to: waiter)]
        case .queued(let waiter):
            guard removeWaiter(waiter) else {
                // Served already: the new session goes to the next waiter or the idle list.
                return release(session, reusable: !session.isBroken, now: now)
            }
            var actions: [Action] = [.handOver(session, to: waiter)]
            syncTimer(&actions)
            return actions
        case nil:
            return []
        }
    }

    /// The open `connect` failed: its slot is free again, and the waiter it was for (if that one
    /// still waits) fails with the opener's error.
    mutating func connectFailed(_ connect: ConnectID) -> [Action] {
        guard let purpose = connects.removeValue(forKey: connect) else { return [] }
        open -= 1
        switch purpose {
        case .bound(let waiter):
            return [.failWaiter(waiter, .connectFailed)]
        case .queued(let waiter):
            guard removeWaiter(waiter) else { return [] }  // served already
            var actions: [Action] = [.failWaiter(waiter, .connectFailed)]
            syncTimer(&actions)
            return actions
        }
    }

    /// The timer armed for `armedTimer` fired: waiters past their deadline fail.
    mutating func timerFired(now: NanoTime) -> [Action] {
        armedTimer = nil
        var actions: [Action] = []
        waiters.removeAll { waiter in
            guard let deadline = waiter.deadline, deadline <= now else { return false }
            actions.append(.failWaiter(waiter.id, .timeout))
            return true
        }
        syncTimer(&actions)
        return actions
    }

    /// Closes sessions idle longer than `idleTimeout` (keeping the newest `minIdleConnections`)
    /// and broken ones.
    mutating func sweepIdle(now: NanoTime) -> [Action] {
        guard !isShutDown else { return [] }
        let cutoff = now.adding(.zero - configuration.idleTimeout)
        var keep: [Idle] = [], actions: [Action] = []
        for item in idle.reversed() {
            let mustKeep = keep.count < configuration.minIdleConnections
            if item.session.isBroken || (!mustKeep && item.since < cutoff) {
                actions.append(.close(item.session))
            } else {
                keep.append(item)
            }
        }
        idle = keep.reversed()
        open -= actions.count
        return actions
    }

    /// Closes idle sessions and fails every waiter; leased sessions close when released, and
    /// opens under way for a waiter still deliver to it.
    mutating func shutdown() -> [Action] {
        isShutDown = true
        var actions: [Action] = idle.map { .close($0.session) }
        open -= idle.count
        idle = []
        actions += waiters.map { .failWaiter($0.id, .shutDown) }
        waiters = []
        syncTimer(&actions)
        return actions
    }

    // MARK: - Internals

    private mutating func newID() -> UInt64 {
        nextID += 1
        return nextID
    }

    private mutating func removeWaiter(_ id: WaiterID) -> Bool {
        guard let i = waiters.firstIndex(where: { $0.id == id }) else { return false }
        waiters.remove(at: i)
        return true
    }

    /// Keeps the one timer on the earliest deadline of the waiters.
    private mutating func syncTimer(_ actions: inout [Action]) {
        // Deadlines grow along the queue (each is `now` + the same timeout), so the first is the earliest.
        let earliest = waiters.first(where: { $0.deadline != nil })?.deadline
        guard earliest != armedTimer else { return }
        armedTimer = earliest
        actions.append(earliest.map { .armTimer(at: $0) } ?? .cancelTimer)
    }
}
