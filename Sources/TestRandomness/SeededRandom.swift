// TestRandomness: the one seeded random number generator every test target uses, so property
// tests and fuzz-style tests are reproducible from their seed. Not linked into the product.

/// SplitMix64 (Steele, Lea, Flood 2014): tiny, fast, and good enough for test data.
public struct SeededRandom: RandomNumberGenerator, Sendable {
    public var state: UInt64

    public init(seed: UInt64) { state = seed }

    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// A number in `0..<n` (n > 0).
    public mutating func below(_ n: Int) -> Int { Int(next() % UInt64(n)) }

    /// True with the given probability in percent.
    public mutating func chance(_ percent: Int) -> Bool { below(100) < percent }

    /// Random piece sizes of 1...`maxPiece` bytes that add up to exactly `total`: one seeded way
    /// to cut a byte stream for the split-point tests of an incremental parser.
    public mutating func pieceSizes(total: Int, maxPiece: Int) -> [Int] {
        var sizes: [Int] = []
        var left = total
        while left > 0 {
            let n = Int.random(in: 1...max(1, min(left, maxPiece)), using: &self)
            sizes.append(n)
            left -= n
        }
        return sizes
    }
}
