// ws-codec-bench: the sans-I/O cost of one echo round trip, without sockets.
//
// A client connection sends a message, the server connection parses it and echoes it, the
// client parses the echo: two frame encodes (one masked), two parses, two UTF-8/deflate passes.
// Prints round trips per second and MB/s for a few sizes, plain and with permessage-deflate.
import Sockets
import WebSocket

func bench(size: Int, deflate: Bool, noContextTakeover: Bool = false, seconds: Double) {
    let now = NanoTime.now()
    let policy = PerMessageDeflateConfiguration(serverNoContextTakeover: noContextTakeover, clientNoContextTakeover: noContextTakeover)
    let agreement = deflate ? policy.negotiate(offers: [.init(name: "permessage-deflate")])?.0 : nil
    var client = WebSocketConnection(role: .client, configuration: .echo, deflate: agreement, now: now)
    var server = WebSocketConnection(role: .server, configuration: .echo, deflate: agreement, now: now)
    let words = ["sync ", "delta ", "document ", "peer ", "replica "]
    var text = ""
    var i = 0
    while text.utf8.count < size { text += words[i % words.count]; i += 1 }
    let message = WebSocketMessage.text(String(decoding: text.utf8.prefix(size), as: UTF8.self))
    var rounds = 0
    var wireBytes = 0
    let start = NanoTime.now()
    let deadline = start.adding(.milliseconds(Int64(seconds * 1000)))
    while rounds & 63 != 0 || NanoTime.now() < deadline {
        guard let up = try? client.send(message, now: now) else { fatalError("client closed") }
        for case .write(let bytes) in up {
            client.didWrite(byteCount: bytes.count, now: now)
            wireBytes += bytes.count
            for case .deliver(let m) in server.receive(bytes, now: now) {
                guard let down = try? server.send(m, now: now) else { fatalError("server closed") }
                for case .write(let back) in down {
                    server.didWrite(byteCount: back.count, now: now)
                    let delivered = client.receive(back, now: now)
                    precondition(delivered.count == 1, "echo lost")
                }
            }
        }
        rounds += 1
    }
    let elapsed = Double(NanoTime.now().duration(since: start).components.attoseconds) / 1e18
        + Double(NanoTime.now().duration(since: start).components.seconds)
    let perSecond = Double(rounds) / elapsed
    print("size \(size) B, deflate \(deflate)\(noContextTakeover ? " (no context takeover)" : ""): \(Int(perSecond)) round trips/s, "
        + "\(Int(perSecond * Double(size) * 2 / 1_000_000)) MB/s payload, wire \(wireBytes / rounds) B/message")
}

for (size, deflate) in [(64, false), (64, true), (65_536, false), (65_536, true)] {
    bench(size: size, deflate: deflate, seconds: 1.5)
}
bench(size: 64, deflate: true, noContextTakeover: true, seconds: 1.5)
bench(size: 65_536, deflate: true, noContextTakeover: true, seconds: 1.5)
