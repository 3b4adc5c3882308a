import BigPeerTestSupport
import Migrations
import Postgres
import Testing

/// migrations/0014_attachment_refs.sql: the references of documents written before it are
/// backfilled, and its triggers keep them from then on, whatever statement writes `documents`.
@Suite struct AttachmentReferencesMigrationTests {
    static let a = String(repeating: "a", count: 64), b = String(repeating: "b", count: 64)

    static func references(_ conn: PostgresConnection) async throws -> [String] {
        try await conn.query("SELECT attachment_id || ' ' || (doc_id #>> '{}') FROM bigpeer_attachment_refs ORDER BY 1")
            .map { try $0.decode(0, as: String.self) }
    }

    @Test func backfillThenEveryKindOfWrite() async throws {
        try await TestPostgres.withDatabase { db in
            let all = try MigrationSet.embedded()
            let conn = try await db.connect()
            _ = try await PostgresMigrator.apply(all.filter { $0.version < 14 }, on: conn)
            let token = #"{"_type": "attachment", "id": "\#(Self.a)", "len": 1, "metadata": {}}"#
            for (id, value, deleted) in [("d1", #"{"_id": "d1", "photos": [\#(token), \#(token)]}"#, false),
                                         ("d2", #"{"_id": "d2", "deep": {"x": {"photo": \#(token)}}}"#, false),
                                         ("gone", "NULL", true), ("plain", #"{"_id": "plain", "_type": "attachment"}"#, false)] {
                let v = value == "NULL" ? "NULL" : "'\(value)'::jsonb"
                _ = try await conn.query(PostgresQuery(unsafeSQL: """
                    INSERT INTO documents (collection, id, value, state, deleted) VALUES ('c', '"\(id)"'::jsonb, \(v), '\\x00'::bytea, \(deleted))
                    """))
            }
            _ = try await PostgresMigrator.apply(all, on: conn)
            #expect(try await Self.references(conn) == ["\(Self.a) d1", "\(Self.a) d2"])

            // An update that keeps the reference, one that swaps it, a tombstone, a hard delete.
            _ = try await conn.query(#"UPDATE documents SET value = jsonb_set(value, '{n}', '1') WHERE id = '"d1"'"#)
            #expect(try await Self.references(conn) == ["\(Self.a) d1", "\(Self.a) d2"])
            _ = try await conn.query(PostgresQuery(unsafeSQL: """
                UPDATE documents SET value = jsonb_set(value, '{photos,1,id}', '"\(Self.b)"') WHERE id = '"d1"'
                """))
            #expect(try await Self.references(conn) == ["\(Self.a) d1", "\(Self.a) d2", "\(Self.b) d1"])
            _ = try await conn.query(#"UPDATE documents SET value = NULL, deleted = true WHERE id = '"d1"'"#)
            #expect(try await Self.references(conn) == ["\(Self.a) d2"])
            _ = try await conn.query(#"DELETE FROM documents WHERE id = '"d2"'"#)
            #expect(try await Self.references(conn) == [])
            await conn.close()
        }
    }
}
