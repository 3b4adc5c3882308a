import DQL
import Testing
import Values
@testable import Store

/// `{k: 1}` and `{k: 1.0}` are one `_id` to PostgreSQL (jsonb compares numbers by value) and to
/// DQL, two Values to Swift's `==`. Rows come back in the form they were created with; writes and
/// sync reads must find them under the form asked (Value.jsonbIdentity).
@Suite struct NumericIDFormTests {
    @Test func anIdAskedInTheOtherNumberForm_findsTheDocument() async throws {
        try await withStore { store, _ in
            _ = try await store.execute("INSERT INTO c DOCUMENTS ({_id: {k: 1}, a: 1})")
            // Was: 409 "created by other writers at the same moment 8 times in a row", for ever.
            _ = try await store.execute("INSERT INTO c DOCUMENTS ({_id: {k: 1.0}, b: 2}) ON ID CONFLICT DO UPDATE")
            let items = try await store.execute("SELECT * FROM c").items
            #expect(items.count == 1)
            #expect(items.first?["b"] == 2)
            _ = try await store.execute("UPDATE c SET d = 4 WHERE _id = {k: 1.0}")
            #expect(try await store.execute("SELECT d FROM c").items == [["d": 4]])
            // A plain INSERT of the same document in the other form is the ordinary conflict.
            do {
                _ = try await store.execute("INSERT INTO c DOCUMENTS ({_id: {k: 1.0}, e: 5})")
                Issue.record("a second INSERT of the document was accepted")
            } catch {
                #expect("\(error)".contains("exists"), "\(error)")
            }
            #expect(try await store.execute("SELECT e FROM c WHERE e IS NOT MISSING").items.isEmpty)
            // A sync `want` is answered under the form it asked.
            let fetched = try await store.fetchDocuments([("c", ["k": 1.0]), ("c", ["k": 1])])
            #expect(Set(fetched.map(\.id)) == [["k": 1.0], ["k": 1]])
        }
    }
}
