import COpenSSL

/// The text form of an API key and the hash stored for it.
///
///     bpk_0123456789abcdef_<64 lowercase hex digits>
///     └┬┘ └──────┬───────┘ └──────────┬───────────┘
///   prefix   id (8 random bytes)   secret (32 random bytes from RAND_bytes)
///
/// The prefix makes leaked keys easy to spot (secret scanners, logs). The id is the primary key
/// of `api_keys`, so a lookup is one index probe; the stored `key_sha256` is SHA-256 of the whole
/// key text, compared with `CRYPTO_memcmp` so the comparison time does not depend on where the
/// first differing byte is. 256 bits of secret make brute force pointless, so a fast hash (rather
/// than a password hash) is the right tool: it costs ~1 µs per request.
public struct APIKeyToken: Sendable, Hashable {
    public static let prefix = "bpk_"
    static let idHexDigits = 16
    static let secretHexDigits = 64
    /// Length of the whole key text.
    public static let length = prefix.utf8.count + idHexDigits + 1 + secretHexDigits

    public let id: String
    /// The whole key text (`bpk_<id>_<secret>`).
    public let text: String

    /// A fresh key from OpenSSL's CSPRNG.
    public static func generate() throws(AuthError) -> APIKeyToken {
        let id = try randomBytes(idHexDigits / 2), secret = try randomBytes(secretHexDigits / 2)
        let idHex = hex(id)
        return APIKeyToken(id: idHex, text: prefix + idHex + "_" + hex(secret))
    }

    /// Parses a presented key; nil unless it has exactly the shape above.
    public init?(parsing text: some StringProtocol) {
        let u = Array(text.utf8)
        let p = Array(Self.prefix.utf8)
        guard u.count == Self.length, u.starts(with: p), u[p.count + Self.idHexDigits] == UInt8(ascii: "_") else { return nil }
        let idRange = p.count..<(p.count + Self.idHexDigits)
        let secretRange = (p.count + Self.idHexDigits + 1)..<u.count
        guard u[idRange].allSatisfy(Self.isLowerHex), u[secretRange].allSatisfy(Self.isLowerHex) else { return nil }
        self.id = String(decoding: u[idRange], as: UTF8.self)
        self.text = String(text)
    }

    private init(id: String, text: String) {
        self.id = id
        self.text = text
    }

    /// SHA-256 of the key text: what `api_keys.key_sha256` holds.
    public var sha256: [UInt8] { Self.sha256(Array(text.utf8)) }

    /// True when `hash` is this key's hash; constant time in the hash contents.
    public func matches(sha256 stored: [UInt8]) -> Bool {
        let mine = sha256
        guard stored.count == mine.count else { return false }
        return mine.withUnsafeBytes { a in stored.withUnsafeBytes { b in CRYPTO_memcmp(a.baseAddress, b.baseAddress, a.count) == 0 } }
    }

    /// True when `other` is exactly this key's text; the time taken does not depend on where
    /// the texts differ (only on their lengths, which are public: every key has the same length).
    func equalsInConstantTime(_ other: [UInt8]) -> Bool {
        var mine = text
        return mine.withUTF8 { a in
            a.count == other.count && other.withUnsafeBytes { b in CRYPTO_memcmp(a.baseAddress, b.baseAddress, a.count) == 0 }
        }
    }

    static func sha256(_ bytes: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: Int(SHA256_DIGEST_LENGTH))
        bytes.withUnsafeBufferPointer { input in
            out.withUnsafeMutableBufferPointer { o in _ = SHA256(input.baseAddress, input.count, o.baseAddress) }
        }
        return out
    }

    static func randomBytes(_ n: Int) throws(AuthError) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: n)
        let ok = out.withUnsafeMutableBufferPointer { RAND_bytes($0.baseAddress, Int32(n)) }
        guard ok == 1 else { throw .randomUnavailable }
        return out
    }

    static func hex(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count * 2)
        for b in bytes { out.append(digits[Int(b >> 4)]); out.append(digits[Int(b & 15)]) }
        return String(decoding: out, as: UTF8.self)
    }

    static func isLowerHex(_ c: UInt8) -> Bool {
        (c >= UInt8(ascii: "0") && c <= UInt8(ascii: "9")) || (c >= UInt8(ascii: "a") && c <= UInt8(ascii: "f"))
    }
}
