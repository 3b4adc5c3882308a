import Sockets

/// One client connection, owned by its loop: sends one request at a time and parses the response
/// with the same sans-I/O parser the server uses (in response mode).
final class HTTPClientConnection: ConnectionDelegate {
    typealias Completion = (Result<(HTTPClientResponse, reusable: Bool), HTTPClientError>) -> Void

    let loop: EventLoop
    let key: String
    private(set) var tcp: TCPConnection?
    private var parser: HTTPParser
    private var ready = false
    private var everReady = false
    private var closedWith: HTTPClientError?
    private var pending: (bytes: [UInt8], method: HTTPMethod, completion: Completion)?
    private var inFlight: (method: HTTPMethod, completion: Completion)?
    private var head: HTTPResponseHead?
    private var receivedAny = false
    var onIdleClose: (() -> Void)?
    var idleTimer: TimerID?

    init(loop: EventLoop, key: String, maxResponseBytes: Int) {
        self.loop = loop
        self.key = key
        var limits = HTTPParserLimits()
        limits.maxBodyBytes = maxResponseBytes
        parser = HTTPParser(kind: .response, limits: limits)
    }

    func connect(to address: SocketAddress, tls: TLSContext?, serverName: String, timeout: Duration) throws {
        tcp = try TCPConnection.connect(to: address, loop: loop, tls: tls, serverName: serverName, timeout: timeout, delegate: self)
    }

    var isUsable: Bool { !(tcp?.isClosed ?? true) }

    /// Sends `bytes` (a serialized request) once connected; `completion` runs on the loop.
    func send(_ bytes: [UInt8], method: HTTPMethod, completion: @escaping Completion) {
        if let t = idleTimer { loop.cancelTimer(t); idleTimer = nil }
        receivedAny = false
        if let closedWith { return completion(.failure(closedWith)) }  // failed before the request came
        if ready { start(bytes, method, completion) } else { pending = (bytes, method, completion) }
    }

    private func start(_ bytes: [UInt8], _ method: HTTPMethod, _ completion: @escaping Completion) {
        inFlight = (method, completion)
        parser.requestMethod = method
        tcp?.write(bytes)
    }

    func close() { tcp?.close() }

    func connectionIsReady(_ connection: TCPConnection) {
        ready = true
        everReady = true
        if let p = pending {
            pending = nil
            start(p.bytes, p.method, p.completion)
        }
    }

    func connection(_ connection: TCPConnection, didRead bytes: UnsafeRawBufferPointer) {
        receivedAny = true
        guard inFlight != nil else { return connection.close() }  // unsolicited bytes: not reusable
        parser.feed(bytes)
        drain()
    }

    private func drain() {
        while let flight = inFlight {
            do {
                switch try parser.next() {
                case .needMoreData:
                    return
                case .responseHead(let h):
                    head = h
                case .end:
                    guard let h = head else { continue }
                    head = nil
                    // 1xx interim responses (100 Continue) precede the real one (RFC 9110 §15.2).
                    if h.status.code < 200 && h.status.code != 101 { continue }
                    inFlight = nil
                    let response = HTTPClientResponse(status: h.status, version: h.version, headers: h.headers, body: parser.takeBody())
                    flight.completion(.success((response, h.keepAlive && parser.isIdle)))
                case .body, .requestHead:
                    continue
                }
            } catch {
                inFlight = nil
                tcp?.close()
                flight.completion(.failure(.invalidResponse(error)))
            }
        }
    }

    func connectionDidReadEOF(_ connection: TCPConnection) {
        if inFlight != nil {
            do {
                if case .end? = try parser.feedEOF() {
                    // A body delimited by the close: deliver it through the normal path.
                    if let flight = inFlight, let h = head {
                        inFlight = nil
                        head = nil
                        flight.completion(.success((HTTPClientResponse(status: h.status, version: h.version, headers: h.headers,
                                                                       body: parser.takeBody()), false)))
                    }
                }
            } catch {}
        }
        connection.close()
    }

    func connectionDidClose(_ connection: TCPConnection, error: (any Error)?) {
        ready = false
        let failure: HTTPClientError
        switch error {
        case let e as TLSError: failure = .tls(e.description)
        case let e as IOError where e.errno == ETIMEDOUT_VALUE: failure = .timedOut
        case let e as IOError where !everReady: failure = .connectFailed(e.description)
        default: failure = .connectionClosed
        }
        closedWith = failure
        if let p = pending { pending = nil; p.completion(.failure(failure)) }
        if let f = inFlight { inFlight = nil; f.completion(.failure(failure)) }
        onIdleClose?()
        onIdleClose = nil
    }

    /// True when the connection failed before any response byte: a retry on a fresh connection
    /// cannot duplicate anything the server acted on for idempotent methods.
    var sawNoResponseBytes: Bool { !receivedAny }
}

import Glibc
private let ETIMEDOUT_VALUE = ETIMEDOUT
