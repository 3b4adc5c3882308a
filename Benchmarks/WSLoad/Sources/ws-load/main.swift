// ws-load: WebSocket echo load for Benchmarks/ws.sh, against any echo server.
//
//   ws-load URL [--connections N] [--seconds S] [--size BYTES] [--binary] [--deflate]
//               [--threads T] [--idle] [--hold S]
//
// Echo mode (default): N connections, each with exactly one message in flight; every echo is
// checked (same type, same bytes) and answered with the next message. Counts round trips over
// S seconds after a short warm-up and prints one line:
//   rt/s=… MiB/s=… connections=… deflate=yes|no errors=…
// (MiB/s is payload echoed per second, one direction.) Idle mode (--idle): opens N connections,
// prints "ready N", holds them for --hold seconds without sending, then exits; the script
// reads the server's RSS meanwhile.
//
// Our own client adapter on our own epoll loops (`WebSocketClientAdapter`, `EventLoopGroup`):
// a compiled client, so one core of it outruns what the servers under test can echo.
import Glibc
import Sockets
import Synchronization
import WebSocket

struct Options {
    var url = WebSocketURL("ws://127.0.0.1:8080/api/v4/_echo")!
    var connections = 1
    var seconds = 5.0
    var size = 64
    var binary = false
    var deflate = false
    var threads = 1
    var idle = false
    var hold = 5.0

    static func parse(_ args: [String]) -> Options? {
        var o = Options()
        var i = 0
        func value() -> String? { i += 1; return i < args.count ? args[i] : nil }
        while i < args.count {
            switch args[i] {
            case "--connections": guard let v = value().flatMap(Int.init), v > 0 else { return nil }; o.connections = v
            case "--seconds": guard let v = value().flatMap(Double.init), v > 0 else { return nil }; o.seconds = v
            case "--size": guard let v = value().flatMap(Int.init), v >= 0, v <= 16 << 20 else { return nil }; o.size = v
            case "--threads": guard let v = value().flatMap(Int.init), v > 0 else { return nil }; o.threads = v
            case "--hold": guard let v = value().flatMap(Double.init), v >= 0 else { return nil }; o.hold = v
            case "--binary": o.binary = true
            case "--deflate": o.deflate = true
            case "--idle": o.idle = true
            default:
                guard let url = WebSocketURL(args[i]), !url.secure else { return nil }
                o.url = url
            }
            i += 1
        }
        return o
    }
}

/// Counters shared by every loop.
final class Stats: Sendable {
    let roundTrips = Atomic<Int>(0)
    let connected = Atomic<Int>(0)
    let deflated = Atomic<Int>(0)
    let failed = Atomic<Int>(0)
    let closed = Atomic<Int>(0)
    let mismatched = Atomic<Int>(0)
}

/// The payload: for text, ASCII; for binary, JSON-like records with seeded numbers, so that
/// permessage-deflate has something realistic to compress (about 3:1 with zlib's defaults).
func makePayload(size: Int, binary: Bool) -> WebSocketMessage {
    guard binary else { return .text(String(repeating: "x", count: size)) }
    var state: UInt64 = 0x5EED
    func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    let words = ["alpha", "bravo", "delta", "echo", "peer", "sync", "store", "query", "index", "delta"]
    var bytes: [UInt8] = []
    bytes.reserveCapacity(size + 128)
    while bytes.count < size {
        let r = next()
        let record = "{\"_id\":\"\(String(r, radix: 16))\",\"n\":\(r % 100_000),\"tag\":\"\(words[Int(r % 10)])\",\"ok\":\(r & 1 == 0)},"
        bytes.append(contentsOf: record.utf8)
    }
    return .binary(Array(bytes.prefix(size)))
}

/// One connection: sends the payload, checks each echo, sends again.
final class EchoClient: WebSocketClientHandler {
    let payload: WebSocketMessage
    let stats: Stats
    let idle: Bool

    init(payload: WebSocketMessage, stats: Stats, idle: Bool) {
        self.payload = payload
        self.stats = stats
        self.idle = idle
    }

    func webSocketDidConnect(_ socket: WebSocketClientAdapter, agreement: WebSocketClientHandshake.Agreement) {
        stats.connected.add(1, ordering: .relaxed)
        if agreement.deflate != nil { stats.deflated.add(1, ordering: .relaxed) }
        if !idle { try? socket.send(payload) }
    }

    func webSocket(_ socket: WebSocketClientAdapter, didReceive message: WebSocketMessage) {
        if message != payload { stats.mismatched.add(1, ordering: .relaxed) }
        stats.roundTrips.add(1, ordering: .relaxed)
        try? socket.send(payload)
    }

    func webSocketDidClose(_ socket: WebSocketClientAdapter, code: WebSocketCloseCode, reason: String) {
        stats.closed.add(1, ordering: .relaxed)
    }

    func webSocket(_ socket: WebSocketClientAdapter, didFailToConnect error: WebSocketClientError) {
        stats.failed.add(1, ordering: .relaxed)
        complain("ws-load: \(error)\n")
    }
}

/// Writes a line to standard error (write(2): no shared `FILE *` across threads).
func complain(_ text: String) {
    var line = text
    if !line.hasSuffix("\n") { line += "\n" }
    line.withUTF8 { _ = write(2, $0.baseAddress, $0.count) }
}

func sleep(seconds: Double) {
    var request = timespec(tv_sec: Int(seconds), tv_nsec: Int((seconds - Double(Int(seconds))) * 1e9))
    var remaining = timespec()
    while nanosleep(&request, &remaining) != 0 && errno == EINTR { request = remaining }
}

func now() -> Double { Double(NanoTime.now().nanoseconds) / 1e9 }

/// Runs one measurement; returns the exit status.
func run(_ options: Options, address: SocketAddress) -> Int32 {
    let group: EventLoopGroup
    do { group = try EventLoopGroup(threads: options.threads) } catch { complain("ws-load: \(error)\n"); return 1 }
    let stats = Stats()
    let payload = makePayload(size: options.size, binary: options.binary)
    var echoLimits = WebSocketConfiguration.echo
    echoLimits.pingInterval = nil  // a benchmark connection is never idle long enough to need one
    let configuration = echoLimits
    let handshake = WebSocketClientHandshake(deflate: options.deflate ? PerMessageDeflateConfiguration() : nil)

    // Connect in batches, so a large idle run does not overrun the server's accept backlog.
    var started = 0
    while started < options.connections {
        let batch = min(256, options.connections - started)
        for _ in 0..<batch {
            let loop = group.next()
            let (url, idle) = (options.url, options.idle)
            loop.execute {
                let client = EchoClient(payload: payload, stats: stats, idle: idle)
                _ = try? WebSocketClientAdapter.connect(url: url, address: address, loop: loop, handshake: handshake,
                                                        configuration: configuration, handler: client)
            }
        }
        started += batch
        let deadline = now() + 10
        while stats.connected.load(ordering: .relaxed) + stats.failed.load(ordering: .relaxed) < started, now() < deadline {
            sleep(seconds: 0.005)
        }
    }
    let connected = stats.connected.load(ordering: .relaxed)
    guard connected == options.connections else {
        complain("ws-load: only \(connected) of \(options.connections) connections opened\n")
        return 1
    }
    if options.deflate && stats.deflated.load(ordering: .relaxed) != connected {
        complain("ws-load: the server did not agree to permessage-deflate on every connection\n")
        return 1
    }

    if options.idle {
        complain("ready \(connected)")
        sleep(seconds: options.hold)
        return stats.closed.load(ordering: .relaxed) == 0 ? 0 : 1
    }

    sleep(seconds: min(0.5, options.seconds / 5))  // warm-up: caches, TCP windows, zlib state
    let t0 = now()
    let c0 = stats.roundTrips.load(ordering: .relaxed)
    sleep(seconds: options.seconds)
    let c1 = stats.roundTrips.load(ordering: .relaxed)
    let elapsed = now() - t0
    let rate = Double(c1 - c0) / elapsed
    let errors = stats.failed.load(ordering: .relaxed) + stats.closed.load(ordering: .relaxed) + stats.mismatched.load(ordering: .relaxed)
    let mib = rate * Double(options.size) / 1_048_576
    print("rt/s=\(Int(rate)) MiB/s=\((mib * 10).rounded() / 10) connections=\(connected) deflate=\(options.deflate ? "yes" : "no") errors=\(errors)")
    return errors == 0 ? 0 : 1
}

guard let options = Options.parse(Array(CommandLine.arguments.dropFirst())) else {
    complain("usage: ws-load ws://HOST:PORT/PATH [--connections N] [--seconds S] [--size BYTES] [--binary] [--deflate] [--threads T] [--idle] [--hold S]\n")
    exit(2)
}
guard let address = try? SocketAddress(ip: options.url.host, port: options.url.port) else {
    complain("ws-load: the host must be a numeric IP address\n")
    exit(2)
}
let status = run(options, address: address)
// _exit, not exit: the loop threads are still serving sockets, and exit's teardown of process
// state under them crashed the client now and then (the result line lost with it).
fflush(nil)
_exit(status)
