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
                do throws(E) {
                    continuation.resume(returning: .success(try body()))
                } catch {
                    continuation.resume(returning: .failure(error))
                }
            }.start()
        }
        return try result.get()
    }

    /// Runs async `body`, which makes blocking calls between its awaits (code shared with the
    /// server, such as `LocalPostgres.start`), with a task executor of its own as preference:
    /// every part of `body` not isolated elsewhere runs on that executor's thread, not on the
    /// cooperative pool. One such thread serves the whole process (calls take turns) and is never
    /// stopped: unstructured tasks `body` leaves behind (a deferred `Task { await conn.close() }`)
    /// inherit the preference and must still find it running.
    public static func runAsync<T>(_ body: () async throws -> T) async throws -> T {
        try await withTaskExecutorPreference(blockingWork) { try await body() }
    }

    /// Nil only if the thread could not be created; then `runAsync` runs on the pool as before.
    static let blockingWork: EventLoop? = try? EventLoop()
}
