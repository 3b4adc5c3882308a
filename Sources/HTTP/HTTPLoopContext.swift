import Logging
import Metrics
import Sockets
import Synchronization

/// What every loop of one server shares: immutable configuration, router, TLS context, and the
/// process-wide connection count.
final class HTTPServerShared: Sendable {
    let configuration: HTTPServerConfiguration
    let router: HTTPRouter
    let tls: TLSContext?
    let logger: Logger
    let connectionCount = Atomic<Int>(0)
    let metrics: HTTPMetrics
    /// The most response bytes any connection has had queued at once (`HTTPServer.peakQueuedOutputBytes`).
    let peakQueuedOutputBytes = Atomic<Int>(0)
    /// Request content held now across every loop (`HTTPServerConfiguration.maxBufferedRequestBytes`).
    let requestBudget: ByteBudget

    init(configuration: HTTPServerConfiguration, router: HTTPRouter, tls: TLSContext?, logger: Logger, loops: Int) {
        self.configuration = configuration
        self.router = router
        self.tls = tls
        self.logger = logger
        requestBudget = ByteBudget(limit: configuration.maxBufferedRequestBytes)
        metrics = HTTPMetrics(routes: router.routePatterns, loops: loops)
    }

    func notePeakQueuedOutput(_ bytes: Int) {
        var seen = peakQueuedOutputBytes.load(ordering: .relaxed)
        while bytes > seen {
            let (exchanged, current) = peakQueuedOutputBytes.compareExchange(expected: seen, desired: bytes, ordering: .relaxed)
            if exchanged { return }
            seen = current
        }
    }
}

/// One server's state on one loop: its listener, its connections, the `Date` cache, the request
/// counter and the timeout sweeper. Loop-owned; reached from elsewhere only through
/// `LoopBound` + `loop.execute`.
final class HTTPLoopContext {
    let loop: EventLoop
    let shared: HTTPServerShared
    let date = DateCache()
    let serverName: [UInt8]
    /// This loop's request metrics (written only here).
    let metrics: HTTPMetricsShard
    /// This loop's access-log lines awaiting output (`AccessLog.buffered` only).
    let accessLog: AccessLogBuffer?
    var logger: Logger { shared.logger }
    private(set) var connections: [ObjectIdentifier: HTTPServerConnection] = [:]
    var listener: TCPListener?
    private(set) var draining = false
    private var sequence: UInt64 = 0
    private var sweeper: TimerID?
    /// Set by the single acceptor: where to hand accepted descriptors.
    var distribute: ((Int32, SocketAddress) -> Void)?

    init(loop: EventLoop, shared: HTTPServerShared) {
        self.loop = loop
        self.shared = shared
        serverName = Array(shared.configuration.serverName.utf8)
        metrics = shared.metrics.shard(for: loop)
        if case .buffered(let output) = shared.configuration.accessLog { accessLog = AccessLogBuffer(output: output) } else { accessLog = nil }
        scheduleSweep()
    }

    var connectionCount: Int { connections.count }

    func nextRequestID() -> (loop: Int, number: UInt64) {
        sequence &+= 1
        return (loop.index, sequence)
    }

    /// Adopts an accepted descriptor (on this loop).
    func adopt(fd: Int32, remote: SocketAddress) {
        let limit = shared.configuration.maxConnections
        if draining || shared.connectionCount.add(1, ordering: .relaxed).newValue > limit {
            if !draining { shared.connectionCount.subtract(1, ordering: .relaxed) }
            Syscall.close(fd)
            if !draining, logger.logLevel <= .notice {
                logger.notice("connection refused: limit reached", metadata: ["limit": "\(limit)"])
            }
            return
        }
        let tcp: TCPConnection
        do {
            tcp = try TCPConnection(acceptedFD: fd, remoteAddress: remote, loop: loop, limits: shared.configuration.writeLimits,
                                    tls: shared.tls, handshakeTimeout: shared.configuration.timeouts.tlsHandshake)
        } catch {
            logger.warning("could not set up connection", metadata: ["error": "\(error)"])
            shared.connectionCount.subtract(1, ordering: .relaxed)
            Syscall.close(fd)  // not yet owned by a TCPConnection
            return
        }
        let conn = HTTPServerConnection(context: self, tcp: tcp)
        tcp.delegate = conn
        connections[ObjectIdentifier(conn)] = conn
        do {
            try tcp.start()
        } catch {
            logger.warning("could not set up connection", metadata: ["error": "\(error)"])
            // The TCPConnection owns fd now: close it through the connection (exactly once), which
            // reports back through `remove`, which forgets the connection and fixes the count.
            tcp.close()
        }
    }

    func remove(_ conn: HTTPServerConnection) {
        if connections.removeValue(forKey: ObjectIdentifier(conn)) != nil {
            shared.connectionCount.subtract(1, ordering: .relaxed)
        }
    }

    private func scheduleSweep() {
        sweeper = loop.scheduleTimer(after: shared.configuration.timeouts.sweepInterval) { [weak self] in
            guard let self else { return }
            let now = NanoTime.now()
            for conn in Array(self.connections.values) { conn.checkTimeouts(now: now) }
            self.accessLog?.flush()
            self.scheduleSweep()
        }
    }

    /// Stops accepting and starts draining.
    func beginDrain() {
        draining = true
        accessLog?.flush()
        listener?.close()
        listener = nil
        for conn in Array(connections.values) { conn.beginDrain() }
    }

    /// Closes whatever is still open and stops the sweeper.
    func forceClose() {
        for conn in Array(connections.values) { conn.tcp.close() }
        accessLog?.flush()
        if let s = sweeper { loop.cancelTimer(s) }
        sweeper = nil
    }
}
