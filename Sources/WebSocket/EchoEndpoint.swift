// The conformance and benchmark echo endpoint (`bigpeer serve --enable-echo`, `/api/v4/_echo`).

/// Echoes every message back with its type (what Autobahn's fuzzingclient expects).
public final class WebSocketEchoHandler: WebSocketHandler {
    public init() {}

    public func webSocket(_ socket: WebSocketServerAdapter, didReceive message: WebSocketMessage) {
        // `.notOpen` only after the close handshake started: nothing left to echo to.
        try? socket.send(message)
    }
}

extension WebSocketEndpoint {
    /// The echo endpoint: no subprotocol, permessage-deflate offered with the RFC defaults
    /// (context takeover on), and `configuration` (default `.echo`: Autobahn section 9 sends
    /// 16 MiB messages and up to 65,536 fragments). It authenticates nobody: enable it only for
    /// conformance runs and benchmarks.
    public static func echo(configuration: WebSocketConfiguration = .echo) -> WebSocketEndpoint {
        WebSocketEndpoint(
            handshake: WebSocketServerHandshake(subprotocols: [], deflate: PerMessageDeflateConfiguration()),
            configuration: configuration,
            makeHandler: { _, _ in WebSocketEchoHandler() })
    }
}
