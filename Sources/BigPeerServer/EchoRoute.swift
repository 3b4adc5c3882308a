import HTTP
import WebSocket

/// `GET /api/v4/_echo` (only with `--enable-echo`): a WebSocket that echoes every message with
/// its type, permessage-deflate offered. No API key is checked — the Autobahn testsuite cannot
/// send one — which is why the endpoint is off by default and logged as critical when on.
struct EchoRoute {
    static let path = "/api/v4/_echo"
    let limits: WebSocketConfiguration

    /// Registers the route; the endpoint is returned so shutdown can close its sockets (1001).
    func register(on router: inout HTTPRouter) -> WebSocketEndpoint {
        let endpoint = WebSocketEndpoint.echo(configuration: limits)
        router.get(Self.path, endpoint.httpHandler)
        return endpoint
    }
}
