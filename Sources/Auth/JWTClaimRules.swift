import DQL
import Values

/// The registered claims a verified token must satisfy (RFC 7519 §4.1), and BigPeer's permission
/// claims turned into a `Principal`.
///
/// `exp` is required; `nbf` and `iat` (not in the future) are checked when present; `iss` must
/// equal `issuer` and `aud` (a string or an array) must contain `audience` when those are set.
/// Clock skew of up to `leewaySeconds` is tolerated on every time claim.
public struct JWTClaimRules: Sendable {
    public var issuer: String?
    public var audience: String?
    public var leewaySeconds: Int64 = 60
    /// Wall clock in seconds since the epoch (injectable for tests).
    public var now: @Sendable () -> Int64

    public init(issuer: String? = nil, audience: String? = nil, leewaySeconds: Int64 = 60,
                now: @escaping @Sendable () -> Int64 = JWTVerifier.wallClockSeconds) {
        self.issuer = issuer
        self.audience = audience
        self.leewaySeconds = leewaySeconds
        self.now = now
    }

    /// The principal the claims describe and the first second at which they are refused as
    /// expired (`exp + leeway + 1`), or why they are refused now.
    public func check(_ claims: [String: Value]) -> Result<(principal: Principal, refusedFrom: Int64), JWTError> {
        let t = now()
        guard let exp = Self.numericDate(claims["exp"]) else { return .failure(.malformed("exp (expiry, seconds since the epoch) is required")) }
        // `t - leeway`, not `exp + leeway`: exp is the token's and may be Int64.max.
        if t - leewaySeconds > exp { return .failure(.expired) }
        if let nbfValue = claims["nbf"] {
            guard let nbf = Self.numericDate(nbfValue) else { return .failure(.malformed("nbf must be a number")) }
            if t + leewaySeconds < nbf { return .failure(.notYetValid) }
        }
        if let iatValue = claims["iat"] {
            guard let iat = Self.numericDate(iatValue) else { return .failure(.malformed("iat must be a number")) }
            if t + leewaySeconds < iat { return .failure(.notYetValid) }
        }
        if let issuer, claims["iss"] != .string(issuer) { return .failure(.wrongIssuer) }
        if let audience {
            switch claims["aud"] {
            case .string(let a)? where a == audience: break
            case .array(let list)? where list.contains(.string(audience)): break
            default: return .failure(.wrongAudience)
            }
        }
        let read: CollectionScope, write: CollectionScope
        var readRules = DocumentRules.none, writeRules = DocumentRules.none
        if let permissions = claims["permissions"] {
            // Ditto's shape with per-document rules (PermissionClaims); never mixed with read/write.
            guard claims["read"] == nil, claims["write"] == nil else {
                return .failure(.malformed("permissions excludes the read and write claims"))
            }
            switch PermissionClaims.parse(permissions, claims: claims) {
            case .success(let granted):
                (read, write, readRules, writeRules) = (granted.read, granted.write, granted.readRules, granted.writeRules)
            case .failure(let why): return .failure(.malformed(why.description))
            }
        } else {
            switch (Self.scope(claims["read"]), Self.scope(claims["write"])) {
            case (.some(let r), .some(let w)): (read, write) = (r, w)
            default: return .failure(.malformed(#"read and write must be "*" or an array of collection names (not empty strings)"#))
            }
        }
        // The attachment scope (docs/AUTH.md, "Attachments"), beside either form of the others.
        let readsAnyAttachment: Bool
        switch claims["attachments"] {
        case nil: readsAnyAttachment = false
        case .string("read")?: readsAnyAttachment = true
        default: return .failure(.malformed(#"attachments must be "read" (or absent)"#))
        }
        var subject: String?
        if case .string(let sub)? = claims["sub"] { subject = sub }
        let (end, overflow) = exp.addingReportingOverflow(leewaySeconds + 1)
        return .success((Principal(keyID: subject.map { "jwt:" + $0 } ?? "jwt", read: read, write: write, claims: claims, readRules: readRules,
                                   writeRules: writeRules, readsAnyAttachment: readsAnyAttachment),
                          overflow ? Int64.max : end))
    }

    /// NumericDate (RFC 7519 §2): seconds, possibly fractional; nil for anything else.
    static func numericDate(_ v: Value?) -> Int64? {
        switch v {
        case .int(let i)?: i
        case .double(let d)? where d.isFinite && abs(d) < 1e15: Int64(d)
        default: nil
        }
    }

    /// `"*"` → all, array of strings → only those, absent → none; nil for anything else.
    static func scope(_ v: Value?) -> CollectionScope? {
        switch v {
        case nil: return CollectionScope.none
        case .string("*")?: return CollectionScope.all
        case .array(let items)?:
            var names = Set<String>()
            for item in items {
                // A name two spellings could match is refused, not guessed at (Values/ExactText.swift).
                guard case .string(let name) = item, !name.isEmpty, NameRules.problem(name) == nil else { return nil }
                names.insert(name)
            }
            return .only(names)
        default: return nil
        }
    }
}
