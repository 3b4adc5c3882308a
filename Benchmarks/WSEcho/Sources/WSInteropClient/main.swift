// ws-interop-client: our client against any echo server (scripts/ws-interop.py runs it against
// the Python `websockets` server). Sends text and binary at every length encoding, a fragmented-
// size spread, a ping, then closes with 1000; exits 1 on the first mismatch.
//
//   ws-interop-client HOST PORT [PATH] [--no-deflate]
import Glibc
import WSBlockingClient
import WebSocket

let args = Array(CommandLine.arguments.dropFirst()).filter { !$0.hasPrefix("--") }
let deflate = !CommandLine.arguments.contains("--no-deflate")
guard args.count >= 2, let port = UInt16(args[1]) else {
    print("usage: ws-interop-client HOST PORT [PATH] [--no-deflate]")
    exit(2)
}

func fail(_ message: String) -> Never {
    print("FAIL: \(message)")
    exit(1)
}

do {
    let client = try BlockingWebSocketClient(host: args[0], port: port, path: args.count > 2 ? args[2] : "/",
                                             subprotocols: ["bigpeer-sync.v1"], deflate: deflate)
    if deflate && client.agreement.deflate == nil { fail("permessage-deflate not negotiated") }
    var state: UInt64 = 12345
    func nextByte() -> UInt8 {
        state = state &* 6364136223846793005 &+ 1442695040888963407
        return UInt8(truncatingIfNeeded: state >> 33)
    }
    for size in [0, 1, 125, 126, 127, 65_535, 65_536, 100_000, 1 << 20] {
        let text = String(repeating: "κόσμε sync ", count: size / 16 + 1)
        try client.send(.text(text))
        guard client.receive() == .text(text) else { fail("text echo of \(text.utf8.count) bytes") }
        let binary = (0..<size).map { _ in nextByte() }
        try client.send(.binary(binary))
        guard client.receive() == .binary(binary) else { fail("binary echo of \(size) bytes") }
    }
    for i in 0..<500 { try client.send(.text("m\(i)")) }
    for i in 0..<500 { guard client.receive() == .text("m\(i)") else { fail("pipelined message \(i)") } }
    try client.ping([1, 2, 3])
    client.close(.normalClosure, reason: "interop done")
    client.runUntilFinished()
    guard let info = client.closeInfo, info.code == .normalClosure else { fail("close handshake: \(String(describing: client.closeInfo))") }
    print("ok: our client against \(args[0]):\(port) deflate=\(deflate) subprotocol=\(client.agreement.subprotocol ?? "none")")
} catch {
    fail("\(error)")
}
