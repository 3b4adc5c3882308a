import Glibc
import Sockets
import Synchronization

/// Waiting for a socket (or pipe) in a test without holding one of Swift's cooperative threads.
///
/// Why: the cooperative pool has as many threads as cores (two on the CI machines). A test that
/// sits in a blocking `recv`, `poll(…, 5000)` or `usleep` holds one of them; when two tests do that
/// at once, nothing else in the process runs — not the in-process server's async handlers, not
/// the store's queries, not other tests' timers — and the suite stalls or times out at random.
///
/// How: every wait first asks the kernel (`poll` with a zero timeout, which never blocks). If the
/// descriptor is not ready, the task suspends and one shared `EventLoop` (the project's own,
/// on a thread of its own) watches the descriptor with epoll and a timer, and resumes the task on
/// readiness or at the deadline — no latency added (a sleep-and-poll loop would add a millisecond
/// or more per wait, which thousands of request/response round trips in one test feel), and no
/// thread blocked. If that loop cannot be used (no descriptors left for it, or the descriptor is
/// already watched by another waiter), the wait falls back to polling with short sleeps (1 ms
/// doubling to 10 ms).
public enum DescriptorWait {
    /// True once `fd` has something to read (data, end of stream or an error); false when
    /// `timeout` passes first. Throws `CancellationError` when the task is cancelled.
    public static func readable(_ fd: Int32, timeout: Duration) async throws -> Bool {
        try await wait(fd, events: Int16(POLLIN), interest: .readable, timeout: timeout)
    }

    /// True once `fd` can take more bytes (or has an error pending); false when `timeout` passes.
    public static func writable(_ fd: Int32, timeout: Duration) async throws -> Bool {
        try await wait(fd, events: Int16(POLLOUT), interest: .writable, timeout: timeout)
    }

    /// What one `receive` got.
    public enum Received: Sendable, Equatable {
        case data([UInt8])
        /// The stream ended: `errno` 0 is an orderly end (FIN), anything else the `recv` error
        /// (ECONNRESET, …).
        case closed(errno: Int32)
        case timedOut
    }

    /// Receives up to `maximum` bytes, waiting at most `timeout` for the first of them. Works on
    /// blocking and non-blocking sockets alike (`MSG_DONTWAIT`).
    public static func receive(_ fd: Int32, upTo maximum: Int = 64 * 1024, timeout: Duration) async throws -> Received {
        guard maximum > 0 else { return .data([]) }
        let deadline = ContinuousClock.now + timeout
        var buffer = [UInt8](repeating: 0, count: maximum)
        while true {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
            if n > 0 { return .data(Array(buffer[0..<n])) }
            if n == 0 { return .closed(errno: 0) }
            let e = errno
            guard e == EAGAIN || e == EWOULDBLOCK || e == EINTR else { return .closed(errno: e) }
            let left = deadline - ContinuousClock.now
            guard left > .zero, try await readable(fd, timeout: left) else { return .timedOut }
        }
    }

    /// Sends all of `bytes` (`MSG_NOSIGNAL | MSG_DONTWAIT`, waiting for room when the socket is
    /// full). False when the peer closed or errored, or took nothing for `stallTimeout`.
    public static func sendAll(_ fd: Int32, _ bytes: [UInt8], stallTimeout: Duration) async throws -> Bool {
        var offset = 0
        while offset < bytes.count {
            let n = bytes[offset...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL | MSG_DONTWAIT)) }
            if n > 0 { offset += n; continue }
            let e = errno
            guard n < 0, e == EAGAIN || e == EWOULDBLOCK || e == EINTR else { return false }
            guard try await writable(fd, timeout: stallTimeout) else { return false }
        }
        return true
    }

    // MARK: - Implementation

    /// The loop that watches descriptors for every waiting test; nil if it could not be created
    /// (then waits poll with sleeps).
    static let loop: EventLoop? = try? EventLoop(index: 0)

    static func wait(_ fd: Int32, events: Int16, interest: Interest, timeout: Duration) async throws -> Bool {
        try Task.checkCancellation()
        if isReady(fd, events) { return true }
        guard timeout > .zero else { return false }
        if let loop, let ready = try await waitOnLoop(loop, fd, interest: interest, timeout: timeout) { return ready }
        return try await pollWithSleeps(fd, events, timeout: timeout)
    }

    /// `poll` with a zero timeout: never blocks. POLLHUP/POLLERR/POLLNVAL count as ready, so the
    /// caller's next call sees the end or the error.
    static func isReady(_ fd: Int32, _ events: Int16) -> Bool {
        var p = pollfd(fd: fd, events: events, revents: 0)
        return poll(&p, 1, 0) > 0
    }

    static func pollWithSleeps(_ fd: Int32, _ events: Int16, timeout: Duration) async throws -> Bool {
        let deadline = ContinuousClock.now + timeout
        var delay = Duration.milliseconds(1)
        while true {
            if isReady(fd, events) { return true }
            let left = deadline - ContinuousClock.now
            if left <= .zero { return false }
            try await Task.sleep(for: min(delay, left))
            delay = min(delay * 2, .milliseconds(10))
        }
    }

    /// Nil when the loop could not watch `fd` (the caller falls back to polling).
    static func waitOnLoop(_ loop: EventLoop, _ fd: Int32, interest: Interest, timeout: Duration) async throws -> Bool? {
        let waiter = LoopWaiter()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Bool?, any Error>) in
                loop.execute { waiter.start(loop, fd: fd, interest: interest, timeout: timeout, continuation) }
            }
        } onCancel: {
            loop.execute { waiter.finish(loop, .failure(CancellationError())) }
        }
    }
}

/// One wait on the shared loop: resumed exactly once, by readiness, by its timer or by
/// cancellation, whichever comes first. `start` and `finish` both run on the loop thread; the
/// mutex only makes the state `Sendable` for the cancellation handler's hop to the loop.
final class LoopWaiter: Sendable {
    private enum State {
        case notStarted
        /// Cancelled before `start` ran (the cancellation hop can overtake it).
        case cancelled
        case waiting(CheckedContinuation<Bool?, any Error>, Registration, TimerID)
        case finished
    }

    private let state = Mutex<State>(.notStarted)

    func start(_ loop: EventLoop, fd: Int32, interest: Interest, timeout: Duration,
               _ continuation: CheckedContinuation<Bool?, any Error>) {
        if state.withLock({ if case .cancelled = $0 { true } else { false } }) {
            return continuation.resume(throwing: CancellationError())
        }
        let registration: Registration
        do {
            registration = try loop.register(fd: fd, interest: interest) { [self] _ in finish(loop, .success(true)) }
        } catch {
            // EEXIST (another waiter watches this descriptor), EMFILE, …: poll instead.
            return continuation.resume(returning: nil)
        }
        let timer = loop.scheduleTimer(after: timeout) { [self] in finish(loop, .success(false)) }
        state.withLock { $0 = .waiting(continuation, registration, timer) }
    }

    func finish(_ loop: EventLoop, _ result: Result<Bool?, any Error>) {
        let waiting = state.withLock { state -> (CheckedContinuation<Bool?, any Error>, Registration, TimerID)? in
            switch state {
            case .waiting(let c, let r, let t):
                state = .finished
                return (c, r, t)
            case .notStarted:
                state = .cancelled  // only cancellation can finish a wait that has not started
                return nil
            case .cancelled, .finished:
                return nil
            }
        }
        guard let (continuation, registration, timer) = waiting else { return }
        loop.deregister(registration)
        loop.cancelTimer(timer)
        continuation.resume(with: result)
    }
}
