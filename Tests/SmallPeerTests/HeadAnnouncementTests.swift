import BigPeerTestSupport
import CRDT
@testable import SmallPeer
import Synchronization
@testable import Sync
import Testing

/// A new change-log head reaches a session on the session's own executor, never in the feed's
/// call: the feed calls every listener in turn on one task, and stepping each session there
/// served a thousand peers one after another on one thread (`SyncConnection.headAnnounced`).
@Suite struct HeadAnnouncementTests {
    /// An executor that holds its jobs until the test runs them.
    final class HeldExecutor: TaskExecutor {
        let jobs = Mutex<[UnownedJob]>([])
        func enqueue(_ job: consuming ExecutorJob) {
            let unowned = UnownedJob(job)
            jobs.withLock { $0.append(unowned) }
        }
        var count: Int { jobs.withLock { $0.count } }
        func runAll() {
            for job in jobs.withLock({ j in defer { j = [] }; return j }) { job.runSynchronously(on: asUnownedTaskExecutor()) }
        }
    }

    @Test func headsHopToTheSessionsExecutor_andHeadsAnnouncedMeanwhileJoinTheHop() throws {
        let dir = TempDirectory("heads")
        defer { dir.cleanup() }
        let peer = try openPeer(dir.path)
        let executor = HeldExecutor()
        let c = SyncConnection(configuration: SyncSession.Configuration(serverSite: peer.siteID.rawValue, sessionID: "heads"),
                               storage: PeerSyncStorage(peer: peer), transport: SyncConnection.Transport(send: { _ in }, close: { _, _ in }),
                               executor: executor, clock: { 1 }) { _ in .accept(.everything) }
        c.start()
        executor.runAll()  // the heartbeat's first round
        let before = c.session.withLock { $0.logHead }
        let queued = executor.count

        c.headAnnounced(before + 5)
        c.headAnnounced(before + 7)
        c.headAnnounced(before + 6)
        #expect(c.session.withLock { $0.logHead } == before, "a head was handled in the feed's call")
        #expect(executor.count == queued + 1, "one hop for three announcements")

        executor.runAll()
        #expect(c.session.withLock { $0.logHead } == before + 7)
        c.headAnnounced(before + 9)
        #expect(executor.count == 1)
        executor.runAll()
        #expect(c.session.withLock { $0.logHead } == before + 9)
        c.transportClosed()
    }
}
