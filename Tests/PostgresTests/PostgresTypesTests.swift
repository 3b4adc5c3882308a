import BigPeerTestSupport
import TestRandomness
import Testing
@testable import Postgres

@Suite struct PostgresTypesTests {
    @Test func scalarTypesRoundTripIncludingNull() async throws {
        try await TestPostgres.withDatabase { db in
            let c = try await db.connect()
            defer { Task { await c.close() } }
            let text = "héllo, 世界 🚀 'quoted' \"dq\" \\ backslash"
            let r = try await c.query("SELECT \(text)::text, \(Int64.max)::int8, \(Int64.min)::int8, \(Int32.min)::int4, \(Int16.max)::int2, \(true)::bool, \(false)::bool, \(3.25)::float8, \(Double.infinity)::float8, \(-0.0)::float8")
            let row = r[0]
            #expect(try row.decode(0, as: String.self) == text)
            #expect(try row.decode(1, as: Int64.self) == .max)
            #expect(try row.decode(2, as: Int64.self) == .min)
            #expect(try row.decode(3, as: Int32.self) == .min)
            #expect(try row.decode(4, as: Int16.self) == .max)
            #expect(try row.decode(5, as: Bool.self) == true)
            #expect(try row.decode(6, as: Bool.self) == false)
            #expect(try row.decode(7, as: Double.self) == 3.25)
            #expect(try row.decode(8, as: Double.self) == .infinity)
            let nan = try await c.query("SELECT \(Double.nan)::float8")[0].decode(0, as: Double.self)
            #expect(nan.isNaN)

            let nulls = try await c.query("SELECT \(String?.none)::text, NULL::int8, NULL::jsonb")[0]
            #expect(try nulls.decode(0, as: String?.self) == nil)
            #expect(try nulls.decode(1, as: Int?.self) == nil)
            #expect(throws: PostgresError.self) { try nulls.decode(2, as: PostgresJSON.self) }
        }
    }

    @Test func jsonbAndTimestampsRoundTrip() async throws {
        try await TestPostgres.withDatabase { db in
            let c = try await db.connect()
            defer { Task { await c.close() } }
            let json = PostgresJSON(#"{"a": [1, 2.5, "ü", null, {"b": true}]}"#)
            let back = try await c.query("SELECT \(json)")[0].decode(0, as: PostgresJSON.self)
            #expect(back.text == #"{"a": [1, 2.5, "ü", null, {"b": true}]}"#)

            for micros: Int64 in [0, 1_795_000_000_123_456, -1_000_000, -62_135_596_800_000_000 - 86_400_000_000 * 400] {
                let t = PostgresTimestamp(microsecondsSince1970: micros)
                let r = try await c.query("SELECT \(t), extract(epoch from \(t)::timestamptz)::float8")[0]
                #expect(try r.decode(0, as: PostgresTimestamp.self) == t)
                #expect(try r.decode(1, as: Double.self) == Double(micros) / 1e6)
            }
            let inf = try await c.query("SELECT 'infinity'::timestamptz")[0].decode(0, as: PostgresTimestamp.self)
            #expect(inf == .infinity)
        }
    }

    @Test func arraysRoundTripWithNullsEmptyAndAwkwardText() async throws {
        try await TestPostgres.withDatabase { db in
            let c = try await db.connect()
            defer { Task { await c.close() } }
            let strings = ["a", "", "NULL", "with,comma", "{braces}", "quote\"s", "back\\slash", "ünï 🚀", " space "]
            let r = try await c.query("SELECT \(strings), \([Int64]())::int8[], \([1, -2, 3] as [Int64]), \([true, false]), \([1.5, -2.25])")[0]
            #expect(try r.decode(0, as: [String].self) == strings)
            #expect(try r.decode(1, as: [Int64].self) == [])
            #expect(try r.decode(2, as: [Int64].self) == [1, -2, 3])
            #expect(try r.decode(3, as: [Bool].self) == [true, false])
            #expect(try r.decode(4, as: [Double].self) == [1.5, -2.25])

            let withNull = PostgresArray<String>(["x", nil, "NULL"])
            let back = try await c.query("SELECT \(withNull), array_length(\(withNull)::text[], 1)")[0]
            #expect(try back.decode(0, as: PostgresArray<String>.self).elements == ["x", nil, "NULL"])
            #expect(try back.decode(1, as: Int.self) == 3)
            #expect(throws: PostgresError.self) { try back.decode(0, as: [String].self) }

            let jsons = [PostgresJSON(#"{"k":"v"}"#), PostgresJSON("[1,2]")]
            let j = try await c.query("SELECT \(jsons)")[0].decode(0, as: [PostgresJSON].self)
            #expect(j.map(\.text) == [#"{"k": "v"}"#, "[1, 2]"])
        }
    }

    @Test func largeByteaRoundTripsInBinary() async throws {
        try await TestPostgres.withDatabase { db in
            let c = try await db.connect()
            defer { Task { await c.close() } }
            var rng = SplitMix64(seed: 7)
            let blob = PostgresBytea((0..<10_000_000).map { _ in UInt8(truncatingIfNeeded: rng.next()) })
            let r = try await c.query("SELECT \(blob), length(\(blob))")[0]
            #expect(try r.decode(1, as: Int.self) == 10_000_000)
            #expect(try r.decode(0, as: PostgresBytea.self) == blob)
            let empty = try await c.query("SELECT \(PostgresBytea([]))")[0].decode(0, as: PostgresBytea.self)
            #expect(empty.bytes.isEmpty)
        }
    }

    @Test func injectionAttemptIsStoredAsData() async throws {
        try await TestPostgres.withDatabase { db in
            let c = try await db.connect()
            defer { Task { await c.close() } }
            _ = try await c.query("CREATE TABLE x (v text)")
            let evil = "'); DROP TABLE x; --"
            _ = try await c.query("INSERT INTO x (v) VALUES (\(evil))")
            let r = try await c.query("SELECT v FROM x")
            #expect(r.count == 1)
            #expect(try r[0].decode(0, as: String.self) == evil)
            #expect(PostgresQuery.quoteIdentifier("we\"ird") == "\"we\"\"ird\"")
        }
    }

    @Test func decodingTheWrongTypeIsATypedError() async throws {
        try await TestPostgres.withDatabase { db in
            let c = try await db.connect()
            defer { Task { await c.close() } }
            let r = try await c.query("SELECT 'abc'::text AS word, 99999999999::int8 AS big")[0]
            #expect {
                try r.decode("word", as: Int.self)
            } throws: { e in
                guard case PostgresError.decoding(let col, _, _) = e else { return false }
                return col == "word"
            }
            #expect(throws: PostgresError.self) { try r.decode("big", as: Int32.self) }
            #expect(throws: PostgresError.self) { try r.decode("missing", as: Int.self) }
        }
    }
}

typealias SplitMix64 = SeededRandom
