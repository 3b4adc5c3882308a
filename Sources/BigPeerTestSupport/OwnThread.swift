import Foundation
import Sockets

/// Runs blocking work — `usleep`, a child process run to completion (`initdb`, `pg_ctl -w`), a
/// blocking syscall — off Swift's cooperative pool.
///
/// The pool has as many threads as cores (two on the CI machines): a test that blocks one of them
/// for seconds while another test does the same stalls everything else in the process, including
/// the in-process servers' handlers and every test's timers. The awaiting task holds no thread
/// while the work runs. (For waiting on a socket, use `DescriptorWait`.)
public enum OwnThread {
    /// Runs `body` on a new thread and returns its result. Resuming the caller needs no
    /// descriptor or timer, so this works even when a test has used up every descriptor on purpose.
    public static func run<T: Sendable, E: Error>(_ body: @escaping @Sendable () throws(E) -> T) async throws(E) -> T {
        let result: Result<T, E> = await withCheckedContinuation { continuation in
            Thread {
                do throws(E) { continuation.resume(returning: .success(try body())) } catch { continuation.resume(returning: .failure(error)) }
            }.start()
        }
        return try result.get()
    }

    /// Runs async `body`, which makes blocking calls between its awaits (code shared with the
    /// server, such as `LocalPostgres.start`), on an executor with a thread of its own: every
    /// part of `body` that is not isolated elsewhere runs there, not on the cooperative pool.
    public static func runAsync<T>(_ body: () async throws -> T) async throws -> T {
        let executor = try EventLoop()
        defer { executor.stop() }
        return try await withTaskExecutorPreference(executor) { try await body() }
    }
}
