import SyncPeer
import Testing
import Values

/// Subscriptions are told apart by the bytes of their text, as PostgreSQL tells the documents they
/// match apart: canonically equivalent but different text is two subscriptions, with two keys
/// (and so two checkpoints).
@Suite struct SyncSubscriptionTests {
    @Test func canonicallyEquivalentQueries_areDifferentSubscriptions() {
        let composed = SyncSubscription(query: "SELECT * FROM c WHERE name = '\u{E9}'", arguments: [:], collection: "c")
        let decomposed = SyncSubscription(query: "SELECT * FROM c WHERE name = 'e\u{301}'", arguments: [:], collection: "c")
        #expect(composed.query == decomposed.query, "Swift's String calls them equal")
        #expect(composed != decomposed && composed.key != decomposed.key)
        #expect(Set([composed, decomposed]).count == 2)
        let byArgument = [SyncSubscription(query: "SELECT * FROM c WHERE name = :n", arguments: ["n": "\u{E9}"], collection: "c"),
                          SyncSubscription(query: "SELECT * FROM c WHERE name = :n", arguments: ["n": "e\u{301}"], collection: "c")]
        #expect(Set(byArgument).count == 2 && byArgument[0].key != byArgument[1].key)
    }

    @Test func keysAreASCII_andPlainQueriesKeepTheirText() {
        let plain = SyncSubscription(query: "SELECT * FROM cars WHERE color = :c", arguments: ["c": "red"], collection: "cars")
        #expect(plain.key == "SELECT * FROM cars WHERE color = :c\u{0}{\"c\":\"red\"}")
        let odd = SyncSubscription(query: "SELECT * FROM c WHERE a = '\\\\u{e9}' OR a = '\u{E9}'", arguments: [:], collection: "c")
        #expect(odd.key.unicodeScalars.allSatisfy { $0.value < 0x80 })
        #expect(odd.key.contains("\\u{5c}u{e9}") && odd.key.contains("\\u{e9}"), "a literal backslash cannot pass for an escape: \(odd.key)")
    }
}
