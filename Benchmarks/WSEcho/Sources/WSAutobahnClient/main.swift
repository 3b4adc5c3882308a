// ws-autobahn-client: drives our client side against Autobahn's fuzzingserver mode.
//
//   ws-autobahn-client HOST PORT [AGENT] [--no-deflate]
//
// Asks the server for the case count, runs every case (echoing each message with its type, as
// the fuzzingserver expects), then asks it to write the reports. Blocking sockets and poll():
// this is test scaffolding around the sans-I/O `WebSocketConnection` in client role.
import Glibc
import Sockets
import WebSocket

let args = Array(CommandLine.arguments.dropFirst()).filter { $0 != "--no-deflate" }
let deflate = !CommandLine.arguments.contains("--no-deflate")
guard args.count >= 2, let port = UInt16(args[1]) else {
    print("usage: ws-autobahn-client HOST PORT [AGENT] [--no-deflate]")
    exit(2)
}
let host = args[0]
let agent = args.count > 2 ? args[2] : "bigpeer-client"

/// Runs one WebSocket session on `path`; returns the text messages received.
func session(_ path: String) -> [String] {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { return [] }
    defer { close(fd) }
    var one: Int32 = 1
    setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
    var addr = sockaddr_in()
    addr.sin_family = sa_family_t(AF_INET)
    addr.sin_port = port.bigEndian
    inet_pton(AF_INET, host, &addr.sin_addr)
    let rc = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
    guard rc == 0 else { print("connect failed"); return [] }

    let handshake = WebSocketClientHandshake(deflate: deflate ? PerMessageDeflateConfiguration() : nil)
    var request = "GET \(path) HTTP/1.1\r\n"
    for (n, v) in handshake.requestHeaders(host: "\(host):\(port)") { request += "\(n): \(v)\r\n" }
    request += "\r\n"
    guard writeAll(fd, Array(request.utf8)) else { return [] }

    // Read the response head.
    var buffer: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 65536)
    var headEnd: Int?
    while headEnd == nil {
        let n = read(fd, &chunk, chunk.count)
        guard n > 0 else { return [] }
        buffer += chunk[0..<n]
        headEnd = (0..<max(0, buffer.count - 3)).first { buffer[$0] == 13 && buffer[$0 + 1] == 10 && buffer[$0 + 2] == 13 && buffer[$0 + 3] == 10 }
        if headEnd == nil && buffer.count > 16384 { return [] }
    }
    let head = String(decoding: buffer[0..<headEnd!], as: UTF8.self).split(separator: "\r\n").map(String.init)
    let status = head.first.flatMap { Int($0.split(separator: " ").dropFirst().first ?? "") } ?? 0
    let headers: [(name: String, value: String)] = head.dropFirst().compactMap { line in
        guard let c = line.firstIndex(of: ":") else { return nil }
        return (String(line[..<c]), String(line[line.index(after: c)...].drop { $0 == " " }))
    }
    let agreement: WebSocketClientHandshake.Agreement
    switch handshake.verify(status: status, headers: headers) {
    case .success(let a): agreement = a
    case .failure(let e): print("handshake failed: \(e)"); return []
    }

    var ws = WebSocketConnection(role: .client, configuration: .echo, deflate: agreement.deflate, now: .now())
    var texts: [String] = []
    var done = false
    func apply(_ actions: [WebSocketAction]) {
        for action in actions {
            switch action {
            case .deliver(let m):
                if case .text(let t) = m { texts.append(t) }
                if let echo = try? ws.send(m, now: .now()) { apply(echo) }
            case .write(let bytes):
                if writeAll(fd, bytes) { ws.didWrite(byteCount: bytes.count, now: .now()) } else { done = true }
            case .closed:
                break
            case .closeTransport:
                done = true
            }
        }
    }
    func receive(_ bytes: [UInt8]) {
        apply(ws.receive(bytes, now: .now()))
        while ws.hasBufferedInput && !done {
            let more = ws.receive([], now: .now())
            if more.isEmpty { break }
            apply(more)
        }
    }
    receive(Array(buffer[(headEnd! + 4)...]))
    while !done {
        var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        let now = NanoTime.now()
        let timeout = ws.nextDeadline.map { $0 > now ? Int32(min(60_000, $0.duration(since: now).components.seconds * 1000 + 1)) : 0 } ?? 60_000
        if poll(&pfd, 1, timeout) == 0 {
            apply(ws.tick(now: .now()))
            continue
        }
        let n = read(fd, &chunk, chunk.count)
        if n <= 0 {
            apply(ws.transportClosed(now: .now()))
            break
        }
        receive(Array(chunk[0..<n]))
    }
    return texts
}

func writeAll(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
    var offset = 0
    while offset < bytes.count {
        let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + offset, bytes.count - offset) }
        if n <= 0 { return false }
        offset += n
    }
    return true
}

if let only = getenv("WS_CASE").flatMap({ Int(String(cString: $0)) }) {
    _ = session("/runCase?case=\(only)&agent=\(agent)")
    exit(0)
}
let count = Int(session("/getCaseCount").first ?? "") ?? 0
print("running \(count) cases as \(agent) (deflate \(deflate))")
for i in 1...max(1, count) where count > 0 {
    _ = session("/runCase?case=\(i)&agent=\(agent)")
}
_ = session("/updateReports?agent=\(agent)")
print("done")
