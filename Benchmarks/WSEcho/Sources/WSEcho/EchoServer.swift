import Glibc
import Sockets
import WebSocket

/// The listening socket and the table of connections; lives on the loop thread only.
final class EchoServer {
    /// Holds the server for the process lifetime (only touched once, on the loop thread).
    nonisolated(unsafe) static var keepAlive: EchoServer?

    let loop: EventLoop
    let listenFD: Int32
    let port: UInt16
    let handshake: WebSocketServerHandshake
    var connections: [Int32: EchoConnection] = [:]
    /// One read buffer for the whole loop: every read is consumed before the next one.
    let readBuffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 256 * 1024, alignment: 16)

    init(loop: EventLoop, port: UInt16, deflate: Bool) throws(IOError) {
        self.loop = loop
        handshake = WebSocketServerHandshake(subprotocols: ["bigpeer-sync.v1"],
                                             deflate: deflate ? PerMessageDeflateConfiguration() : nil)
        let fd = try Syscall.call("socket") {
            socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = port.bigEndian
        addr.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        _ = try Syscall.call("bind") {
            withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        }
        _ = try Syscall.call("listen") { listen(fd, 1024) }
        var bound = sockaddr_in()
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &bound) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) } }
        self.port = UInt16(bigEndian: bound.sin_port)
        listenFD = fd
        _ = try loop.register(fd: fd, interest: .readable) { [unowned self] _ in self.acceptAll() }
    }

    private func acceptAll() {
        while true {
            let result: IOResult<Int32>
            do {
                // Glibc's module map hides accept4 (a _GNU_SOURCE symbol): accept, then fcntl.
                result = try Syscall.nonBlocking("accept") { accept(listenFD, nil, nil) }
            } catch {
                return // EMFILE and friends: try again on the next readiness event
            }
            guard case .processed(let fd) = result else { return }
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            var one: Int32 = 1
            setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            let connection = EchoConnection(fd: fd, server: self)
            do {
                connection.registration = try loop.register(fd: fd, interest: .readable) { [weak connection] r in
                    connection?.onEvent(r)
                }
                connections[fd] = connection
            } catch {
                Syscall.close(fd)
            }
        }
    }
}
