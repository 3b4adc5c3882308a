// ws-echo: a minimal epoll WebSocket echo server over the sans-I/O `WebSocketConnection`.
//
//   ws-echo [PORT] [--no-deflate]      (PORT 0 picks a free port; the chosen one is printed)
//
// One event loop thread, non-blocking sockets, level-triggered epoll. The HTTP side is just
// enough to read one upgrade request (≤ 16 KiB of headers) — the real HTTP/1.1 server replaces
// this host. Every message is echoed with its type, as Autobahn's fuzzingclient expects.
import Glibc
import Sockets
import WebSocket

var port: UInt16 = 9001
var deflate = true
for arg in CommandLine.arguments.dropFirst() {
    if arg == "--no-deflate" { deflate = false } else if let p = UInt16(arg) { port = p }
}

do {
    let loop = try EventLoop(index: 0)
    let deflateOn = deflate
    let requestedPort = port
    loop.execute {
        do {
            let server = try EchoServer(loop: loop, port: requestedPort, deflate: deflateOn)
            print("ws-echo listening on 127.0.0.1:\(server.port) deflate=\(deflateOn)")
            fflush(nil)
            EchoServer.keepAlive = server
        } catch {
            print("ws-echo: \(error)")
            exit(1)
        }
    }
    loop.waitUntilStopped()
} catch {
    print("ws-echo: \(error)")
    exit(1)
}
