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

    @Test func oneStatementNamingBothForms_writesOneDocument() async throws {
        try await withStore { store, _ in
            // As with one `_id` named twice: a plain INSERT fails with the conflict (was: "created
            // by other writers at the same moment 8 times in a row" for ever), DO UPDATE merges.
            do {
                _ = try await store.execute("INSERT INTO c DOCUMENTS ({_id: {k: 2}, a: 1}), ({_id: {k: 2.0}, b: 2})")
                Issue.record("an INSERT naming one document twice was accepted")
            } catch {
                #expect("\(error)".contains("already exists"), "\(error)")
            }
            let created = try await store.execute("INSERT INTO c DOCUMENTS ({_id: {k: 2}, a: 1}), ({_id: {k: 2.0}, b: 2}) ON ID CONFLICT DO UPDATE")
            #expect(created.mutatedDocumentIDs.count == 1)
            #expect(try await store.execute("SELECT a, b FROM c").items == [["a": 1, "b": 2]])
            // Existing: one update.
            let updated = try await store.execute("INSERT INTO c DOCUMENTS ({_id: {k: 2.0}, a: 3}), ({_id: {k: 2}, d: 4}) ON ID CONFLICT DO UPDATE")
            #expect(updated.mutatedDocumentIDs.count == 1)
            #expect(try await store.execute("SELECT a, b, d FROM c").items == [["a": 3, "b": 2, "d": 4]])
        }
    }
}
