// ws-autobahn-client: drives our client side against Autobahn's fuzzingserver mode.
//
//   ws-autobahn-client HOST PORT [AGENT] [--no-deflate]      (WS_CASE=N runs one case)
//
// Asks the server for the case count, runs every case (echoing each message with its type, as
// the fuzzingserver expects), then asks it to write the reports.
import Glibc
import WSBlockingClient
import WebSocket

let args = Array(CommandLine.arguments.dropFirst()).filter { $0 != "--no-deflate" }
let deflate = !CommandLine.arguments.contains("--no-deflate")
guard args.count >= 2, let port = UInt16(args[1]) else {
    print("usage: ws-autobahn-client HOST PORT [AGENT] [--no-deflate]")
    exit(2)
}
let host = args[0]
let agent = args.count > 2 ? args[2] : "bigpeer-client"

/// Runs one session on `path`, echoing every message; returns the texts received.
func session(_ path: String) -> [String] {
    var texts: [String] = []
    do {
        let client = try BlockingWebSocketClient(host: host, port: port, path: path, deflate: deflate)
        client.onMessage = { message, client in
            if case .text(let t) = message { texts.append(t) }
            try? client.send(message)
        }
        client.runUntilFinished()
    } catch {
        print("\(path): \(error)")
    }
    return texts
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
