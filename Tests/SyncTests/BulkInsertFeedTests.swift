import BigPeerTestSupport
import Postgres
import SyncProtocol
import Testing
import Values
@testable import Store
@testable import Sync

/// Bulk INSERTs (creations by COPY, logged without a delta; existing documents merged) seen by
/// both instances' change feeds and point-read caches.
extension ReadCacheIntegrationTests {
    static func bulk(_ range: Range<Int>, color: String) -> (String, [String: Value]) {
        var placeholders: [String] = []
        var arguments: [String: Value] = [:]
        for i in range {
            placeholders.append("(:d\(i))")
            arguments["d\(i)"] = ["_id": .string("b\(i)"), "color": .string(color), "n": .int(Int64(i))]
        }
        return ("INSERT INTO bulk DOCUMENTS \(placeholders.joined(separator: ", ")) ON ID CONFLICT DO UPDATE", arguments)
    }

    func colors(_ store: DocumentStore, _ range: Range<Int>) async throws -> [Value?] {
        var out: [Value?] = []
        for i in range {
            out.append(try await store.execute("SELECT * FROM bulk WHERE _id = :id", arguments: ["id": .string("b\(i)")]).items.first?["color"])
        }
        return out
    }

    @Test func bulkWritesReachBothFeedsAndInvalidateEveryCachedID() async throws {
        try await withInstances { a, b in
            let (create, createArguments) = Self.bulk(0..<300, color: "red")
            let t1 = try await a.store.execute(create, arguments: createArguments).transactionID
            for _ in 0..<2 {  // the second round is served from each instance's cache
                #expect(try await colors(a.store, 0..<300).allSatisfy { $0 == "red" })
                #expect(try await colors(b.store, 0..<300, minimumTransaction: t1).allSatisfy { $0 == "red" })
            }
            // 300 existing documents merged, 200 created, in one statement on a.
            let (update, updateArguments) = Self.bulk(0..<500, color: "green")
            let t2 = try await a.store.execute(update, arguments: updateArguments).transactionID
            #expect(try await colors(a.store, 0..<500).allSatisfy { $0 == "green" })  // own write: at once
            #expect(await eventually { b.feed.head >= t2 })
            #expect(try await colors(b.store, 0..<500).allSatisfy { $0 == "green" })  // b's feed invalidated them
            // Every change is in both feeds: the merged ones with their delta, the created ones with
            // the state that stands for it.
            for instance in [a, b] {
                let batch = LogBatch(try await instance.feed.read(after: .end(of: t1 - 1), maxTransactions: 2))
                let first = batch.entries.filter { $0.txn == t1 }, second = batch.entries.filter { $0.txn == t2 }
                #expect(first.count == 300 && first.allSatisfy { $0.kind == .upsert && $0.delta == nil && $0.state != nil })
                #expect(second.count == 500)
                #expect(second.filter { $0.delta != nil }.count == 300)
                #expect(second.filter { $0.delta == nil }.allSatisfy { $0.state != nil && $0.value?["color"] == "green" })
            }
        }
    }

    func colors(_ store: DocumentStore, _ range: Range<Int>, minimumTransaction: Int64) async throws -> [Value?] {
        var out: [Value?] = []
        for i in range {
            out.append(try await store.execute("SELECT * FROM bulk WHERE _id = :id", arguments: ["id": .string("b\(i)")],
                                               minimumTransaction: minimumTransaction).items.first?["color"])
        }
        return out
    }
}
