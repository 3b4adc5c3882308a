import BigPeerTestSupport
import DQL
import Postgres
import Synchronization
import Testing
import Values
@testable import Store

/// Write transactions use a remembered `DQL_STRICT_MODE` checked by `bigpeer_expect_setting`
/// (WriteSettings.swift) instead of reading it: every write must still use the value the setting
/// had when the write ran, whoever changed it.
@Suite struct WriteSettingsTests {
    /// In strict mode an object field is a REGISTER, so a nested-path UPDATE fails; without strict
    /// mode it is a MAP and the UPDATE succeeds. Used below to see which value a write ran with.
    static func nestedUpdateSucceeds(_ store: DocumentStore, id: String) async throws -> Bool {
        _ = try await store.execute("INSERT INTO p DOCUMENTS (:d)", arguments: ["d": ["_id": .string(id), "addr": ["city": "Oslo", "zip": "0150"]]])
        do {
            let r = try await store.execute("UPDATE p SET addr.city = 'Bergen' WHERE _id = :id", arguments: ["id": .string(id)])
            #expect(r.mutatedDocumentIDs == [.string(id)])
            return true
        } catch {
            return false
        }
    }

    /// Another instance turns strict mode off: this instance's next writes use the new value at
    /// once (the remembered one fails its check, the transaction reruns with the value read afresh).
    @Test func anotherInstancesChange_isUsedByTheNextWrite() async throws {
        try await TestPostgres.withDatabase { db in
            try await db.migrate()
            let a = try await DocumentStore.open(pool: db.makePool())
            let b = try await DocumentStore.open(pool: db.makePool())
            #expect(try await Self.nestedUpdateSucceeds(a, id: "s1") == false)
            #expect(a.rememberedStrictMode.withLock { $0 } == RememberedSetting(stored: nil))
            _ = try await b.execute("ALTER SYSTEM SET DQL_STRICT_MODE = false")
            #expect(try await Self.nestedUpdateSucceeds(a, id: "n1"))
            #expect(a.rememberedStrictMode.withLock { $0 } == RememberedSetting(stored: .bool(false)))
            #expect(try await a.items("SELECT addr FROM p WHERE _id = 'n1'") == [["addr": ["city": "Bergen", "zip": "0150"]]])
            _ = try await b.execute("ALTER SYSTEM RESET DQL_STRICT_MODE")
            #expect(try await Self.nestedUpdateSucceeds(a, id: "s2") == false)
            #expect(a.rememberedStrictMode.withLock { $0 } == RememberedSetting(stored: nil))
        }
    }

    /// A stale remembered value (here planted directly) is never used to write: the check fails
    /// before anything is written and the rerun uses the stored value.
    @Test func staleRememberedValue_isCorrectedBeforeWriting() async throws {
        try await withStore { store, _ in
            _ = try await store.execute("INSERT INTO p DOCUMENTS ({_id: 'x', v: 1})")
            store.rememberedStrictMode.withLock { $0 = RememberedSetting(stored: .bool(false)) }
            #expect(try await Self.nestedUpdateSucceeds(store, id: "s") == false)  // strict, as stored
            #expect(store.rememberedStrictMode.withLock { $0 } == RememberedSetting(stored: nil))
            // The other way round: stored false, remembered "absent" (strict).
            _ = try await store.pool.query("INSERT INTO bigpeer_settings (name, value) VALUES ('DQL_STRICT_MODE', 'false')")
            #expect(try await Self.nestedUpdateSucceeds(store, id: "n") == true)
            #expect(store.rememberedStrictMode.withLock { $0 } == RememberedSetting(stored: .bool(false)))
            // Every write of those reruns landed exactly once.
            #expect(try await store.items("SELECT COUNT(*) AS n FROM p") == [["n": 3]])
            let logged = try await store.pool.query("SELECT count(*) FROM change_log WHERE collection = 'p'")[0].decode(0, as: Int64.self)
            #expect(logged == 4)  // x, s (its UPDATE failed), n and n's UPDATE
        }
    }

    /// This instance's own ALTER SYSTEM: it forgets the remembered value, and its next writes use
    /// the new one.
    @Test func ownChange_isUsedByTheNextWrite() async throws {
        try await withStore { store, _ in
            _ = try await store.execute("INSERT INTO p DOCUMENTS ({_id: 'x', v: 1})")  // remembers "absent"
            _ = try await store.execute("ALTER SYSTEM SET DQL_STRICT_MODE = false")
            #expect(store.rememberedStrictMode.withLock { $0 } == nil)
            #expect(try await Self.nestedUpdateSucceeds(store, id: "n") == true)
            _ = try await store.execute("ALTER SYSTEM RESET DQL_STRICT_MODE")
            #expect(try await Self.nestedUpdateSucceeds(store, id: "s") == false)
        }
    }

    /// `UPDATE … WHERE _id = <string>` skips the candidate query: an absent or deleted document
    /// matches nothing, a present one is updated, and a document created by the same batch is seen.
    @Test func updateByStringID_matchesExactlyTheLiveDocument() async throws {
        try await withStore { store, _ in
            func st(_ text: String, _ args: [String: Value] = [:]) throws -> (statement: Statement, arguments: [String: Value]) { (try DQL.parse(text), args) }
            #expect(try await store.execute("UPDATE c SET v = 1 WHERE _id = 'none'").mutatedDocumentIDs == [])
            _ = try await store.execute("INSERT INTO c DOCUMENTS ({_id: 'a', v: 0}), ({_id: 'b', v: 0})")
            #expect(try await store.execute("UPDATE c SET v = 2 WHERE :id = _id", arguments: ["id": "a"]).mutatedDocumentIDs == ["a"])
            _ = try await store.execute("DELETE FROM c WHERE _id = 'b'")
            #expect(try await store.execute("UPDATE c SET v = 3 WHERE _id = 'b'").mutatedDocumentIDs == [])
            #expect(try await store.execute("DELETE FROM c WHERE _id = 'b'").mutatedDocumentIDs == [])
            let results = try await store.executeBatch([
                try st("UPDATE c SET v = 4 WHERE _id = 'new'"),
                try st("INSERT INTO c DOCUMENTS ({_id: 'new', v: 5})"),
                try st("UPDATE c SET v = 6 WHERE _id = :id", ["id": "new"]),
            ])
            #expect(results.map(\.mutatedDocumentIDs) == [[], ["new"], ["new"]])
            #expect(try await store.items("SELECT _id, v FROM c ORDER BY _id") == [["_id": "a", "v": 2], ["_id": "new", "v": 6]])
            // An object id is not a string: it goes through the query (jsonb compares objects by content).
            _ = try await store.execute("INSERT INTO c DOCUMENTS ({_id: {a: 1, b: 'x'}, v: 0})")
            #expect(try await store.execute("UPDATE c SET v = 7 WHERE _id = {b: 'x', a: 1}").mutatedDocumentIDs.count == 1)
        }
    }
}
