import Auth
import HTTP
import Logging
import Store
import Synchronization
import SyncProtocol
import Values

/// Which authentication and authorization decisions go to the audit log (`--audit-log`).
public enum AuditLogMode: String, Sendable, CaseIterable {
    /// None.
    case off
    /// Every refusal: 401, 403, 429 on REST (a run of 429s to one client as its 1st, 2nd, 4th, 8th…
    /// line), every refused sync handshake.
    case denials
    /// Refusals, and every allowed REST request and sync handshake (one line each: costs about as
    /// much as the access log).
    case all
}

/// The audit log: one structured line per decision, under its own label (`bigpeer.audit`) so that
/// operators can route it apart from the rest (docs/AUTH.md, "Abuse limits"). Lines name who (an
/// API key id or `jwt:<sub>`, never a key or a token), from where (the client's address), what
/// (the route, or `sync handshake` and the link kind), the outcome, and why (the status and the
/// reason the client was given). `verified` says whether the identity was checked: a refused
/// credential is logged as the identity it claimed.
struct AuthAudit: Sendable {
    static let label = "bigpeer.audit"
    let logger: Logger
    let mode: AuditLogMode

    var logsDenials: Bool { mode != .off }
    var logsAllowed: Bool { mode == .all }

    func denied(who: String?, verified: Bool, address: String, what: String, why: String, _ extra: Logger.Metadata = [:]) {
        guard logsDenials else { return }
        var metadata = Self.metadata(who: who, address: address, what: what, extra)
        metadata["decision"] = "denied"
        metadata["verified"] = "\(verified)"
        metadata["why"] = "\(Self.printable(why))"
        logger.notice("auth decision", metadata: metadata)
    }

    func allowed(who: String?, address: String, what: String, _ extra: Logger.Metadata = [:]) {
        guard logsAllowed else { return }
        var metadata = Self.metadata(who: who, address: address, what: what, extra)
        metadata["decision"] = "allowed"
        logger.info("auth decision", metadata: metadata)
    }

    /// The fields that name a write-rule refusal (docs/AUTH.md, "Audit log"): the collection, the
    /// operation, how many documents were refused, the first few ids (JSON text, each cut at
    /// `maxIDBytes`) and the rules they did not match (cut at `maxRulesBytes`). However large the
    /// write, the line stays bounded.
    static func metadata(_ refusal: WriteRuleRefusal) -> Logger.Metadata {
        let ids = refusal.documentIDs.prefix(WriteRuleRefusal.maxNamedDocuments).map { printable(String(JSON.string($0).prefix(maxIDBytes))) }
        return [
            "collection": "\(printable(String(refusal.collection.prefix(maxIDBytes))))",
            "operation": "\(refusal.operation)",
            "refused": "\(refusal.refused)",
            "documents": "\(ids.joined(separator: ","))",
            "rule": "\(printable(String(refusal.rules.joined(separator: " OR ").prefix(maxRulesBytes))))",
        ]
    }

    static let maxIDBytes = 64
    static let maxRulesBytes = 256

    private static func metadata(who: String?, address: String, what: String, _ extra: Logger.Metadata) -> Logger.Metadata {
        var m = extra
        m["who"] = "\(who ?? "-")"
        m["address"] = "\(address)"
        m["what"] = "\(what)"
        return m
    }

    /// `text` with every control character written as `\u{XX}`: an audit line stays one line
    /// whatever a client put in a token or a collection name.
    static func printable(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else { return text }
        return text.unicodeScalars.map { $0.properties.generalCategory == .control ? "\\u{\(String($0.value, radix: 16))}" : String($0) }.joined()
    }

    /// Whether the `n`th refusal in a row is logged: 1, 2, 4, 8, … (a flood of 429s costs a few
    /// lines, and the count in the last one says how large it was).
    static func logsRefusal(inARow n: UInt32) -> Bool { n & (n &- 1) == 0 }
}

/// What a REST route learned of its refusal that its response does not carry: the documents and
/// rules of a write-rule refusal (`StoreError.forbidden`). `AbuseGuard` sets one for each request
/// while it audits denials; `APIError` records into it where the store's error becomes the 403, and
/// the guard's audit line of the 403 names what it holds. Without a guard (nothing audited) there
/// is none, and recording costs a task-local read.
final class RefusalNote: Sendable {
    @TaskLocal static var current: RefusalNote?
    private let writeRule = Mutex<WriteRuleRefusal?>(nil)

    func record(_ refusal: WriteRuleRefusal) { writeRule.withLock { $0 = refusal } }
    var writeRuleRefusal: WriteRuleRefusal? { writeRule.withLock { $0 } }
}

/// The identity a credential claims, before (or without) verifying it: an API key's id, a JWT's
/// `jwt:<sub>` (the name sync sessions and the per-credential limit use). Never the secret part.
enum ClaimedIdentity {
    /// From a request's `Authorization` header (`Bearer <key or JWT>`); nil without one.
    static func of(authorization: String?) -> String? {
        guard let authorization, let token = Authenticator.bearerToken(authorization) else { return nil }
        return of(token: token)
    }

    /// From a request's `Authorization` header, with its `X-Auth-Provider` (a webhook provider's token).
    static func of(_ request: HTTPRequest) -> String? {
        of(authorization: request.headers["Authorization"], provider: request.headers["X-Auth-Provider"])
    }

    /// From the two headers' values.
    static func of(authorization: String?, provider: String?) -> String? {
        guard let provider else { return of(authorization: authorization) }
        guard let authorization, let token = Authenticator.bearerToken(authorization) else { return nil }
        return of(provider: provider, token: token)
    }

    static func of(_ credentials: SyncCredentials?) -> String? {
        switch credentials {
        case .apiKey(let key)?: of(token: Substring(key))
        case .jwt(let token)?: of(token: Substring(token))
        case .provider(let provider, let token)?: of(provider: provider, token: Substring(token))
        case nil: nil
        }
    }

    /// A webhook provider's token is opaque until the webhook answers: it is named by its
    /// provider and the first 8 bytes of its SHA-256 (`webhook:corp:#3f2a…`), so the same token
    /// shares one bucket on REST and sync, and the log never holds the token.
    static func of(provider: String, token: Substring) -> String {
        let digest = AuthWebhook.digest(provider: provider, token: token).prefix(8)
        let hex = digest.map { String($0, radix: 16) }.map { $0.count == 1 ? "0" + $0 : $0 }.joined()
        return "webhook:" + AuthAudit.printable(String(provider.prefix(64))) + ":#" + hex
    }

    static func of(token: Substring) -> String? {
        if let id = apiKeyID(token) { return id }
        let parts = token.utf8.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 3, parts[1].count <= 8192, let payload = Base64.decode(parts[1], .url),
              case .object(let claims)? = try? JSON.parse(payload), case .string(let subject)? = claims["sub"] else { return nil }
        // A bound on what one forged token can put in a bucket table or a log line, and no control
        // character that could forge a line of its own.
        return "jwt:" + AuthAudit.printable(String(subject.prefix(256)))
    }

    /// The id of a token shaped like an API key (`bpk_` + 16 lowercase hex digits + `_` + 64
    /// more): its place only, the secret unread (every request of a rate-limited server pays this).
    static func apiKeyID(_ token: Substring) -> String? {
        let u = token.utf8
        guard u.count == APIKeyToken.length, u.starts(with: APIKeyToken.prefix.utf8) else { return nil }
        let start = u.index(u.startIndex, offsetBy: APIKeyToken.prefix.utf8.count), end = u.index(start, offsetBy: 16)
        guard u[start..<end].allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) }) else { return nil }
        return String(Substring(u[start..<end]))
    }
}
