/// The few DER (X.690) encodings JOSE verification needs: a SubjectPublicKeyInfo for the RSA and
/// P-256 keys a JWK describes (so OpenSSL's `d2i_PUBKEY` checks them), and an ECDSA-Sig-Value for
/// a JOSE `r || s` signature (RFC 7518 §3.4).
enum DER {
    static func length(_ count: Int) -> [UInt8] {
        guard count >= 0x80 else { return [UInt8(count)] }
        var bytes: [UInt8] = []
        var rest = count
        while rest > 0 {
            bytes.insert(UInt8(rest & 0xFF), at: 0)
            rest >>= 8
        }
        return [0x80 | UInt8(bytes.count)] + bytes
    }

    static func element(_ tag: UInt8, _ content: [UInt8]) -> [UInt8] { [tag] + length(content.count) + content }

    static func sequence(_ items: [UInt8]...) -> [UInt8] { element(0x30, items.flatMap { $0 }) }

    /// A non-negative INTEGER from its big-endian magnitude: leading zeros dropped, one zero
    /// prepended when the top bit is set (DER integers are two's complement).
    static func unsignedInteger(_ magnitude: some Collection<UInt8>) -> [UInt8] {
        var bytes = Array(magnitude.drop { $0 == 0 })
        if bytes.isEmpty { bytes = [0] } else if bytes[0] & 0x80 != 0 { bytes.insert(0, at: 0) }
        return element(0x02, bytes)
    }

    /// A BIT STRING of whole bytes (no unused bits).
    static func bitString(_ bytes: [UInt8]) -> [UInt8] { element(0x03, [0] + bytes) }

    /// rsaEncryption (1.2.840.113549.1.1.1) with its NULL parameters.
    static let rsaEncryption: [UInt8] = [0x30, 0x0D, 0x06, 0x09, 0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x01, 0x01, 0x05, 0x00]
    /// id-ecPublicKey (1.2.840.10045.2.1) on prime256v1 (1.2.840.10045.3.1.7).
    static let ecP256: [UInt8] = [0x30, 0x13, 0x06, 0x07, 0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x02, 0x01,
                                  0x06, 0x08, 0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x03, 0x01, 0x07]

    static func rsaPublicKeyInfo(modulus: [UInt8], exponent: [UInt8]) -> [UInt8] {
        sequence(rsaEncryption, bitString(sequence(unsignedInteger(modulus), unsignedInteger(exponent))))
    }

    static func p256PublicKeyInfo(x: [UInt8], y: [UInt8]) -> [UInt8] {
        sequence(ecP256, bitString([0x04] + x + y))
    }

    /// JOSE's fixed-width `r || s` as the DER ECDSA-Sig-Value OpenSSL verifies.
    static func ecdsaSignature(raw: [UInt8]) -> [UInt8] {
        let half = raw.count / 2
        return sequence(unsignedInteger(raw[..<half]), unsignedInteger(raw[half...]))
    }
}
