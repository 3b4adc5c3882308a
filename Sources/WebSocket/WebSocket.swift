// WebSocket: RFC 6455 framing and handshake, RFC 7692 permessage-deflate; server and client.

/// Marker for the module; the real API lives in the other files of this folder.
public enum WebSocketModule {
    public static let name = "WebSocket"
}
