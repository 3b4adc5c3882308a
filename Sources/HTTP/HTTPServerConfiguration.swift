import Sockets

/// Everything `HTTPServer` needs to know; the `bigpeer serve` flags map onto it.
public struct HTTPServerConfiguration: Sendable {
    /// Numeric address to bind (`0.0.0.0`, `::`, `127.0.0.1`); `localhost` means `127.0.0.1`.
    public var host = "0.0.0.0"
    /// 0 picks a free port; read it back from `HTTPServer.localPort`.
    public var port = 8080
    /// Loop threads (one per core by default).
    public var threads = EventLoopGroup.defaultThreadCount
    /// Loop threads offer the CPU after each batch of events (`EventLoop.yieldsAfterEachBatch`).
    public var loopsYieldAfterEachBatch = true
    public var acceptStrategy = AcceptStrategy.reusePort
    public var backlog: Int32 = 1024
    /// Open connections across all loops; further accepts are closed at once.
    public var maxConnections = 10_000
    /// Request content held in memory at once across all connections: each request that is read
    /// whole before its handler runs holds the content it has sent, charged as it arrives, until
    /// its handler is done with it (or its connection closes with no handler running). A request
    /// whose content would go past it gets 503 with `Retry-After`, nothing more of it is read, and
    /// the connection closes. Without it, every connection may hold a body of the largest size at
    /// once (10,000 × 32 MiB). `Int.max` turns it off. Streaming routes are not counted: they read
    /// as their handler consumes. At least `limits.maxBodyBytes`, or the largest request never fits.
    public var maxBufferedRequestBytes = 1 << 30
    /// Parser limits (request line 414, header section 431, body 413).
    public var limits = HTTPParserLimits()
    public var timeouts = Timeouts()
    public var writeLimits = WriteLimits()
    /// Sent in the `Server` header; empty to omit it.
    public var serverName = "BigPeer"
    /// TLS from PEM files; nil serves plain HTTP.
    public var tls: TLS?
    /// A keep-alive connection is closed after this many requests (bounds per-connection state).
    public var maxRequestsPerConnection = 1_000_000
    /// Where the access log (one line per answered request) goes.
    public var accessLog = AccessLog.logger

    public enum AccessLog: Sendable {
        /// Through the server's `Logger` at `info`, one call per request.
        case logger
        /// Formatted per loop into a buffer and handed to the output in batches.
        case buffered(AccessLogOutput)
        case off
    }

    public enum AcceptStrategy: Sendable {
        /// One listening socket per loop with `SO_REUSEPORT`: the kernel spreads connections.
        case reusePort
        /// One listening socket on the first loop, which hands connections round-robin to loops.
        case singleAcceptor
    }

    public struct Timeouts: Sendable {
        /// Idle keep-alive connection, between requests.
        public var idle: Duration = .seconds(60)
        /// From the first byte of a request (or the accept) to the end of its head: slowloris.
        public var header: Duration = .seconds(10)
        /// From the end of the head to the end of the content.
        public var body: Duration = .seconds(30)
        /// A peer that accepts no response bytes for this long is dropped.
        public var write: Duration = .seconds(30)
        /// TLS handshake.
        public var tlsHandshake: Duration = .seconds(10)
        public init() {}

        /// How often each loop checks deadlines: a quarter of the shortest timeout, 10 ms…1 s.
        var sweepInterval: Duration {
            let shortest = [idle, header, body, write].min() ?? .seconds(1)
            return max(.milliseconds(10), min(.seconds(1), shortest / 4))
        }
    }

    public struct TLS: Sendable {
        public var certificatePath: String
        public var privateKeyPath: String
        public init(certificatePath: String, privateKeyPath: String) {
            self.certificatePath = certificatePath
            self.privateKeyPath = privateKeyPath
        }
    }

    public init() {}
}
