import Testing
import Values
@testable import CRDT

/// The canonical encodings must not move when the in-memory representation changes. The pinned
/// values were produced by the representation before the compact one (commit 52c58c2) running
/// GoldenScenario.swift unchanged.
@Suite struct GoldenEncodingTests {
    static func hex(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef")
        return String(bytes.flatMap { [digits[Int($0 >> 4)], digits[Int($0 & 15)]] })
    }

    @Test func sampleStateAndDeltaBytesArePinned() throws {
        let (state, delta) = try GoldenScenario.sample()
        #expect(Self.hex(state) == "87010061738119abcd8182001b018bcfe56800000480a2018300040004a56163a102828500"
            + "0300f90000808184000300f940006166a1008700020001616203a0616da2018300040004a1616ba103860001000"
            + "01b018bcfe5680000001b018bcfe568000000616ea1008500040000f93e006174a10085000000006179")
        #expect(Self.hex(delta) == "8601018119abcd8183001b018bcfe5680000040180a104a16174a10085000000006179")
        #expect(try Document.decode(state).encode() == state)
    }

    /// 200 seeded 3-replica scenarios (every operation kind, a year-fast clock, reaping and reset
    /// deltas): FNV-1a over every state and delta encoded along the way, 2.6 MB in all.
    @Test func everyEncodingOfTwoHundredScenariosIsPinned() throws {
        let d = try GoldenScenario.digest(seeds: 0..<200)
        #expect(d.bytes == 2_621_166)
        #expect(String(d.hash, radix: 16) == "b8b490ccb56a8693")
    }
}
