import HTTP
import Logging
import Synchronization
import Values

/// An HTTP server standing in for a webhook: every POST (or GET, whose body is `null`) to any path
/// is answered by `answer` from the parsed JSON body (and its path); the bodies are kept for the
/// test to look at.
/// `.hang` holds the request until `stop`, for timeouts.
public final class WebhookTestServer: Sendable {
    public enum Answer: Sendable {
        case respond(status: Int, body: [UInt8])
        /// Never answers (until the server stops).
        case hang

        public static func json(_ value: Value, status: Int = 200) -> Answer { .respond(status: status, body: JSON.serialize(value)) }
    }

    private struct State {
        var bodies: [Value] = []
        var held: [CheckedContinuation<Void, Never>] = []
        var stopped = false
    }

    public let server: HTTPServer
    private let state: Mutex<State>

    private init(server: HTTPServer) {
        self.server = server
        state = Mutex(State())
    }

    public var port: Int { server.localPort ?? 0 }
    public func url(_ path: String = "/") -> String { "http://127.0.0.1:\(port)\(path)" }
    /// The JSON bodies received so far, in arrival order.
    public var bodies: [Value] { state.withLock { $0.bodies } }

    public static func start(_ answer: @escaping @Sendable (_ path: String, _ body: Value) async -> Answer) async throws -> WebhookTestServer {
        // The handler needs the state before the server exists; it lives in a box they share.
        let box = MutexBox<WebhookTestServer?>(nil)
        var router = HTTPRouter()
        let handler = HTTPHandler.respond { request in
            let body = (try? JSON.parse(request.body)) ?? .null
            guard let webhook = box.withLock({ $0 }) else { return HTTPResponse(status: HTTPStatus(503, "Not Ready")) }
            webhook.state.withLock { $0.bodies.append(body) }
            switch await answer(String(request.path), body) {
            case .respond(let status, let bytes):
                return HTTPResponse(status: HTTPStatus(status, "Test"), contentType: "application/json", body: bytes)
            case .hang:
                await webhook.hold()
                return HTTPResponse(status: HTTPStatus(503, "Stopped"))
            }
        }
        router.post("/*", handler)
        router.get("/*", handler)
        var config = HTTPServerConfiguration()
        config.host = "127.0.0.1"
        config.port = 0
        config.threads = 1
        var logger = Logger(label: "test.webhook")
        logger.logLevel = .critical
        let server = try HTTPServer(configuration: config, router: router, logger: logger)
        let webhook = WebhookTestServer(server: server)
        box.withLock { $0 = webhook }
        try await server.start()
        return webhook
    }

    private func hold() async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let stopped = state.withLock { s -> Bool in
                if !s.stopped { s.held.append(c) }
                return s.stopped
            }
            if stopped { c.resume() }
        }
    }

    /// Releases held requests and stops the server.
    public func stop() async {
        let held = state.withLock { s -> [CheckedContinuation<Void, Never>] in
            s.stopped = true
            defer { s.held = [] }
            return s.held
        }
        for c in held { c.resume() }
        await server.shutdown(deadline: .milliseconds(500))
    }

    /// Runs `body` with a webhook answering with `answer`; stops it afterwards.
    public static func with<R>(_ answer: @escaping @Sendable (_ path: String, _ body: Value) async -> Answer,
                               _ body: (WebhookTestServer) async throws -> R) async throws -> R {
        let webhook = try await start(answer)
        return try await afterwards({ await webhook.stop() }) { try await body(webhook) }
    }
}
