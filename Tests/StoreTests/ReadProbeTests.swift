import DQL
import Testing
import Values
@testable import Store

/// How a SELECT reaches PostgreSQL by its size (DocumentStore.select): a probe of
/// `probeRows + 1`, then, for small documents, a second probe of a cursor batch's worth, and a
/// cursor only beyond that.
@Suite struct ReadProbeTests {
    static func outcome(_ store: DocumentStore, _ text: String, _ args: [String: Value] = [:]) async throws -> ReadOutcome {
        try await store.executeStreaming(try DQL.parse(text), arguments: args)
    }

    static func insert(_ store: DocumentStore, _ collection: String, count: Int, padding: Int) async throws {
        let pad = String(repeating: "p", count: padding)
        for start in stride(from: 0, to: count, by: 500) {
            let docs = (start..<min(count, start + 500)).map { "({'_id': 'd\($0)', 'n': \($0), 'pad': '\(pad)'})" }.joined(separator: ",")
            _ = try await store.execute("INSERT INTO \(collection) DOCUMENTS \(docs)")
        }
    }

    /// 1,000 small documents (a 64-row probe's worth many times over, ~30 KB in all) come back
    /// whole from the second probe: no cursor, no stream slot; the residual WHERE runs on them.
    @Test func smallDocumentsBeyondTheProbe_comeBackWholeWithoutACursor() async throws {
        try await withStore { store, _ in
            try await Self.insert(store, "small", count: 1_000, padding: 0)
            guard case .complete(let all) = try await Self.outcome(store, "SELECT * FROM small") else {
                Issue.record("1,000 small documents were streamed through a cursor")
                return
            }
            #expect(all.items.count == 1_000)
            guard case .complete(let some) = try await Self.outcome(store, "SELECT * FROM small WHERE regexp_like(_id, :p)", ["p": "^d[0-9]*7$"]) else {
                Issue.record("a residual WHERE over 1,000 small documents was streamed")
                return
            }
            #expect(some.items.count == 100)
        }
    }

    /// Past what a batch holds, or with documents too large for the second probe to be worth
    /// it, the read streams through a cursor as before, and loses nothing.
    @Test func largerResults_stillStream_andLoseNothing() async throws {
        try await withStore { store, _ in
            try await Self.insert(store, "many", count: 10_000, padding: 40)  // ~80 B each: more than a batch of 512 KiB
            try await Self.insert(store, "large", count: 100, padding: 20_000)
            for (collection, count) in [("many", 10_000), ("large", 100)] {
                guard case .streaming(let cursor) = try await Self.outcome(store, "SELECT * FROM \(collection)") else {
                    Issue.record("\(collection) was not streamed")
                    continue
                }
                var seen = 0
                while let batch = try await cursor.next() { seen += batch.count }
                #expect(seen == count)
            }
        }
    }
}
