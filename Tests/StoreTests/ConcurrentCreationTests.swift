import BigPeerTestSupport
import Testing
import Values
@testable import Store

/// Two instances (two stores, two pools) on one database create the same new documents at the
/// same moment. Neither sees a row to lock, so without a lock on the key the second upsert would
/// overwrite the first's acknowledged write; every acknowledged field must survive.
@Suite struct ConcurrentCreationTests {
    @Test func twoInstancesCreatingTheSameNewDocuments_loseNoAcknowledgedField() async throws {
        try await withStore { a, db in
            let b = try await DocumentStore.open(pool: db.makePool())
            let ids = (0..<40).map { "doc-\($0)" }
            try await withThrowingTaskGroup(of: Void.self) { group in
                for (store, field) in [(a, "fromA"), (b, "fromB")] {
                    for id in ids {
                        group.addTask {
                            _ = try await store.execute("INSERT INTO race DOCUMENTS (:d) ON ID CONFLICT DO UPDATE",
                                                        arguments: ["d": ["_id": .string(id), field: true]])
                        }
                    }
                }
                try await group.waitForAll()
            }
            let items = try await a.items("SELECT * FROM race ORDER BY _id")
            #expect(items.count == ids.count)
            let lost = items.filter { $0["fromA"] != true || $0["fromB"] != true }
            #expect(lost.isEmpty, "acknowledged fields lost: \(lost)")
        }
    }
}
