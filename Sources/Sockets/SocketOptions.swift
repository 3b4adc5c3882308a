import CEpoll
import Glibc

/// Small helpers over the socket syscalls, all through `Syscall`.
enum SocketOps {
    static func setOption(_ fd: Int32, _ level: Int32, _ name: Int32, _ value: Int32) throws(IOError) {
        var v = value
        _ = try Syscall.call("setsockopt(\(name))") {
            setsockopt(fd, level, name, &v, socklen_t(MemoryLayout<Int32>.size))
        }
    }

    /// A non-blocking, close-on-exec stream socket for `family`.
    static func streamSocket(family: Int32) throws(IOError) -> Int32 {
        try Syscall.call("socket") {
            socket(family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        }
    }

    /// Disables Nagle: each response goes out in one write and must not wait for a delayed ACK.
    static func setNoDelay(_ fd: Int32) {
        var one: Int32 = 1
        _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
    }

    /// Pending socket error (`SO_ERROR`), used after a non-blocking connect.
    static func pendingError(_ fd: Int32) -> Int32 {
        var err: Int32 = 0
        var len = socklen_t(MemoryLayout<Int32>.size)
        if getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 { return bp_errno() }
        return err
    }
}
