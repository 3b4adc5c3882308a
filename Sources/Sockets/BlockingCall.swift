import Glibc

/// Runs a call that may block for a long time — a library function with no non-blocking form,
/// such as a DNS lookup inside libpq's `PQconnectStartParams` — on a thread of its own, so that
/// neither an event loop (every connection on it would wait) nor one of Swift's cooperative
/// threads (as many as cores) is held meanwhile. The awaiting task holds no thread.
///
/// A thread per call: for rare calls (opening a database session), not per request.
public enum BlockingCall {
    private final class Job: @unchecked Sendable {
        // Sendable by hand-off: created by the caller, then touched only by the new thread, which
        // runs `body` once and resumes the continuation once; nothing else holds it.
        let body: () -> Void
        init(_ body: @escaping () -> Void) { self.body = body }
    }

    /// Runs `body` on a new thread and returns its result. If no thread can be created (the
    /// process is at its thread limit), runs it on the caller's thread instead: slower for
    /// everyone, but the call still happens.
    public static func run<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { (continuation: CheckedContinuation<T, Never>) in
            let job = Job { continuation.resume(returning: body()) }
            let box = Unmanaged.passRetained(job).toOpaque()
            var tid = pthread_t()
            let rc = pthread_create(&tid, nil, { arg in
                Unmanaged<Job>.fromOpaque(arg!).takeRetainedValue().body()
                return nil
            }, box)
            if rc == 0 {
                pthread_detach(tid)
            } else {
                Unmanaged<Job>.fromOpaque(box).takeRetainedValue().body()
            }
        }
    }
}
