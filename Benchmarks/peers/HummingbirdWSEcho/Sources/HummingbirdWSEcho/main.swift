// Hummingbird 2 WebSocket echo server for Benchmarks/ws.sh: echoes each message with its type on
// any path, permessage-deflate available when the client offers it (the same limits as
// BigPeer's echo endpoint: 20 MiB frames and messages). Usage: HummingbirdWSEcho [port]
import Hummingbird
import HummingbirdWSCompression
import HummingbirdWebSocket
import Logging

let port = CommandLine.arguments.count > 1 ? Int(CommandLine.arguments[1]) ?? 9002 : 9002
var logger = Logger(label: "hb-ws-echo")
logger.logLevel = .error

let app = Application(
    router: Router(),
    server: .http1WebSocketUpgrade(
        configuration: .init(maxFrameSize: 20 << 20, extensions: [.perMessageDeflate(maxDecompressedFrameSize: 20 << 20)])
    ) { _, _, _ in
        .upgrade([:]) { inbound, outbound, _ in
            for try await message in inbound.messages(maxSize: 20 << 20) {
                switch message {
                case .binary(let buffer): try await outbound.write(.binary(buffer))
                case .text(let string): try await outbound.write(.text(string))
                }
            }
        }
    },
    configuration: .init(address: .hostname("127.0.0.1", port: port)),
    logger: logger
)
try await app.runService()
