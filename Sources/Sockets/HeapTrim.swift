import CEpoll
import Synchronization

/// Gives memory freed by the process back to the kernel, at most once per `delay`.
///
/// glibc keeps freed heap (in every thread's arena) for reuse instead of returning it: after 100
/// sync peers that never read had left, the server's RSS stayed at 236 MB of the 267 MB they had
/// raised it to (78 MB before them); `malloc_trim(0)` brought it back to 78 MB
/// (docs/performance-history.md, "Peers that never read"). Callers that have just let go of a lot
/// (a session with a full output queue) call `request()`; bursts of such releases cost one trim.
public enum HeapTrim {
    private static let scheduled = Atomic<Bool>(false)
    /// Trims done so far (tests, metrics).
    public static var count: Int { done.load(ordering: .relaxed) }
    private static let done = Atomic<Int>(0)

    /// Schedules a trim `delay` from now unless one is already scheduled. Runs on a thread of its
    /// own (`BlockingCall`): a trim walks every arena, which must not hold a loop.
    public static func request(after delay: Duration = .seconds(1)) {
        guard scheduled.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged else { return }
        Task.detached(priority: .background) {
            try? await Task.sleep(for: delay)
            scheduled.store(false, ordering: .releasing)
            await BlockingCall.run { _ = malloc_trim(0) }
            done.add(1, ordering: .relaxed)
        }
    }
}
