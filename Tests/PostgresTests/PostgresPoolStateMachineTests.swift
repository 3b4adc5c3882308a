import Sockets
import Testing
@testable import Postgres

/// The pool's decisions on a manual clock: no database, no loop, no sleeps.
@Suite struct PostgresPoolStateMachineTests {
    final class FakeSession: PoolSession, CustomStringConvertible {
        let name: String
        var isBroken = false
        init(_ name: String) { self.name = name }
        var description: String { name }
    }

    typealias Machine = PostgresPoolStateMachine<FakeSession>

    /// A readable form of an action, to compare whole action lists.
    enum Did: Equatable {
        case handOver(String, to: UInt64), fail(UInt64, Machine.Failure), connect(UInt64), close(String)
        case arm(NanoTime), cancelTimer
    }

    static func did(_ actions: [Machine.Action]) -> [Did] {
        actions.map {
            switch $0 {
            case .handOver(let s, let w): .handOver(s.name, to: w)
            case .failWaiter(let w, let f): .fail(w, f)
            case .connect(let c): .connect(c)
            case .close(let s): .close(s.name)
            case .armTimer(let at): .arm(at)
            case .cancelTimer: .cancelTimer
            }
        }
    }

    let now = NanoTime(nanoseconds: 1_000_000_000)

    static func machine(max: Int = 2, timeout: Duration = .seconds(5)) -> Machine {
        var c = PostgresPool.Configuration()
        c.maxConnections = max
        c.acquireTimeout = timeout
        c.idleTimeout = .seconds(60)
        return Machine(configuration: c)
    }

    /// Fills the pool with `names` sessions, all leased.
    static func leased(_ m: inout Machine, _ names: [String], now: NanoTime) -> [FakeSession] {
        names.map { name in
            guard case .wait(let waiter, let actions) = m.acquire(now: now, preferring: { _ in false }),
                  case .connect(let connect)? = actions.first else { Issue.record("expected an open"); return FakeSession(name) }
            let s = FakeSession(name)
            #expect(did(m.connected(connect, s, now: now)) == [.handOver(name, to: waiter)])
            return s
        }
    }

    static func wait(_ m: inout Machine, now: NanoTime) -> (UInt64, [Did]) {
        guard case .wait(let id, let actions) = m.acquire(now: now, preferring: { _ in false }) else {
            Issue.record("expected to wait")
            return (0, [])
        }
        return (id, did(actions))
    }

    @Test func aWaiterOnAFullPoolTimesOutAtItsDeadlineAndNotBefore() {
        var m = Self.machine(max: 1, timeout: .seconds(5))
        _ = Self.leased(&m, ["a"], now: now)
        let (w, actions) = Self.wait(&m, now: now)
        let deadline = now.adding(.seconds(5))
        #expect(actions == [.arm(deadline)])
        // A timer that fires early fails nobody and is armed again for the same deadline.
        #expect(Self.did(m.timerFired(now: now.adding(.seconds(4)))) == [.arm(deadline)])
        #expect(m.waitingCount == 1)
        #expect(Self.did(m.timerFired(now: deadline)) == [.fail(w, .timeout)], "the fired timer is gone: nothing to cancel")
        #expect(m.waitingCount == 0 && m.armedTimer == nil)
    }

    @Test func aWaiterServedBeforeItsDeadline_cancelsTheTimer() {
        var m = Self.machine(max: 1)
        let a = Self.leased(&m, ["a"], now: now)[0]
        let (w, _) = Self.wait(&m, now: now)
        #expect(m.armedTimer != nil)
        let later = now.adding(.seconds(1))
        #expect(Self.did(m.release(a, reusable: true, now: later)) == [.handOver("a", to: w), .cancelTimer])
        #expect(m.armedTimer == nil)
        // Past the deadline, nothing is left to time out.
        #expect(Self.did(m.timerFired(now: later.adding(.seconds(10)))).isEmpty)
    }

    @Test func waitersAreServedInArrivalOrder_andTheTimerFollowsTheFirst() {
        var m = Self.machine(max: 1, timeout: .seconds(5))
        let a = Self.leased(&m, ["a"], now: now)[0]
        let (first, _) = Self.wait(&m, now: now)
        let (second, armSecond) = Self.wait(&m, now: now.adding(.seconds(1)))
        #expect(armSecond.isEmpty, "the timer already covers an earlier deadline")
        let (third, _) = Self.wait(&m, now: now.adding(.seconds(2)))
        #expect(Self.did(m.release(a, reusable: true, now: now)) == [.handOver("a", to: first), .arm(now.adding(.seconds(6)))])
        #expect(Self.did(m.release(a, reusable: true, now: now)) == [.handOver("a", to: second), .arm(now.adding(.seconds(7)))])
        #expect(Self.did(m.release(a, reusable: true, now: now)) == [.handOver("a", to: third), .cancelTimer])
        #expect(Self.did(m.release(a, reusable: true, now: now)).isEmpty)
        #expect(m.idleCount == 1 && m.open == 1)
    }

    @Test func aBrokenSessionIsReplacedForTheFirstWaiter_andItsSlotReused() {
        var m = Self.machine(max: 1)
        let a = Self.leased(&m, ["a"], now: now)[0]
        let (w, _) = Self.wait(&m, now: now)
        a.isBroken = true
        let actions = m.release(a, reusable: false, now: now)
        guard case .connect(let c)? = actions.first else { return #expect(Bool(false), "expected a replacement open") }
        #expect(Self.did(actions) == [.connect(c), .cancelTimer], "the waiter now waits for the open, not the clock")
        #expect(m.open == 1 && m.waitingCount == 0 && m.connectingCount == 1)
        #expect(Self.did(m.connected(c, FakeSession("b"), now: now)) == [.handOver("b", to: w)])
    }

    @Test func aBrokenSessionFoundIdleIsDropped_andANewOneOpened() {
        var m = Self.machine(max: 1)
        let a = Self.leased(&m, ["a"], now: now)[0]
        _ = m.release(a, reusable: true, now: now)
        a.isBroken = true
        let (_, actions) = Self.wait(&m, now: now)
        guard case .connect? = actions.first else { return #expect(Bool(false), "expected an open") }
        #expect(m.open == 1 && m.idleCount == 0)
    }

    @Test func aSessionLeftInATransactionIsClosed_andTheSlotFreed() {
        var m = Self.machine(max: 1)
        let a = Self.leased(&m, ["a"], now: now)[0]
        #expect(Self.did(m.release(a, reusable: false, now: now)) == [.close("a")])
        #expect(m.open == 0)
    }

    @Test func aSlowOpenLosesToARelease_andTheNewSessionGoesIdle() {
        var m = Self.machine(max: 2)
        let a = Self.leased(&m, ["a"], now: now)[0]
        let (w, actions) = Self.wait(&m, now: now)
        guard case .connect(let c)? = actions.first else { return #expect(Bool(false), "expected an open") }
        #expect(Self.did(m.release(a, reusable: true, now: now)) == [.handOver("a", to: w)])
        #expect(Self.did(m.connected(c, FakeSession("b"), now: now)).isEmpty)
        #expect(m.idleCount == 1 && m.open == 2)
    }

    @Test func aFailedOpenFailsItsWaiter_unlessServedAlready() {
        var m = Self.machine(max: 3)
        let a = Self.leased(&m, ["a"], now: now)[0]
        let (w1, open1) = Self.wait(&m, now: now)
        let (w2, open2) = Self.wait(&m, now: now)
        guard case .connect(let c1)? = open1.first, case .connect(let c2)? = open2.first else { return #expect(Bool(false)) }
        #expect(Self.did(m.connectFailed(c1)) == [.fail(w1, .connectFailed)])
        #expect(Self.did(m.release(a, reusable: true, now: now)) == [.handOver("a", to: w2)])
        #expect(Self.did(m.connectFailed(c2)).isEmpty)
        #expect(m.open == 1 && m.waitingCount == 0 && m.connectingCount == 0)
    }

    @Test func shutdownFailsEveryWaiter_closesIdleSessions_andClosesWhatComesBack() {
        var m = Self.machine(max: 2)
        let s = Self.leased(&m, ["a", "b"], now: now)
        let (w1, _) = Self.wait(&m, now: now)
        let (w2, _) = Self.wait(&m, now: now)
        #expect(Self.did(m.shutdown()) == [.fail(w1, .shutDown), .fail(w2, .shutDown), .cancelTimer])
        #expect(Self.did(m.release(s[0], reusable: true, now: now)) == [.close("a")])
        #expect(Self.did(m.release(s[1], reusable: false, now: now)) == [.close("b")], "closed once")
        guard case .shutDown = m.acquire(now: now, preferring: { _ in false }) else { return #expect(Bool(false)) }
        #expect(m.open == 0)

        var idle = Self.machine(max: 1)
        let a = Self.leased(&idle, ["a"], now: now)[0]
        _ = idle.release(a, reusable: true, now: now)
        #expect(Self.did(idle.shutdown()) == [.close("a")])
        #expect(idle.open == 0 && idle.idleCount == 0)
    }

    @Test func theIdleSweepClosesSessionsIdleTooLong_keepingTheMinimum() {
        var c = PostgresPool.Configuration()
        c.maxConnections = 3
        c.minIdleConnections = 1
        c.idleTimeout = .seconds(60)
        var m = Machine(configuration: c)
        let s = Self.leased(&m, ["a", "b", "c"], now: now)
        _ = m.release(s[0], reusable: true, now: now)
        _ = m.release(s[1], reusable: true, now: now.adding(.seconds(10)))
        _ = m.release(s[2], reusable: true, now: now.adding(.seconds(50)))
        #expect(Self.did(m.sweepIdle(now: now.adding(.seconds(59)))).isEmpty)
        #expect(Self.did(m.sweepIdle(now: now.adding(.seconds(71)))) == [.close("b"), .close("a")])
        #expect(m.idleCount == 1 && m.open == 1)
    }

    @Test func anIdleSessionOnTheCallersLoopIsPreferred() {
        var m = Self.machine(max: 2)
        let s = Self.leased(&m, ["a", "b"], now: now)
        _ = m.release(s[0], reusable: true, now: now)
        _ = m.release(s[1], reusable: true, now: now)
        guard case .session(let got) = m.acquire(now: now, preferring: { $0.name == "a" }) else { return #expect(Bool(false)) }
        #expect(got.name == "a")
    }
}
