import COpenSSL

/// Incremental SHA-256 (FIPS 180-4) through OpenSSL's EVP interface. Not `Sendable`: one hasher
/// belongs to one upload.
final class SHA256 {
    private let context: OpaquePointer?

    init() {
        context = EVP_MD_CTX_new()
        if let context { EVP_DigestInit_ex(context, EVP_sha256(), nil) }
    }

    deinit { EVP_MD_CTX_free(context) }

    func update(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { _ = EVP_DigestUpdate(context, $0.baseAddress, $0.count) }
    }

    /// The digest as 64 lowercase hex digits; nil if OpenSSL could not allocate or failed.
    func finalHex() -> String? {
        guard let context else { return nil }
        var digest = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        guard EVP_DigestFinal_ex(context, &digest, &length) == 1, length == 32 else { return nil }
        let hex = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(64)
        for b in digest {
            out.append(hex[Int(b >> 4)])
            out.append(hex[Int(b & 15)])
        }
        return String(decoding: out, as: UTF8.self)
    }
}
