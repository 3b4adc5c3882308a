import BigPeerTestSupport
import Sockets
import Store
import Synchronization
import Testing
import Values
@testable import Sync
@testable import SyncProtocol

/// A session's store work runs on its executor (an event loop), not on Swift's cooperative pool,
/// whose two threads (on a 2-core machine) any long synchronous work elsewhere holds: an initial
/// sync's page reads then waited 0.5-2.5 s each for a thread, and a 120-page sync took longer
/// than its test's wait (docs/ARCHITECTURE.md, Concurrency).
@Suite struct SyncConnectionExecutorTests {
    /// An event loop that counts the jobs it is given: each is one step of a task that prefers it.
    final class CountingExecutor: TaskExecutor {
        let loop: EventLoop
        let jobs = Atomic<Int>(0)
        init(_ loop: EventLoop) { self.loop = loop }
        func enqueue(_ job: consuming ExecutorJob) {
            jobs.add(1, ordering: .relaxed)
            let job = UnownedJob(job)
            loop.execute { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
        }
    }

    @Test func pageReadsAndStoreRequestsRunOnTheConnectionsExecutor() async throws {
        try await withSyncServer { store, _ in
            let docs = (0..<20).map { "({'_id': 'e\($0 + 10)', 'n': \($0)})" }
            _ = try await store.execute("INSERT INTO bench DOCUMENTS " + docs.joined(separator: ", "))
            let executor = CountingExecutor(TestLoops.group.next())
            let peer = TestPeer(site: 502)  // pages of 2 rows: 10 page reads
            try await peer.connect(store: store, executor: executor)
            let atConnect = executor.jobs.load(ordering: .relaxed)
            await peer.send(.subscribe(Subscribe(id: 1, query: "SELECT * FROM bench")))
            _ = try await peer.waitFor(atMost: .seconds(60)) { if case .synced(1, _) = $0 { true } else { false } }
            let reads = try #require(await peer.connection).pageReadTrace.withLock { $0.reads }
            #expect(reads >= 10)
            // Each page read starts on the executor: at least one job per read (more when its
            // statements suspend, which a fast reply need not do). On the cooperative pool: none.
            #expect(executor.jobs.load(ordering: .relaxed) - atConnect >= reads)
            var paged: [String] = []
            for case .documents(1, let entries) in await peer.messages() {
                for e in entries { if case .string(let s) = e.document.id { paged.append(s) } }
            }
            #expect(paged == (0..<20).map { "e\($0 + 10)" })
            await peer.disconnect()
        }
    }
}
