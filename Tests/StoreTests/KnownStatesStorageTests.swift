import BigPeerTestSupport
import DQL
import Postgres
import Testing
import Values
@testable import Store

/// `knownStates` (PROTOCOL.md §4.3 `known`): the documents a new subscription matches here, with
/// the first 8 bytes of SHA-256 of their stored state, as PostgreSQL computes it: it must be the
/// digest of exactly the bytes the sync server reads (so equal states compare equal).
@Suite struct KnownStatesStorageTests {
    static func statement(_ q: String) throws -> SelectStatement {
        guard case .select(let s) = try DQL.parse(q) else { throw StoreError.invalid("not a SELECT") }
        return s
    }

    @Test func matchingLiveDocuments_withTheDigestOfTheirStoredState() async throws {
        try await withStore { store, _ in
            _ = try await store.execute("""
                INSERT INTO c DOCUMENTS ({'_id': 'a', 'kind': 'x'}), ({'_id': 'b', 'kind': 'y'}), ({'_id': 'd', 'kind': 'x', 'n': 2}),
                                        ({'_id': 'e', 'kind': 'x'})
                """)
            _ = try await store.execute("DELETE FROM c WHERE _id = 'e'")
            func digests() async throws -> [String: UInt64] {
                var out: [String: UInt64] = [:]
                // The bytes themselves (binary results), hashed here: what the sync server digests.
                var query: PostgresQuery = "SELECT id #>> '{}', state FROM documents WHERE collection = 'c' AND NOT deleted"
                query.binaryResults = true
                for row in try await store.pool.query(query) {
                    let hasher = SHA256()
                    hasher.update(try BinaryColumns.bytes(row, column: 1))
                    out[try BinaryColumns.text(row, column: 0)] = UInt64(String((hasher.finalHex() ?? "").prefix(16)), radix: 16)
                }
                return out
            }
            let expected = try await digests()
            for query in ["SELECT * FROM c WHERE kind = 'x'", "SELECT * FROM c WHERE regexp_like(kind, '^x$')"] {
                let known = try await store.knownStates(matching: try Self.statement(query), arguments: [:], limit: 100)
                let byID = Dictionary(uniqueKeysWithValues: known.map { ($0.id.stringValue ?? "", $0.digest) })
                #expect(byID == ["a": expected["a"]!, "d": expected["d"]!], "\(query): the tombstone e and the non-matching b are not listed")
            }
            let one = try await store.knownStates(matching: try Self.statement("SELECT * FROM c"), arguments: [:], limit: 1)
            #expect(one.count == 1, "a subset is fine: at most the limit")
            // A changed document has another digest.
            _ = try await store.execute("UPDATE c SET n = 3 WHERE _id = 'd'")
            #expect(try await digests()["d"] != expected["d"])
        }
    }
}
