// HTTP: HTTP/1.1 sans-I/O parser and writer, server (keep-alive, pipelining, limits, timeouts), router, client.

/// Marker for the module; the real API lives in the other files of this folder.
public enum HTTPModule {
    public static let name = "HTTP"
}
