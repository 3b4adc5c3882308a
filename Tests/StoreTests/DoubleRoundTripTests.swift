import DQL
import Testing
import Values
@testable import Store

/// A double stays a double through PostgreSQL's jsonb, which keeps a number's digits but not how
/// they were written: `1e+16` comes back as `10000000000000000`, an integer to our parser, while
/// `10000000000000000.0` comes back as it went (docs/STORAGE.md, "Values").
@Suite struct DoubleRoundTripTests {
    static let doubles: [Double] = [1e16, -5e17, 9.2e18, 2.5e16, 1e19, 1e300, 1e-7, 0.1, 2.0, -0.0, 123456789012345680000.0]

    @Test func doublesReadBackAsDoubles_inValuesAndIds() async throws {
        try await withStore { store, _ in
            var values: [String: Value] = [:]
            for (i, d) in Self.doubles.enumerated() { values["n\(i)"] = .double(d) }
            let id: Value = ["k": .double(1e16), "s": "x"]
            var doc = values
            doc["_id"] = id
            _ = try await store.execute("INSERT INTO c DOCUMENTS (:d)", arguments: ["d": .object(doc)])
            let items = try await store.execute("SELECT * FROM c").items
            #expect(items.count == 1)
            for (i, d) in Self.doubles.enumerated() {
                #expect(items.first?["n\(i)"] == .double(d), "\(d) read back as \(String(describing: items.first?["n\(i)"]))")
            }
            #expect(items.first?["_id"] == id)
            // What sync's `want` and `sendState` read: the id as the peer wrote it, so the answer
            // names the same document (not a state for one id and a `gone` for the other).
            let fetched = try await store.fetchDocuments([("c", id)])
            #expect(fetched.map(\.id) == [id])
        }
    }
}
