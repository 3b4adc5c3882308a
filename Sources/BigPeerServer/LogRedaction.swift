import Auth

/// Removes secrets from text about to be logged: the last line of defence behind call sites that
/// already log only what they mean to (`PostgresConfiguration.description`, `displayURL`). Every
/// line `BufferedStderrLogHandler` writes (message and metadata) passes through it; lines without
/// any marker (most) are returned as they are after one scan.
///
/// - API keys `bpk_<id>_<secret>` keep their id (it names the key in `keys list`): `bpk_<id>_***`.
/// - `Bearer <token>` becomes `Bearer ***`; a JWT anywhere (`eyJ…` with two dots) becomes `eyJ***`.
/// - URL user info keeps the user: `postgres://user:***@host`; `password=…` becomes `password=***`.
public enum LogRedaction {
    /// Metadata printed whole on purpose: the private cluster's read-only analyst URL, with its
    /// password, is how an operator's BI tools reach the data (docs/STORAGE.md, "Analytics").
    public static let printedOnPurpose: Set<String> = ["analyst-url"]

    public static func redact(_ text: String) -> String {
        let bytes = Array(text.utf8)
        guard mayHoldSecret(bytes) else { return text }
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var i = 0
        while i < bytes.count {
            if let end = matchKey(bytes, at: i, into: &out) ?? matchAfter("Bearer ", bytes, at: i, into: &out)
                ?? matchAfter("password=", bytes, at: i, into: &out) ?? matchJWT(bytes, at: i, into: &out)
                ?? matchUserInfo(bytes, at: i, into: &out) {
                i = end
            } else {
                out.append(bytes[i])
                i += 1
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    private static let markers: [[UInt8]] = ["bpk_", "Bearer ", "password=", "eyJ", "://"].map { Array($0.utf8) }

    private static func mayHoldSecret(_ bytes: [UInt8]) -> Bool {
        markers.contains { m in bytes.indices.contains { has(m, bytes, at: $0) } }
    }

    private static func has(_ literal: [UInt8], _ bytes: [UInt8], at i: Int) -> Bool {
        i + literal.count <= bytes.count && bytes[i..<(i + literal.count)].elementsEqual(literal)
    }

    private static func isTokenByte(_ b: UInt8) -> Bool {
        (0x30...0x39).contains(b) || (0x41...0x5A).contains(b) || (0x61...0x7A).contains(b) || b == 0x2D || b == 0x5F || b == 0x2E
            || b == 0x2B || b == 0x2F || b == 0x3D || b == 0x7E
    }

    /// `bpk_<id>_<secret>` → `bpk_<id>_***`.
    private static func matchKey(_ b: [UInt8], at i: Int, into out: inout [UInt8]) -> Int? {
        let prefix = Array(APIKeyToken.prefix.utf8)
        guard has(prefix, b, at: i) else { return nil }
        var j = i + prefix.count
        while j < b.count, b[j] != 0x5F, isTokenByte(b[j]) { j += 1 }
        guard j < b.count, b[j] == 0x5F else { return nil }
        out.append(contentsOf: b[i...j])
        out.append(contentsOf: "***".utf8)
        j += 1
        while j < b.count, isTokenByte(b[j]) { j += 1 }
        return j
    }

    /// `<literal><secret>` → `<literal>***` (the secret ends at a space, quote, `&`, `,` or `;`).
    private static func matchAfter(_ literal: String, _ b: [UInt8], at i: Int, into out: inout [UInt8]) -> Int? {
        let l = Array(literal.utf8)
        guard has(l, b, at: i), i + l.count < b.count else { return nil }
        out.append(contentsOf: l)
        out.append(contentsOf: "***".utf8)
        var j = i + l.count
        while j < b.count, ![0x20, 0x22, 0x27, 0x26, 0x2C, 0x3B, 0x0A].contains(b[j]) { j += 1 }
        return j
    }

    /// A JWS compact token: `eyJ` + base64url, `.`, base64url, `.`, base64url.
    private static func matchJWT(_ b: [UInt8], at i: Int, into out: inout [UInt8]) -> Int? {
        guard has(Array("eyJ".utf8), b, at: i), i == 0 || !isTokenByte(b[i - 1]) || b[i - 1] == 0x3D else { return nil }
        var j = i
        var dots = 0
        while j < b.count, isTokenByte(b[j]) { if b[j] == 0x2E { dots += 1 }; j += 1 }
        guard dots == 2 else { return nil }
        out.append(contentsOf: "eyJ***".utf8)
        return j
    }

    /// `scheme://user:password@` → `scheme://user:***@`.
    private static func matchUserInfo(_ b: [UInt8], at i: Int, into out: inout [UInt8]) -> Int? {
        guard has(Array("://".utf8), b, at: i) else { return nil }
        var j = i + 3
        var colon: Int?
        while j < b.count, ![0x2F, 0x40, 0x20, 0x22].contains(b[j]) {
            if b[j] == 0x3A && colon == nil { colon = j }
            j += 1
        }
        guard let colon, j < b.count, b[j] == 0x40 else { return nil }
        out.append(contentsOf: b[i...colon])
        out.append(contentsOf: "***".utf8)
        return j
    }
}
