// 10,000 concurrent idle WebSockets on the real HTTP server, kept alive by the server's Pings,
// then all released. The clients live in a child process (scripts/ws-idle-clients.py) so their
// descriptors do not count against this process's RLIMIT_NOFILE; they answer Pings with Pongs.
import BigPeerTestSupport
import Foundation
import Glibc
import HTTP
import Sockets
import Testing
@testable import WebSocket

/// Resident set size of this process, from /proc/self/statm.
func residentBytes() -> Int {
    guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return 0 }
    let fields = text.split(separator: " ")
    guard fields.count > 1, let pages = Int(fields[1]) else { return 0 }
    return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
}

@Suite("WebSocket idle connections", .serialized)
struct IdleConnectionsTests {
    @Test(.timeLimit(.minutes(1)))
    func tenThousandIdleConnections_stayOpenWithPings() async throws {
        let count = 10_000
        var limit = rlimit()
        getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        let needed = rlim_t(count + 1024)
        if limit.rlim_cur < needed {
            limit.rlim_cur = min(limit.rlim_max, needed)
            setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        }
        try #require(limit.rlim_cur >= needed, "RLIMIT_NOFILE hard limit \(limit.rlim_max) is too low")
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../../scripts/ws-idle-clients.py").standardized.path

        var config = WebSocketConfiguration()
        config.pingInterval = .seconds(1)
        config.pingTimeout = .seconds(20)  // the child answers only after all 10,000 are open
        let log = MutexBox(HandlerLog())
        try await withWebSocketServer(recordingRouter(log, configuration: config)) { port in
            let rssBefore = residentBytes()
            let child = try InteractiveChild("python3", [script, String(port), String(count), "4"])
            var finished = false
            defer { if !finished { child.kill() } }

            let opened = await child.readLine()
            #expect(opened == "open \(count)")
            #expect(await eventually { log.withLock { $0.opened == count } })
            let perConnection = (residentBytes() - rssBefore) / count

            // The child idles 4 ping intervals (margin for a loaded machine), answering every Ping.
            let result = await child.readLine()
            #expect(result == "result pinged=\(count) closed=0")
            #expect(log.withLock { $0.closes.isEmpty && $0.opened == count })
            print("idle WebSockets: \(count) open, server RSS +\(perConnection) B per connection")
            #expect(perConnection < 64 << 10)

            _ = await child.finish()  // closing its stdin makes the child exit, closing every socket
            finished = true
            #expect(await eventually { log.withLock { $0.closes.count == count } })
        }
    }
}
