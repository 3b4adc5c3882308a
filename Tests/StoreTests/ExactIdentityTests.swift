import BigPeerTestSupport
import Postgres
import Testing
import Quoting
import Values
@testable import Store

/// #16 items 2, 3, 7, 8 through the store and a real PostgreSQL.
@Suite struct ExactIdentityTests {
    static let nfc = "caf\u{E9}", nfd = "cafe\u{301}"

    @Test func readCacheKeysAreByteExact() {
        let cache = DocumentReadCache(capacityBytes: 1 << 20)
        cache.enable(through: 1)
        cache.insert(DocumentReadCache.Key(collection: "Kate", id: Self.nfc), value: "Kate's", txn: 1)
        // Before the fix both lookups found "Kate's" (Swift hashed and compared the names and ids
        // by canonical equivalence).
        #expect(cache.lookup(DocumentReadCache.Key(collection: "\u{212A}ate", id: Self.nfc)) == nil)
        #expect(cache.lookup(DocumentReadCache.Key(collection: "Kate", id: Self.nfd)) == nil)
        #expect(cache.lookup(DocumentReadCache.Key(collection: "Kate", id: Self.nfc))?.value == "Kate's")
    }

    @Test func idsThatDifferInBytesAreDifferentDocuments() async throws {
        try await withStore { store, _ in
            _ = try await store.execute("INSERT INTO c DOCUMENTS (:a), (:b)",
                                        arguments: ["a": ["_id": .string(Self.nfc), "v": 1], "b": ["_id": .string(Self.nfd), "v": 2]])
            let a = try await store.items("SELECT v FROM c WHERE _id = :id", ["id": .string(Self.nfc)])
            let b = try await store.items("SELECT v FROM c WHERE _id = :id", ["id": .string(Self.nfd)])
            #expect(a == [["v": 1]] && b == [["v": 2]])
            #expect(try await store.items("SELECT * FROM c").count == 2)
        }
    }

    @Test func namesWithNULOrNotNFCNeverReachPostgres() async throws {
        try await withStore { store, _ in
            _ = try await store.execute("INSERT INTO colB DOCUMENTS ({'_id': 'a'})")
            for bad in ["INSERT INTO `colB\u{0}x` DOCUMENTS ({'_id': 'b'})", "SELECT * FROM `\u{212A}ate`",
                        "UPDATE colB SET `a\u{0}b` = 1"] {
                await #expect(throws: StoreError.self) { try await store.execute(bad) }
                do { _ = try await store.execute(bad) } catch let e as StoreError { #expect([.syntax, .invalid].contains(StoreErrorCase(e)), "\(bad): \(e)") }
            }
            // A NUL in a value: the caller's fault, and nothing was written.
            do {
                _ = try await store.execute("INSERT INTO colB DOCUMENTS (:d)", arguments: ["d": ["_id": "n", "v": "x\u{0}y"]])
                Issue.record("stored")
            } catch let e as StoreError { #expect(StoreErrorCase(e) == .invalid) }
            #expect(try await store.items("SELECT * FROM colB").count == 1)
        }
    }

    /// A quote followed by a combining mark is one Swift Character: the analytics view's SQL
    /// literal was not escaped, CREATE VIEW failed and every insert into the collection was a 500.
    @Test func collectionNamesWithQuotesAndCombiningMarksGetTheirView() async throws {
        try await withStore { store, db in
            let name = "q'\u{301}x\"`y"
            _ = try await store.execute("INSERT INTO \(Quote.dqlIdentifier(name)) DOCUMENTS ({'_id': 'a', 'v': 1})")
            _ = try await store.execute("INSERT INTO \(Quote.dqlIdentifier(name)) DOCUMENTS ({'_id': 'b', 'v': 2})")
            let pool = db.makePool()
            let rows = try await pool.query(PostgresQuery(unsafeSQL: "SELECT count(*)::int FROM analytics.\(Quote.sqlIdentifier(name))"))
            #expect(try rows[0].decode(0, as: Int.self) == 2)
        }
    }

    @Test func indexDDLMistakesAre4xxAndLongNamesDoNotCollide() async throws {
        try await withStore { store, db in
            _ = try await store.execute("CREATE INDEX i1 ON c (v)")
            do { _ = try await store.execute("CREATE INDEX i1 ON c (v)"); Issue.record("duplicate created") }
            catch let e as StoreError { #expect(StoreErrorCase(e) == .conflict, "\(e)") }
            _ = try await store.execute("CREATE INDEX IF NOT EXISTS i1 ON c (v)")
            do { _ = try await store.execute("DROP INDEX nosuch ON c"); Issue.record("dropped nothing") }
            catch let e as StoreError { #expect(StoreErrorCase(e) == .notFound, "\(e)") }
            _ = try await store.execute("DROP INDEX IF EXISTS nosuch ON c")
            // Names that PostgreSQL would have cut to one 63-byte name.
            let first = "`" + String(repeating: "\u{E9}", count: 40) + "first`", second = "`" + String(repeating: "\u{E9}", count: 40) + "second`"
            _ = try await store.execute("CREATE INDEX \(first) ON c (a)")
            _ = try await store.execute("CREATE INDEX \(second) ON c (b)")
            _ = try await store.execute("DROP INDEX \(second) ON c")
            let pool = db.makePool()
            let left = try await pool.query("SELECT indexdef FROM pg_indexes WHERE indexname LIKE 'dql_c_%'")
            #expect(left.count == 2)  // i1 and `first`
            #expect(try left.map { try $0.decode(0, as: String.self) }.contains { $0.contains("'a'") })
        }
    }

    /// A data exception (class 22) is about a value the caller sent: invalid input, never a
    /// database error; program limits are the caller's too.
    @Test func postgresDataExceptionsAreClientErrors() {
        let expected: [(String, StoreErrorCase)] = [("22003", .invalid), ("22P02", .invalid), ("22021", .invalid), ("54023", .invalid),
                                                    ("54000", .tooLarge), ("54001", .invalid), ("57014", .timeout), ("42P01", .database)]
        for (state, kind) in expected {
            let e = PostgresError.server(PostgresServerError(sqlState: state, message: "m"))
            #expect(StoreErrorCase(StoreError.from(e)) == kind, "\(state)")
        }
    }
}
