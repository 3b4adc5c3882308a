import Logging
import Metrics
import Sockets
import Synchronization

// Threading model
// ---------------
// The server runs on an `EventLoopGroup` (one thread per core by default). Each accepted
// connection belongs to exactly one loop for its whole life: that loop's thread reads it, parses
// it, runs `.sync` handlers inline, writes responses and enforces its timeouts, with no lock.
//
//   reusePort (default): every loop has its own listening socket (SO_REUSEPORT) and the kernel
//     spreads new connections; an accepted connection never changes thread.
//   singleAcceptor: loop 0 accepts and hands each descriptor (an Int32) to the next loop with
//     `execute`: one hop per connection, never per request.
//
// `.async` handlers run in `Task(executorPreference: loop)`: they start on the connection's loop
// and resume there after awaiting, so the request never changes thread unless the handler itself
// awaits something isolated elsewhere; their result is applied on the loop. Streamed bodies work
// the same way. Per loop state (`HTTPLoopContext`) is loop-owned; what loops share
// (`HTTPServerShared`: configuration, router, TLS context, connection count) is immutable or atomic.

/// An HTTP/1.1 server (optionally HTTPS). `start()` binds and begins accepting;
/// `shutdown(deadline:)` stops accepting, lets in-flight requests finish, then closes the rest.
public final class HTTPServer: Sendable {
    private let shared: HTTPServerShared
    private let group: EventLoopGroup
    private let ownsGroup: Bool
    private let state = Mutex(State())

    private struct State {
        var contexts: [LoopBound<HTTPLoopContext>] = []
        var localPort: Int?
        var shutDown = false
    }

    public enum StartError: Error, Sendable {
        case alreadyStarted
        case invalidHost(String)
    }

    /// - Parameter group: loops to run on; by default the server makes (and later stops) its own
    ///   with `configuration.threads` threads.
    public init(configuration: HTTPServerConfiguration, router: HTTPRouter, logger: Logger = Logger(label: "bigpeer.http"),
                group: EventLoopGroup? = nil) throws {
        var tls: TLSContext?
        if let t = configuration.tls {
            tls = try TLSContext(serverCertificatePath: t.certificatePath, privateKeyPath: t.privateKeyPath)
        }
        if let group {
            self.group = group
            ownsGroup = false
        } else {
            self.group = try EventLoopGroup(threads: configuration.threads, yieldsAfterEachBatch: configuration.loopsYieldAfterEachBatch)
            ownsGroup = true
        }
        shared = HTTPServerShared(configuration: configuration, router: router, tls: tls, logger: logger, loops: self.group.loops.count)
    }

    /// Adds this server's request metrics (`HTTPMetrics.families`) to `registry`.
    public func registerMetrics(on registry: MetricsRegistry) {
        let shared = self.shared
        registry.register(HTTPMetrics.families) { w in
            shared.metrics.collect(into: &w, openConnections: shared.connectionCount.load(ordering: .relaxed),
                                   bufferedRequestBytes: shared.requestBudget.heldBytes, refusedForMemory: shared.requestBudget.refusedTakes)
        }
    }

    /// The bound port (useful with `port: 0`), once started.
    public var localPort: Int? { state.withLock { $0.localPort } }

    /// Open connections across all loops.
    public var connectionCount: Int { shared.connectionCount.load(ordering: .relaxed) }

    /// The most response bytes any one connection has had queued at once since the start: what
    /// the slowest reader cost. A streamed body keeps it near the high-water mark plus one chunk,
    /// whatever the body's size (tests assert that; it also tells an operator what readers cost).
    public var peakQueuedOutputBytes: Int { shared.peakQueuedOutputBytes.load(ordering: .relaxed) }

    /// Request content held in memory now, across all connections (`maxBufferedRequestBytes`).
    public var bufferedRequestBytes: Int { shared.requestBudget.heldBytes }

    /// Requests refused (503) at their head since the start because `maxBufferedRequestBytes` was spent.
    public var requestsRefusedForMemory: Int { shared.requestBudget.refusedTakes }

    public func start() async throws {
        guard state.withLock({ $0.contexts.isEmpty && !$0.shutDown }) else { throw StartError.alreadyStarted }
        let config = shared.configuration
        let host = config.host == "localhost" ? "127.0.0.1" : config.host
        var address: SocketAddress
        do { address = try SocketAddress(ip: host, port: config.port) } catch { throw StartError.invalidHost(config.host) }
        var options = ListenOptions()
        options.backlog = config.backlog
        options.reusePort = config.acceptStrategy == .reusePort
        let listenOptions = options
        let shared = self.shared
        var contexts: [LoopBound<HTTPLoopContext>] = []
        for loop in group.loops {
            let ctx = try await loop.submit { LoopBound(HTTPLoopContext(loop: loop, shared: shared), loop: loop) }
            contexts.append(ctx)
        }
        do {
            switch config.acceptStrategy {
            case .reusePort:
                for ctx in contexts {
                    let bindTo = address
                    let port = try await ctx.loop.submit { () throws -> Int in
                        let c = ctx.value
                        let l = try TCPListener(address: bindTo, options: listenOptions, loop: c.loop) { fd, remote in c.adopt(fd: fd, remote: remote) }
                        c.listener = l
                        return l.localAddress.port
                    }
                    address = try SocketAddress(ip: host, port: port)  // later loops join the same port
                }
            case .singleAcceptor:
                let first = contexts[0]
                let all = contexts
                let counter = Atomic<Int>(0)  // only touched on loop 0; atomic to stay Sendable
                let bindTo = address
                let port = try await first.loop.submit { () throws -> Int in
                    let c = first.value
                    let l = try TCPListener(address: bindTo, options: listenOptions, loop: c.loop) { fd, remote in
                        let target = all[counter.wrappingAdd(1, ordering: .relaxed).oldValue % all.count]
                        if target.loop === c.loop {
                            c.adopt(fd: fd, remote: remote)
                        } else {
                            target.loop.execute { target.value.adopt(fd: fd, remote: remote) }
                        }
                    }
                    c.listener = l
                    return l.localAddress.port
                }
                address = try SocketAddress(ip: host, port: port)
            }
        } catch {
            // Binding failed (EADDRINUSE, EACCES, …): undo what was set up; the server is spent.
            for ctx in contexts { _ = try? await ctx.loop.submit { ctx.value.beginDrain(); ctx.value.forceClose() } }
            state.withLock { $0.shutDown = true }
            if ownsGroup { group.shutdown() }
            throw error
        }
        let port = address.port
        state.withLock {
            $0.contexts = contexts
            $0.localPort = port
        }
        shared.logger.notice("listening", metadata: ["address": "\(address)", "threads": "\(group.loops.count)",
                                                      "tls": "\(shared.tls != nil)"])
    }

    /// Stops accepting, closes idle connections, lets in-flight requests finish (their responses
    /// carry `Connection: close`) for up to `deadline`, then closes everything left. Stops the
    /// loops if the server made them.
    public func shutdown(deadline: Duration = .seconds(10)) async {
        let contexts = state.withLock { s -> [LoopBound<HTTPLoopContext>] in
            s.shutDown = true
            return s.contexts
        }
        for ctx in contexts { _ = try? await ctx.loop.submit { ctx.value.beginDrain() } }
        let end = NanoTime.now().adding(deadline)
        while shared.connectionCount.load(ordering: .relaxed) > 0 && NanoTime.now() < end {
            try? await Task.sleep(for: .milliseconds(10))
        }
        for ctx in contexts { _ = try? await ctx.loop.submit { ctx.value.forceClose() } }
        state.withLock { $0.contexts = [] }
        if ownsGroup { group.shutdown() }
        shared.logger.notice("stopped")
    }
}
