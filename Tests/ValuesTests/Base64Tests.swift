import Testing
import Values

@Suite struct Base64Tests {
    /// RFC 4648 §10 test vectors.
    static let vectors: [(String, String)] = [("", ""), ("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"), ("foob", "Zm9vYg=="),
                                              ("fooba", "Zm9vYmE="), ("foobar", "Zm9vYmFy")]

    @Test func rfc4648Vectors_bothVariants() {
        for (plain, encoded) in Self.vectors {
            #expect(Base64.encode(Array(plain.utf8)) == encoded)
            #expect(Base64.decode(encoded.utf8) == Array(plain.utf8))
            let url = String(encoded.filter { $0 != "=" })
            #expect(Base64.encode(Array(plain.utf8), .url) == url)
            #expect(Base64.decode(url.utf8, .url) == Array(plain.utf8))
        }
        #expect(Base64.encode([0xFB, 0xFF], .standard) == "+/8=")
        #expect(Base64.encode([0xFB, 0xFF], .url) == "-_8")
    }

    @Test func randomRoundTrips() {
        var rng = SystemRandomNumberGenerator()
        for n in 0..<200 {
            let bytes = (0..<(n % 70)).map { _ in UInt8.random(in: 0...255, using: &rng) }
            #expect(Base64.decode(Base64.encode(bytes).utf8) == bytes)
            #expect(Base64.decode(Base64.encode(bytes, .url).utf8, .url) == bytes)
        }
    }

    @Test func strictDecoding_refusesEverythingButTheOneCanonicalText() {
        for bad in ["Zg", "Zg=", "Zh==", "Z===", "Zm9v\n", " Zm9v", "Zm=v", "Zm9-", "Zm9_", "=Zm9", "Zg==Zg=="] {
            #expect(Base64.decode(bad.utf8) == nil, "\(bad)")
        }
        for bad in ["Zg==", "Zh", "Z", "Zm9+", "Zm9/", "Zm 9"] {
            #expect(Base64.decode(bad.utf8, .url) == nil, "\(bad)")
        }
    }
}
