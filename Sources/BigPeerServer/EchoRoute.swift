import HTTP
import WebSocket

/// `GET /api/v4/_echo` (only with `--enable-echo`): a WebSocket that echoes every message with
/// its type, permessage-deflate offered. No API key is checked — the Autobahn testsuite cannot
/// send one — which is why the endpoint is off by default and logged as critical when on.
struct EchoRoute {
    static let path = "/api/v4/_echo"
    let limits: WebSocketConfiguration

    func register(on router: inout HTTPRouter) {
        router.get(Self.path, WebSocketEndpoint.echo(configuration: limits).httpHandler)
    }
}
