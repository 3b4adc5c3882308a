import BigPeerTestSupport
import Foundation
import HTTP
import Postgres
import Sockets
import Testing
import Values

/// A local node and its cloud as real `bigpeer serve` processes on two databases (issue #18):
/// changes flow both ways, nothing is lost or doubled across outages and SIGKILL, and replicas that
/// agree stay quiet.
@Suite(.serialized) struct UpstreamReplicationTests {
    static let cars = "SELECT * FROM cars"
    static let counters = "SELECT * FROM counters"

    @Test func writesOnBothSides_converge_andThenNeitherSideCommitsAnything() async throws {
        try await withDatabases(2) { urls, http, processes in
            let cloud = try await Server.start(urls[0], http: http, processes: processes)
            let node = try await Server.start(urls[1], upstreamPort: cloud.port, subscribe: [Self.cars, Self.counters], http: http, processes: processes)
            for i in 0..<20 {
                try await cloud.execute("INSERT INTO cars DOCUMENTS ({'_id': 'c\(i)', 'color': 'red', 'n': \(i)})")
                try await node.execute("INSERT INTO cars DOCUMENTS ({'_id': 'n\(i)', 'color': 'blue', 'n': \(i)})")
            }
            try await cloud.execute("INSERT INTO COLLECTION counters (hits COUNTER) DOCUMENTS ({'_id': 'k', 'hits': 0})")
            #expect(await eventually(within: .seconds(30)) { await converged([cloud, node], "cars", minimum: 40) })
            #expect(await eventually(within: .seconds(30)) { await converged([cloud, node], "counters", minimum: 1) })
            // Each side edits the other's documents; both count on one counter.
            for i in 0..<10 {
                try await node.execute("UPDATE cars SET color = 'green' WHERE _id = 'c\(i)'")
                try await cloud.execute("UPDATE cars SET owner = 'cloud' WHERE _id = 'n\(i)'")
                try await cloud.execute("UPDATE COLLECTION counters (hits COUNTER) APPLY hits INCREMENT BY 1 WHERE _id = 'k'")
                try await node.execute("UPDATE COLLECTION counters (hits COUNTER) APPLY hits INCREMENT BY 2 WHERE _id = 'k'")
            }
            try await cloud.execute("DELETE FROM cars WHERE _id = 'n19'")
            try await node.execute("DELETE FROM cars WHERE _id = 'c19'")
            #expect(await eventually(within: .seconds(30)) {
                guard await converged([cloud, node], "cars"), await converged([cloud, node], "counters"),
                      let docs = try? await node.documents("cars"), docs.count == 38 else { return false }
                return (try? await node.documents("counters"))?.first?["hits"]?.doubleValue == 30
            }, "both sides hold the same 38 cars and the counter counts 10 × 1 + 10 × 2")
            let cars = try await node.documents("cars")
            #expect(cars.first { $0["_id"] == "c0" }?["color"] == "green")
            #expect(cars.first { $0["_id"] == "n0" }?["owner"] == "cloud")

            // Quiet: once both sides agree, nothing is committed any more (no echo, no ping-pong).
            #expect(await eventually(within: .seconds(30)) {
                (try? await node.upstreamStatus())?["pendingUploads"]?["changes"]?.int64Value == 0
            })
            // What was in flight has landed: two reads 2 s apart agree (however slow the machine;
            // a ping-pong never settles, and one slower than that is caught below).
            var settled = (try await cloud.newestTransaction(), try await node.newestTransaction())
            #expect(try await eventually {
                try await Task.sleep(for: .seconds(2))
                let now = (try await cloud.newestTransaction(), try await node.newestTransaction())
                defer { settled = now }
                return now == settled
            })
            let before = settled
            try await Task.sleep(for: .seconds(10))
            let after = (try await cloud.newestTransaction(), try await node.newestTransaction())
            #expect(before == after, "10 s of silence committed nothing: cloud \(before.0) -> \(after.0), node \(before.1) -> \(after.1)")
            let status = try await node.upstreamStatus()
            #expect(status["state"] == "connected")
            #expect(status["rejectedUploads"] == 0)
        }
    }

    @Test func apartWithWritesOnBothSides_thenTogether_onlyTheChangesTravel() async throws {
        try await withDatabases(2) { urls, http, processes in
            var cloud = try await Server.start(urls[0], http: http, processes: processes)
            var node = try await Server.start(urls[1], upstreamPort: cloud.port, subscribe: [Self.cars], http: http, processes: processes)
            let docs = (0..<200).map { "({'_id': 'd\($0)', 'v': 0, 'pad': '\(String(repeating: "x", count: 200))'})" }
            try await cloud.execute("INSERT INTO cars DOCUMENTS " + docs.joined(separator: ", "))
            #expect(await eventually(within: .seconds(30)) { await converged([cloud, node], "cars", minimum: 200) })
            #expect(await eventually(within: .seconds(30)) {
                (try? await node.upstreamStatus())?["subscriptions"]?.arrayValue?.first?["synced"] == true
            })
            // The node goes away; the cloud changes 5 documents; then the cloud goes away and the
            // node, alone, changes 7 others and creates 3.
            await node.stop()
            for i in 0..<5 { try await cloud.execute("UPDATE cars SET v = 1 WHERE _id = 'd\(i)'") }
            await cloud.stop()
            node = try await node.restart(http: http, processes: processes)
            for i in 100..<107 { try await node.execute("UPDATE cars SET v = 2 WHERE _id = 'd\(i)'") }
            for i in 0..<3 { try await node.execute("INSERT INTO cars DOCUMENTS ({'_id': 'new\(i)', 'v': 3})") }
            let offline = try await node.upstreamStatus()
            #expect(offline["state"] == "offline" || offline["state"] == "connecting")
            #expect(offline["pendingUploads"]?["changes"] == 10)
            cloud = try await cloud.restart(http: http, processes: processes)
            #expect(await eventually(within: .seconds(30)) { await converged([cloud, node], "cars", minimum: 203) })
            #expect(await eventually(within: .seconds(10)) {
                (try? await node.upstreamStatus())?["uploadedChanges"] == 10
            })
            // Since its restart the node received only the cloud's 5 changes (a resumed
            // subscription, not the 200 documents again) and sent only its own 10.
            let status = try await node.upstreamStatus()
            #expect(status["downloadedEntries"] == 5, "\(status)")
            #expect(status["uploadedChanges"] == 10, "\(status)")
        }
    }

    /// `have` lists only documents that match the subscription here: a document that left it
    /// and then changed upstream is not claimed as held, so when another site's change brings it
    /// back it arrives whole (claimed, that site's delta would apply cleanly on the stale copy).
    @Test func aDocumentThatLeftAndChangedMeanwhile_comesBackWhole() async throws {
        try await withDatabases(3) { urls, http, processes in
            let cloud = try await Server.start(urls[0], http: http, processes: processes)
            var reds = try await Server.start(urls[1], upstreamPort: cloud.port, subscribe: ["SELECT * FROM cars WHERE color = 'red'"],
                                              http: http, processes: processes)
            let other = try await Server.start(urls[2], upstreamPort: cloud.port, subscribe: [Self.cars], http: http, processes: processes)
            try await cloud.execute("INSERT INTO cars DOCUMENTS ({'_id': 'x', 'color': 'red', 'a': 1})")
            func x(_ s: Server) async -> Value? { (try? await s.documents("cars"))?.first { $0["_id"] == "x" } }
            #expect(await eventually(within: .seconds(30)) {
                let (r, o) = (await x(reds), await x(other))
                return r?["a"] == 1 && o?["a"] == 1
            })
            try await cloud.execute("UPDATE cars SET color = 'blue' WHERE _id = 'x'")  // x leaves reds' subscription
            #expect(await eventually(within: .seconds(30)) { await x(reds)?["color"] == "blue" })
            // A change reds does not get (x is outside its subscription), and its checkpoint moves
            // past it; then a new session.
            let missed = try await cloud.execute("UPDATE cars SET a = 2 WHERE _id = 'x'")["transactionId"]?.int64Value ?? .max
            #expect(await eventually(within: .seconds(30)) {
                ((try? await reds.upstreamStatus())?["downloadCheckpoint"]?.int64Value ?? 0) >= missed
            })
            await reds.stop()
            reds = try await reds.restart(http: http, processes: processes)
            #expect(await eventually(within: .seconds(30)) {
                (try? await reds.upstreamStatus())?["subscriptions"]?.arrayValue?.first?["synced"] == true
            })
            // Another site brings x back into the subscription.
            #expect(await eventually(within: .seconds(30)) { await x(other)?["a"] == 2 })
            try await other.execute("UPDATE cars SET color = 'red' WHERE _id = 'x'")
            #expect(await eventually(within: .seconds(30)) { await x(reds)?["color"] == "red" })
            let final = await x(reds)
            #expect(final == ["_id": "x", "color": "red", "a": 2], "the change made while x was outside reached reds too")
        }
    }

    @Test func sigkillDuringAnUploadOf10000Changes_everyChangeArrivesExactlyOnce() async throws {
        try await withDatabases(2) { urls, http, processes in
            // The cloud's port is chosen now and the cloud started later: the node writes its
            // 10 000 changes while it cannot reach it.
            let cloudPort = try LocalPostgres.freeLoopbackPort()
            var node = try await Server.start(urls[1], upstreamPort: cloudPort, subscribe: [], extra: ["--upstream-batch-documents", "50"],
                                              http: http, processes: processes)
            for chunk in 0..<8 {
                let docs = (0..<1000).map { "({'_id': 'd\(chunk * 1000 + $0)'})" }
                try await node.execute("INSERT INTO docs DOCUMENTS " + docs.joined(separator: ", "))
            }
            try await node.execute("INSERT INTO COLLECTION counters (n COUNTER) DOCUMENTS " + (0..<20).map { "({'_id': 'k\($0)', 'n': 0})" }.joined(separator: ", "))
            let writer = node
            try await withThrowingTaskGroup(of: Void.self) { g in
                for w in 0..<4 {
                    g.addTask {
                        for i in 0..<500 {
                            try await writer.execute("UPDATE COLLECTION counters (n COUNTER) APPLY n INCREMENT BY 1 WHERE _id = 'k\((w * 500 + i) % 20)'")
                        }
                    }
                }
                try await g.waitForAll()
            }
            let waiting = try await node.upstreamStatus()
            #expect(waiting["pendingUploads"]?["changes"] == 10_020, "\(waiting)")
            let cloud = try await Server.start(urls[0], port: cloudPort, http: http, processes: processes)
            // Kill the node once part of the upload has been committed upstream.
            _ = await eventually(within: .seconds(60)) { ((try? await cloud.count("docs")) ?? 0) > 0 }
            await node.kill()
            let atKill = try await cloud.count("docs")
            #expect(atKill > 0 && atKill < 8000, "the node died in the middle of the upload (\(atKill) of 8000 documents up)")
            node = try await node.restart(http: http, processes: processes)
            #expect(await eventually(within: .seconds(90)) {
                (try? await node.upstreamStatus())?["pendingUploads"]?["changes"] == 0
            })
            #expect(try await cloud.count("docs") == 8000)
            let counters = try await cloud.documents("counters")
            #expect(counters.count == 20)
            #expect(counters.allSatisfy { $0["n"]?.doubleValue == 100 }, "every increment counted exactly once: \(counters.map { $0["n"] ?? .null })")
        }
    }
}

/// The database behind the upstream URL is replaced by an empty one (a new site id in `welcome`):
/// the node drops its checkpoints and uploads its whole change log again. Where the log no longer
/// holds a document's earlier changes (pruned here by hand), the new upstream refuses the later
/// delta (`deltaGap`) and the node sends the document's full state instead.
@Suite(.serialized) struct UpstreamReplacedTests {
    @Test func anotherDatabaseAtTheSameURL_getsEverything_gapsAsFullStates() async throws {
        try await withDatabases(3) { urls, http, processes in
            let first = try await Server.start(urls[0], http: http, processes: processes)
            let node = try await Server.start(urls[2], upstreamPort: first.port, subscribe: ["SELECT * FROM cars"], http: http, processes: processes)
            try await first.execute("INSERT INTO cars DOCUMENTS ({'_id': 'from-cloud', 'v': 1})")
            try await node.execute("INSERT INTO cars DOCUMENTS ({'_id': 'early', 'v': 1}), ({'_id': 'kept', 'v': 1})")
            #expect(await eventually(within: .seconds(30)) { await converged([first, node], "cars", minimum: 3) })
            // The node's log loses the creations of 'early' (as if pruned); 'early' then changes.
            let conn = try await PostgresConnection.connect(try PostgresConfiguration(url: urls[2]), on: TestLoops.group.next())
            _ = try await conn.query("DELETE FROM change_log WHERE id = '\"early\"'::jsonb")
            await conn.close()
            try await node.execute("UPDATE cars SET v = 2 WHERE _id = 'early'")
            #expect(await eventually(within: .seconds(30)) {
                (try? await first.documents("cars"))?.first { $0["_id"] == "early" }?["v"] == 2
            })
            let port = first.port
            await first.stop()
            let second = try await Server.start(urls[1], port: port, http: http, processes: processes)
            #expect(await eventually(within: .seconds(30)) { await converged([second, node], "cars", minimum: 3) },
                    "the new upstream holds everything the node holds")
            let early = try await second.documents("cars").first { $0["_id"] == "early" }
            #expect(early?["v"] == 2)
            let status = try await node.upstreamStatus()
            #expect(status["rejectedUploads"] == 0, "\(status)")
            #expect(status["resentAsFullState"] == 1, "the update of 'early' went again as a full state: \(status)")
            #expect(status["sessions"] == 2, "\(status)")
        }
    }

    /// A server whose change log was pruned (CHANGE_LOG_RETENTION_DAYS passed before it had an
    /// upstream) becomes a local node: the log cannot be replayed, so every document (tombstones
    /// included) goes up whole, then the change log takes over.
    @Test func aServerWhosePrunedLogCannotBeReplayed_uploadsEveryDocument() async throws {
        try await withDatabases(2) { urls, http, processes in
            var node = try await Server.start(urls[1], http: http, processes: processes)
            let docs = (0..<300).map { "({'_id': 'd\($0)', 'n': \($0)})" }.joined(separator: ", ")
            try await node.execute("INSERT INTO old DOCUMENTS " + docs)
            try await node.execute("DELETE FROM old WHERE n < 10")
            let conn = try await PostgresConnection.connect(try PostgresConfiguration(url: urls[1]), on: TestLoops.group.next())
            _ = try await conn.query("DELETE FROM change_log")  // as maintenance would, after the retention
            await conn.close()
            await node.stop()
            let cloud = try await Server.start(urls[0], http: http, processes: processes)
            node = try await Server.start(urls[1], upstreamPort: cloud.port, subscribe: ["SELECT * FROM old"], http: http, processes: processes)
            try await node.execute("INSERT INTO old DOCUMENTS ({'_id': 'after', 'n': -1})")
            #expect(await eventually(within: .seconds(60)) { await converged([cloud, node], "old", minimum: 291) })
            let status = try await node.upstreamStatus()
            // 300 (tombstones included), plus 'after' when the pass read it too; never more.
            let passed = status["documentPassUploads"]?.int64Value ?? -1
            #expect(passed == 300 || passed == 301, "\(status)")
            #expect(status["uploadedChanges"] == 301, "each document went once: \(status)")
            #expect(status["pendingUploads"]?["changes"] == 0, "\(status)")
            // The cloud holds the tombstones too: a deleted document stays deleted there.
            #expect(try await cloud.count("old") == 291)
        }
    }
}
