// Incremental UTF-8 validation (RFC 3629 §4, required for text by RFC 6455 §8.1).
//
// Text messages arrive in pieces (frames, TCP reads, inflated chunks) that may split a code
// point anywhere. The validator keeps how many continuation bytes are still owed and the legal
// range of the next one, so it rejects an invalid byte the moment it arrives ("fail fast":
// Autobahn 6.4.*), not when the message ends. The per-lead-byte ranges exclude overlong forms
// (E0 80..9F, F0 80..8F), surrogates (ED A0..BF) and code points above U+10FFFF (F4 90..).

/// Validates UTF-8 across arbitrary chunk boundaries.
public struct UTF8Validator: Sendable, Hashable {
    private var owed: UInt8 = 0
    private var lower: UInt8 = 0x80
    private var upper: UInt8 = 0xBF

    public init() {}

    /// True when no code point is left half-finished: a message may end here.
    public var isAtBoundary: Bool { owed == 0 }

    /// Feeds bytes; returns false at the first byte that cannot continue valid UTF-8.
    public mutating func feed(_ bytes: UnsafeRawBufferPointer) -> Bool {
        guard let base = bytes.baseAddress else { return true }
        let count = bytes.count
        var i = 0
        while i < count {
            if owed == 0 {
                // ASCII fast path, eight bytes per step.
                while i + 8 <= count,
                      base.loadUnaligned(fromByteOffset: i, as: UInt64.self) & 0x8080_8080_8080_8080 == 0 {
                    i += 8
                }
                if i >= count { break }
                let b = base.load(fromByteOffset: i, as: UInt8.self)
                i += 1
                if b < 0x80 { continue }
                switch b {
                case 0xC2...0xDF: owed = 1; lower = 0x80; upper = 0xBF
                case 0xE0: owed = 2; lower = 0xA0; upper = 0xBF
                case 0xE1...0xEC, 0xEE, 0xEF: owed = 2; lower = 0x80; upper = 0xBF
                case 0xED: owed = 2; lower = 0x80; upper = 0x9F
                case 0xF0: owed = 3; lower = 0x90; upper = 0xBF
                case 0xF1...0xF3: owed = 3; lower = 0x80; upper = 0xBF
                case 0xF4: owed = 3; lower = 0x80; upper = 0x8F
                default: return false // 80..C1 (stray continuation, overlong 2-byte), F5..FF
                }
            } else {
                let b = base.load(fromByteOffset: i, as: UInt8.self)
                i += 1
                guard b >= lower && b <= upper else { return false }
                owed -= 1
                lower = 0x80
                upper = 0xBF
            }
        }
        return true
    }

    public mutating func feed(_ bytes: [UInt8]) -> Bool { bytes.withUnsafeBytes { feed($0) } }

    /// Whether `bytes` is complete, valid UTF-8 on its own.
    public static func isValid(_ bytes: UnsafeRawBufferPointer) -> Bool {
        var v = UTF8Validator()
        return v.feed(bytes) && v.isAtBoundary
    }
}
