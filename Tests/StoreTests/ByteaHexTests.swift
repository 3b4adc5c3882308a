import Postgres
import Testing
import TestRandomness
@testable import Store

/// The sync paths' own decoder of PostgreSQL's hex `bytea` text (`\x0a1b…`).
@Suite struct ByteaHexTests {
    static func decode(_ text: String) -> [UInt8]? {
        Array(text.utf8).withUnsafeBytes { ByteaHex.decode($0) }
    }

    /// Every length up to 300 and random contents decode to what the reference encoder wrote,
    /// in lower and upper case.
    @Test func decodesWhatTheEncoderWrites() {
        var rng = SeededRandom(seed: 0xB17EA)
        for n in 0..<300 {
            let bytes = (0..<n).map { _ in UInt8.random(in: 0...255, using: &rng) }
            let text = PostgresBytea(bytes).postgresText
            #expect(Self.decode(text) == bytes)
            #expect(Self.decode("\\x" + text.dropFirst(2).uppercased()) == bytes)
        }
        #expect(Self.decode("\\x") == [])
        #expect(Self.decode("\\x00ff7F") == [0x00, 0xFF, 0x7F])
    }

    /// Malformed text is refused, never decoded to something else: every non-digit byte in every
    /// position, odd lengths, a missing or wrong prefix.
    @Test func refusesMalformedText() {
        for c in 0...255 where !(48...57).contains(c) && !(97...102).contains(c) && !(65...70).contains(c) {
            for position in 2..<6 {
                var text = Array("\\xab12".utf8)
                text[position] = UInt8(c)
                #expect(text.withUnsafeBytes { ByteaHex.decode($0) } == nil, "byte \(c) at \(position)")
            }
        }
        for bad in ["", "\\", "\\x0", "\\xabc", "x0ab1", "\\y00", "0x00", "\\\\00"] {
            #expect(Self.decode(bad) == nil, "\(bad)")
        }
    }
}
