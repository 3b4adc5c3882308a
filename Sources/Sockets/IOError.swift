// Sockets: epoll event loops, non-blocking TCP/UDP sockets, timers, TLS streams. Knows nothing of HTTP.
//
// Every syscall goes through `Syscall` so EINTR is retried in one place, EAGAIN becomes a value
// (`.wouldBlock`) instead of an error, and every failure carries the call's name and errno.

import CEpoll
import Glibc

/// A failed system call: which call, and the errno it set.
public struct IOError: Error, CustomStringConvertible, Sendable, Equatable {
    public let call: String
    public let errno: Int32

    public init(call: String, errno: Int32) {
        self.call = call
        self.errno = errno
    }

    public var description: String {
        "\(call) failed: \(String(cString: strerror(errno))) (errno \(errno))"
    }
}

/// The outcome of a non-blocking call: done with a value, or it would have blocked.
public enum IOResult<T>: Sendable where T: Sendable {
    case processed(T)
    case wouldBlock
}

public enum Syscall {
    /// Runs `body` until it does not fail with EINTR. Returns its result; throws `IOError` on failure.
    @inline(__always)
    public static func call<T: FixedWidthInteger>(_ name: String, _ body: () -> T) throws(IOError) -> T {
        while true {
            let r = body()
            if r != -1 { return r }
            let e = bp_errno()
            if e == EINTR { continue }
            throw IOError(call: name, errno: e)
        }
    }

    /// Like `call`, but EAGAIN/EWOULDBLOCK becomes `.wouldBlock` instead of an error.
    @inline(__always)
    public static func nonBlocking<T: FixedWidthInteger & Sendable>(
        _ name: String, _ body: () -> T
    ) throws(IOError) -> IOResult<T> {
        while true {
            let r = body()
            if r != -1 { return .processed(r) }
            let e = bp_errno()
            if e == EINTR { continue }
            if e == EAGAIN || e == EWOULDBLOCK { return .wouldBlock }
            throw IOError(call: name, errno: e)
        }
    }

    /// Closes a descriptor. EBADF means we closed something we did not own: a bug, not input.
    public static func close(_ fd: Int32) {
        let r = Glibc.close(fd)
        if r == -1 && bp_errno() == EBADF {
            preconditionFailure("close(\(fd)): EBADF — descriptor closed twice or never owned")
        }
        // EINTR on close on Linux: the descriptor is already released; do not retry.
    }
}
