import Synchronization
import Sockets

/// A small async HTTP/1.1 client for webhooks and upstream links: keep-alive pool per origin,
/// chunked and length-delimited bodies, TLS with chain and host-name verification, a total
/// timeout per request. Redirects are never followed: a 3xx is returned as is.
public final class HTTPClient: Sendable {
    public struct Configuration: Sendable {
        public var connectTimeout: Duration = .seconds(10)
        /// From the call to the complete response, connect and TLS included.
        public var requestTimeout: Duration = .seconds(30)
        public var maxResponseBytes = 16 * 1024 * 1024
        public var maxIdleConnectionsPerOrigin = 8
        public var idleTimeout: Duration = .seconds(60)
        /// Trusted in addition to the system CA store (e.g. a private CA).
        public var additionalCAFile: String?
        public var userAgent = "BigPeer"
        public init() {}

        /// For one kind of bounded call (a webhook, a key-set fetch): `timeout` for connecting and
        /// for the whole response alike.
        public init(timeout: Duration, maxResponseBytes: Int, userAgent: String) {
            connectTimeout = timeout
            requestTimeout = timeout
            self.maxResponseBytes = maxResponseBytes
            self.userAgent = userAgent
        }
    }

    private let configuration: Configuration
    private let group: EventLoopGroup
    private let ownsGroup: Bool
    private let tls: TLSContext
    private struct Pooled: Sendable {
        let id: ObjectIdentifier
        let connection: LoopBound<HTTPClientConnection>
    }
    private let idle = Mutex<[String: [Pooled]]>([:])
    private let isShutDown = Atomic<Bool>(false)

    public init(configuration: Configuration = Configuration(), group: EventLoopGroup? = nil) throws {
        self.configuration = configuration
        tls = try TLSContext(clientWithAdditionalCAFile: configuration.additionalCAFile)
        if let group {
            self.group = group
            ownsGroup = false
        } else {
            self.group = try EventLoopGroup(threads: 1)
            ownsGroup = true
        }
    }

    public func get(_ url: String, headers: HTTPHeaders = HTTPHeaders()) async throws(HTTPClientError) -> HTTPClientResponse {
        try await execute(HTTPClientRequest(method: .GET, url: url, headers: headers))
    }

    public func execute(_ request: HTTPClientRequest) async throws(HTTPClientError) -> HTTPClientResponse {
        guard !isShutDown.load(ordering: .relaxed) else { throw .shutDown }
        let url = try ParsedURL(request.url)
        let bytes = serialize(request, url)
        let deadline = NanoTime.now().adding(configuration.requestTimeout)
        // A pooled connection may have been closed by the server just now; an idempotent request
        // that got no response bytes is retried once on a fresh connection.
        if let pooled = takeIdle(url.poolKey) {
            let result = await run(bytes, request.method, on: pooled, deadline: deadline)
            switch result {
            case .success(let r): return r
            case .failure(.connectionClosed) where Self.isIdempotent(request.method): break
            case .failure(let e): throw e
            }
        }
        let addresses: [SocketAddress]
        // getaddrinfo blocks: on a thread of its own, neither on a loop (the caller may be a handler
        // running on one) nor on a cooperative thread.
        let host = url.host, port = url.port
        switch await BlockingCall.run({ () -> Result<[SocketAddress], IOError> in
            do throws(IOError) { return .success(try SocketAddress.resolve(host: host, port: port)) } catch { return .failure(error) }
        }) {
        case .success(let resolved): addresses = resolved
        case .failure(let error): throw .connectFailed(error.description)
        }
        // Each resolved address in turn (IPv6 and IPv4 for "localhost", say) until one connects.
        var lastError = HTTPClientError.connectFailed("no address for \(url.host)")
        for address in addresses {
            let fresh: LoopBound<HTTPClientConnection>
            do {
                fresh = try await connect(to: address, url: url)
            } catch {
                lastError = error
                continue
            }
            switch await run(bytes, request.method, on: fresh, deadline: deadline) {
            case .success(let r): return r
            case .failure(.connectFailed(let why)): lastError = .connectFailed(why)
            case .failure(let e): throw e
            }
            if NanoTime.now() >= deadline { throw .timedOut }
        }
        throw lastError
    }

    private func connect(to address: SocketAddress, url: ParsedURL) async throws(HTTPClientError) -> LoopBound<HTTPClientConnection> {
        let loop = group.next()
        let key = url.poolKey
        let maxBytes = configuration.maxResponseBytes
        let tls = url.secure ? self.tls : nil
        let connectTimeout = configuration.connectTimeout
        do {
            return try await loop.submit {
                let c = HTTPClientConnection(loop: loop, key: key, maxResponseBytes: maxBytes)
                try c.connect(to: address, tls: tls, serverName: url.host, timeout: connectTimeout)
                return LoopBound(c, loop: loop)
            }
        } catch {
            throw .connectFailed("\(error)")
        }
    }

    private static func isIdempotent(_ m: HTTPMethod) -> Bool { [.GET, .HEAD, .PUT, .DELETE, .OPTIONS].contains(m) }

    private func run(_ bytes: [UInt8], _ method: HTTPMethod, on conn: LoopBound<HTTPClientConnection>,
                     deadline: NanoTime) async -> Result<HTTPClientResponse, HTTPClientError> {
        let remaining = deadline.duration(since: NanoTime.now())
        let pool = LoopBound(self, loop: conn.loop)  // only for returning the connection
        return await withCheckedContinuation { (cont: CheckedContinuation<Result<HTTPClientResponse, HTTPClientError>, Never>) in
            conn.loop.execute {
                let c = conn.value
                var done = false
                let timer = conn.loop.scheduleTimer(after: max(remaining, .zero)) {
                    guard !done else { return }
                    done = true
                    c.close()
                    cont.resume(returning: .failure(.timedOut))
                }
                c.send(bytes, method: method) { result in
                    guard !done else { return }
                    done = true
                    conn.loop.cancelTimer(timer)
                    switch result {
                    case .success(let (response, reusable)):
                        if reusable { pool.value.putIdle(conn) } else { c.close() }
                        cont.resume(returning: .success(response))
                    case .failure(let e):
                        c.close()
                        cont.resume(returning: .failure(e))
                    }
                }
            }
        }
    }

    private func serialize(_ request: HTTPClientRequest, _ url: ParsedURL) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(256 + request.body.count)
        out.append(contentsOf: "\(request.method.rawValue) \(url.target) HTTP/1.1\r\nHost: \(url.hostHeader)\r\n".utf8)
        var hasUA = false
        for f in request.headers where ResponseHeadWriter.isValidName(f.name) && ResponseHeadWriter.isValidValue(f.value) {
            if HTTPHeaders.same(f.name, "host") || HTTPHeaders.same(f.name, "content-length")
                || HTTPHeaders.same(f.name, "transfer-encoding") || HTTPHeaders.same(f.name, "connection") { continue }
            if HTTPHeaders.same(f.name, "user-agent") { hasUA = true }
            out.append(contentsOf: "\(f.name): \(f.value)\r\n".utf8)
        }
        if !hasUA { out.append(contentsOf: "User-Agent: \(configuration.userAgent)\r\n".utf8) }
        if !request.body.isEmpty || [.POST, .PUT, .PATCH].contains(request.method) {
            out.append(contentsOf: "Content-Length: \(request.body.count)\r\n".utf8)
        }
        out.append(contentsOf: "\r\n".utf8)
        out.append(contentsOf: request.body)
        return out
    }

    // MARK: - Pool (called on the connection's loop, or from tasks: all through the Mutex)

    private func takeIdle(_ key: String) -> LoopBound<HTTPClientConnection>? {
        idle.withLock { pool in pool[key]?.popLast()?.connection }
    }

    private func putIdle(_ conn: LoopBound<HTTPClientConnection>) {
        let c = conn.value
        guard c.isUsable, !isShutDown.load(ordering: .relaxed) else { return c.close() }
        let key = c.key
        let added = idle.withLock { pool -> Bool in
            if pool[key, default: []].count >= configuration.maxIdleConnectionsPerOrigin { return false }
            pool[key, default: []].append(Pooled(id: ObjectIdentifier(c), connection: conn))
            return true
        }
        guard added else { return c.close() }
        let id = ObjectIdentifier(c)
        c.onIdleClose = { [weak self] in
            self?.idle.withLock { pool in pool[key]?.removeAll { $0.id == id } }
        }
        c.idleTimer = conn.loop.scheduleTimer(after: configuration.idleTimeout) { c.close() }
    }

    /// Closes idle connections and stops the client's own loop.
    public func shutdown() async {
        isShutDown.store(true, ordering: .relaxed)
        let all = idle.withLock { pool -> [LoopBound<HTTPClientConnection>] in
            defer { pool = [:] }
            return pool.values.flatMap { $0.map(\.connection) }
        }
        for c in all { _ = try? await c.loop.submit { c.value.close() } }
        if ownsGroup { group.shutdown() }
    }
}
