// The cryptography of the opening handshake (RFC 6455 §4.1, §4.2.2): SHA-1 and base64 for
// `Sec-WebSocket-Accept`, RAND_bytes for client nonces and masking keys. SHA-1 here is not a
// security boundary (§10.7 only needs it to prove the server read the key), but it must be exact.
import COpenSSL
import Values

enum HandshakeCrypto {
    /// The GUID every server appends to the key (§1.3, §4.2.2 item 5.4).
    static let acceptGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

    /// `base64(SHA-1(key + GUID))` (§4.2.2 item 5.4).
    static func acceptValue(forKey key: String) -> String {
        var input = Array(key.utf8)
        input.append(contentsOf: acceptGUID.utf8)
        return base64Encode(sha1(input))
    }

    /// SHA-1 through OpenSSL's EVP interface (the low-level `SHA1()` is deprecated in 3.0).
    static func sha1(_ bytes: [UInt8]) -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length: UInt32 = 0
        let ok = bytes.withUnsafeBytes { input in
            digest.withUnsafeMutableBufferPointer { out in
                EVP_Digest(input.baseAddress, input.count, out.baseAddress, &length, EVP_sha1(), nil)
            }
        }
        // EVP_Digest with a built-in digest only fails on allocation failure; SHA-1 is 20 bytes.
        precondition(ok == 1 && length == 20, "EVP_Digest(SHA-1) failed")
        return Array(digest[0..<20])
    }

    /// Cryptographically strong random bytes (§4.1: the nonce; §5.3: masking keys).
    static func randomBytes(_ count: Int) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        let ok = bytes.withUnsafeMutableBufferPointer { RAND_bytes($0.baseAddress, Int32(count)) }
        // RAND_bytes fails only when the CSPRNG cannot be seeded: continuing would send
        // predictable masks (§10.3), so stopping is the only safe answer.
        precondition(ok == 1, "RAND_bytes failed: no entropy")
        return bytes
    }

    /// Standard base64 with padding (RFC 4648 §4).
    static func base64Encode(_ bytes: [UInt8]) -> String { Base64.encode(bytes, .standard) }

    /// Strict base64 decoding (RFC 4648 §4): padding required, no whitespace, canonical trailing
    /// bits. Returns nil for anything else, so `Sec-WebSocket-Key` checks are exact.
    static func base64Decode(_ text: String) -> [UInt8]? { Base64.decode(text.utf8, .standard) }
}

/// Where masking keys come from (§5.3: "derived from a strong source of entropy").
/// The secure source draws 256 bytes from RAND_bytes at a time; the seeded one exists so tests
/// can predict wire bytes.
public struct WebSocketMaskKeySource: Sendable {
    private var pool: [UInt8] = []
    private var index = 0
    private var seed: UInt64?

    /// Keys from OpenSSL's CSPRNG.
    public static var secureRandom: Self { Self() }

    /// Deterministic keys (SplitMix64); for tests only, never on a real connection.
    public static func seeded(_ seed: UInt64) -> Self {
        var s = Self()
        s.seed = seed
        return s
    }

    public mutating func next() -> WebSocketMaskKey {
        if var s = seed {
            s &+= 0x9E37_79B9_7F4A_7C15
            var z = s
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            z ^= z >> 31
            seed = s
            return WebSocketMaskKey(UInt8(z & 0xFF), UInt8(z >> 8 & 0xFF), UInt8(z >> 16 & 0xFF), UInt8(z >> 24 & 0xFF))
        }
        if index + 4 > pool.count {
            pool = HandshakeCrypto.randomBytes(256)
            index = 0
        }
        defer { index += 4 }
        return WebSocketMaskKey(pool[index], pool[index + 1], pool[index + 2], pool[index + 3])
    }
}
