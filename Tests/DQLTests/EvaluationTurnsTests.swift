import Dispatch
@testable import DQL
import Synchronization
import Testing
import TestRandomness

/// The evaluation threads take turns between tenants (`TenantQueues`, `EvaluationWorkers`):
/// docs/ARCHITECTURE.md, "In-memory evaluation".
@Suite struct EvaluationTurnsTests {
    @Test func tenantsTakeTurns_andEachTenantsJobsStayInOrder() {
        var q = TenantQueues<String>()
        for job in ["a1", "a2", "a3"] { q.append(job, for: "a") }
        q.append("b1", for: "b")
        q.append("c1", for: "c")
        q.append("c2", for: "c")
        q.append("n1", for: nil)  // no tenant: one shared turn
        #expect(q.count == 7 && q.tenantCount == 4)
        var out: [String] = []
        while let job = q.next() { out.append(job) }
        #expect(out == ["a1", "b1", "c1", "n1", "a2", "c2", "a3"])
        #expect(q.isEmpty && q.next() == nil)
        // A tenant whose queue ran dry joins the rotation at the back when it comes again.
        q.append("b2", for: "b")
        q.append("a4", for: "a")
        q.append("b3", for: "b")
        #expect([q.next(), q.next(), q.next()] == ["b2", "a4", "b3"])
    }

    /// Random appends and takes against a plain model (a rotation list and per-tenant arrays):
    /// every job comes out once, in the model's order, through the queues' compactions.
    @Test func matchesAPlainModel_throughCompaction() {
        var rng = SeededRandom(seed: 16)
        var q = TenantQueues<Int>()
        var modelQueues: [String?: [Int]] = [:], modelTurns: [String?] = []
        let tenants: [String?] = [nil, "a", "b", "c", "d"]
        var nextJob = 0
        for _ in 0..<20_000 {
            if rng.chance(55) {
                let t = tenants[rng.below(tenants.count)]
                q.append(nextJob, for: t)
                if modelQueues[t] == nil { modelQueues[t] = []; modelTurns.append(t) }
                modelQueues[t]!.append(nextJob)
                nextJob += 1
            } else {
                var want: Int?
                if !modelTurns.isEmpty {
                    let t = modelTurns.removeFirst()
                    want = modelQueues[t]!.removeFirst()
                    if modelQueues[t]!.isEmpty { modelQueues[t] = nil } else { modelTurns.append(t) }
                }
                #expect(q.next() == want)
            }
            #expect(q.count == modelQueues.values.reduce(0) { $0 + $1.count })
            #expect(q.tenantCount == modelTurns.count)
        }
    }

    /// One evaluation thread, one tenant with twenty heavy jobs queued: another tenant's one job
    /// runs after at most two of them, not after all twenty (a plain FIFO ran it last).
    @Test func aPileOfOneTenantsJobs_delaysAnotherTenantByOneJob() {
        let workers = EvaluationWorkers(threads: 1)
        let gate = DispatchSemaphore(value: 0), done = DispatchSemaphore(value: 0)
        let order = Mutex<[String]>([])
        workers.submit(tenant: "pile") { gate.wait(); order.withLock { $0.append("pile-0") }; done.signal() }
        for i in 1...20 { workers.submit(tenant: "pile") { order.withLock { $0.append("pile-\(i)") }; done.signal() } }
        workers.submit(tenant: "other") { order.withLock { $0.append("other") }; done.signal() }
        gate.signal()
        for _ in 0..<22 { done.wait() }
        let ran = order.withLock { $0 }
        #expect(ran.filter { $0 != "other" } == (0...20).map { "pile-\($0)" })
        #expect((ran.firstIndex(of: "other") ?? 99) <= 2, "\(ran)")
    }
}
