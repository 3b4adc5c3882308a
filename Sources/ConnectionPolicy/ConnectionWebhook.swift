import HTTP
import Sockets
import SyncProtocol
import Values

/// The connection webhook (`--connection-webhook URL`): each candidate is POSTed as JSON and the
/// answer allows or denies it. As with Ditto's webhooks, anything but a clear answer denies: a
/// timeout, a connection error, a non-2xx status, a body that is not the documented JSON, or one
/// larger than `maxResponseBytes`. Redirects are not followed (`HTTPClient` never does).
///
/// Request and answer are in docs/LOCAL-NODE.md, "Connection policy":
///
///     POST {"peerKey": "a1b2…", "deviceName": "…", "peerMetadata": {…}, "connectionType": "WebSocket",
///           "remoteAddress": "10.0.0.7:51234", "principal": "k_3f…" | null}
///     200  {"authorization": "allow"}
///          {"authorization": "deny", "reason": "…", "retryAfterSeconds": 120}
///
/// The calls are async I/O on the given loops: many candidates at once wait side by side, and
/// none holds a thread while its webhook thinks.
public final class ConnectionWebhook: Sendable {
    public struct Configuration: Sendable {
        public var url: String
        /// From the call to the whole answer, connecting included.
        public var timeout: Duration = .seconds(10)
        public var maxResponseBytes = 64 << 10
        /// The delay named to a peer the webhook did not answer for.
        public var failureRetryAfterSeconds: UInt32 = 10
        /// The delay named when a denial does not give one.
        public var defaultRetryAfterSeconds: UInt32 = 60
        public init(url: String) { self.url = url }
    }

    public let configuration: Configuration
    private let client: HTTPClient

    /// `group`: the loops the HTTP connections run on (nil: one of the client's own).
    public init(_ configuration: Configuration, group: EventLoopGroup? = nil) throws(PolicyConfigurationError) {
        guard configuration.url.hasPrefix("http://") || configuration.url.hasPrefix("https://") else {
            throw PolicyConfigurationError("--connection-webhook", "not an http:// or https:// URL: \(configuration.url)")
        }
        self.configuration = configuration
        var http = HTTPClient.Configuration()
        http.connectTimeout = configuration.timeout
        http.requestTimeout = configuration.timeout
        http.maxResponseBytes = configuration.maxResponseBytes
        http.userAgent = "BigPeer connection webhook"
        do {
            client = try HTTPClient(configuration: http, group: group)
        } catch {
            throw PolicyConfigurationError("--connection-webhook", "cannot set up the HTTP client: \(error)")
        }
    }

    public func decide(_ candidate: ConnectionCandidate) async -> PolicyVerdict {
        let request = HTTPClientRequest(method: .POST, url: configuration.url,
                                        headers: ["Content-Type": "application/json", "Accept": "application/json"],
                                        body: JSON.serialize(Self.body(candidate)))
        let response: HTTPClientResponse
        do {
            response = try await client.execute(request)
        } catch {
            return failed("\(error)")
        }
        guard (200..<300).contains(response.status.code) else { return failed("status \(response.status)") }
        switch Self.answer(response.body, defaultRetryAfterSeconds: configuration.defaultRetryAfterSeconds) {
        case .success(let decision): return PolicyVerdict(decision, source: "webhook")
        case .failure(let why): return failed(why.description)
        }
    }

    private func failed(_ why: String) -> PolicyVerdict {
        PolicyVerdict(.deny(reason: "the connection webhook did not allow this peer", retryAfterSeconds: configuration.failureRetryAfterSeconds),
                      source: "webhook", failure: why)
    }

    public func shutdown() async { await client.shutdown() }

    /// The JSON the webhook receives.
    public static func body(_ c: ConnectionCandidate) -> Value {
        .object([
            "peerKey": .string(c.peerKeyHex),
            "deviceName": .string(c.deviceName),
            "peerMetadata": .object(c.metadata),
            "connectionType": .string(c.link.rawValue),
            "remoteAddress": .string(c.remoteAddress),
            "principal": c.principal.map { .string($0) } ?? .null,
        ])
    }

    /// The webhook's answer: `authorization` is required; other keys are ignored (room to grow).
    public static func answer(_ body: [UInt8], defaultRetryAfterSeconds: UInt32) -> Result<ConnectionDecision, WebhookAnswerError> {
        guard let value = try? JSON.parse(body, limits: JSONLimits(maxDepth: 16, maxInputBytes: body.count, duplicateKeys: .reject)),
              case .object(let o) = value else {
            return .failure(WebhookAnswerError("the answer is not a JSON object"))
        }
        switch o["authorization"] {
        case .string("allow")?:
            return .success(.allow)
        case .string("deny")?:
            var reason = "denied by the connection webhook"
            if case .string(let r)? = o["reason"], !r.isEmpty { reason = r }
            var retry = defaultRetryAfterSeconds
            if let given = o["retryAfterSeconds"] {
                guard case .int(let n) = given, n >= 0 else {
                    return .failure(WebhookAnswerError("retryAfterSeconds is not a non-negative integer"))
                }
                retry = UInt32(clamping: min(n, 86_400))
            }
            return .success(.deny(reason: reason, retryAfterSeconds: retry))
        default:
            return .failure(WebhookAnswerError("\"authorization\" is neither \"allow\" nor \"deny\""))
        }
    }
}

/// Why a webhook's answer could not be used (logged; the peer is denied).
public struct WebhookAnswerError: Error, Sendable, Equatable, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}
