// Store observers: initial result, then insertions/deletions/updates/moves by _id after each write.
import BigPeerTestSupport
import CRDT
@testable import SmallPeer
import SyncProtocol
import Testing
import Values

@Suite("SmallPeer observers")
struct ObserverTests {
    @Test func diff_byId() {
        func row(_ id: String, _ v: Int64) -> Value { .object(["_id": .string(id), "v": .int(v)]) }
        let old = [row("a", 1), row("b", 1), row("c", 1), row("d", 1)]
        let new = [row("b", 1), row("a", 1), row("c", 2), row("e", 1)]
        let e = ObserverEvent.diff(old: old, new: new)
        #expect(e.insertions == ["e"])
        #expect(e.deletions == ["d"])
        #expect(e.updates == ["c"])
        #expect(e.moves.count == 1 && ["a", "b"].contains(e.moves[0]))
        #expect(e.items == new)
        #expect(ObserverEvent.diff(old: old, new: old).moves.isEmpty)
        let reversed = ObserverEvent.diff(old: old, new: old.reversed())
        #expect(reversed.moves.count == 3)  // one of the four stays, the others move
    }

    @Test func observer_getsInitialThenEveryChange_untilCancelled() throws {
        let dir = TempDirectory()
        defer { dir.cleanup() }
        let peer = try openPeer(dir.path)
        _ = try peer.execute("INSERT INTO cars DOCUMENTS ({'_id': 'a', 'color': 'red', 'n': 1})")
        let events = MutexBox<[ObserverEvent]>([])
        let handle = try peer.registerObserver("SELECT * FROM cars WHERE color = :c ORDER BY n", arguments: ["c": "red"]) { e in
            events.withLock { $0.append(e) }
        }
        _ = try peer.execute("INSERT INTO cars DOCUMENTS ({'_id': 'b', 'color': 'red', 'n': 0})")
        _ = try peer.execute("UPDATE cars SET n = 5 WHERE _id = 'b'")
        _ = try peer.execute("INSERT INTO cars DOCUMENTS ({'_id': 'z', 'color': 'blue', 'n': 9})")  // not in the result: no event
        _ = try peer.execute("DELETE FROM cars WHERE _id = 'a'")
        handle.cancel()
        _ = try peer.execute("INSERT INTO cars DOCUMENTS ({'_id': 'c', 'color': 'red', 'n': 3})")
        let got = events.withLock { $0 }
        #expect(got.count == 4)
        guard got.count == 4 else { return }
        #expect(got[0].isInitial && got[0].insertions == ["a"])
        #expect(got[1].insertions == ["b"] && got[1].items.map { $0["_id"] } == ["b", "a"])
        #expect(got[2].updates == ["b"] && got[2].moves.count == 1 && got[2].items.map { $0["_id"] } == ["a", "b"])
        #expect(got[3].deletions == ["a"] && got[3].items.map { $0["_id"] } == ["b"])
    }

    @Test func handlerThatWrites_doesNotDeadlock_andEventsStayInOrder() throws {
        let dir = TempDirectory()
        defer { dir.cleanup() }
        let peer = try openPeer(dir.path)
        let seen = MutexBox<[Int]>([])
        let handle = try peer.registerObserver("SELECT COUNT(*) AS n FROM t") { e in
            let n = Int(e.items.first?["n"]?.int64Value ?? -1)
            seen.withLock { $0.append(n) }
            if n > 0 && n < 3 { _ = try? peer.execute("INSERT INTO t DOCUMENTS (:d)", arguments: ["d": .object(["_id": .string("auto\(n)")])]) }
        }
        _ = try peer.execute("INSERT INTO t DOCUMENTS ({'_id': 'first'})")
        #expect(seen.withLock { $0 } == [0, 1, 2, 3])
        handle.cancel()
    }

    /// `isLocal` is the cause of each event's own commit, not "a statement is running": a change
    /// sync brings while a statement runs is not local, and a statement's change that sync's
    /// delivery hands on is. `bigpeer peer` prints the events that are neither initial nor local;
    /// it went by a process-wide "a statement is running" flag and so lost a change that arrived
    /// during a local INSERT (scripts/lan_mesh_test.py's three-hop chain: the node's write was in
    /// peer-4's store, never printed). Handlers that apply and write make both overlaps happen in
    /// a fixed order: a handler runs inside the call whose commit it sees, and events queued
    /// meanwhile are delivered by that same call.
    @Test func isLocal_isEachEventsOwnCommit_whateverRunsMeanwhile() throws {
        let dir = TempDirectory()
        defer { dir.cleanup() }
        let peer = try openPeer(dir.path)
        let server: UInt64 = 0x5
        try peer.linkServer(server)
        @Sendable func fromServer(_ id: String) throws -> [ChangeEntry] {
            [ChangeEntry(document: DocumentRef(collection: "cars", id: .string(id)), kind: .upsert, payload: .state(try CRDTFixtures.document(id).encode()))]
        }
        let fromPeer = UploadEntry(document: DocumentRef(collection: "cars", id: "from-peer"),
                                   delta: try CRDTFixtures.document("from-peer").delta(since: VersionVector()).encode())
        let seen = MutexBox<[String]>([])
        let handle = try peer.registerObserver("SELECT * FROM cars") { e in
            guard !e.isInitial else { return }
            seen.withLock { $0 += e.insertions.map { "\($0.stringValue ?? "?") \(e.isLocal ? "local" : "sync")" } }
            if e.insertions == ["mine"] {
                // Inside the INSERT of "mine": a server's change and a served peer's upload arrive.
                _ = try? peer.applyFromServer(fromServer("from-server"), origin: server)
                _ = try? peer.mergeUploads([fromPeer], origin: 0xB)
            }
            if e.insertions == ["from-server-2"] {
                // Inside sync's delivery: a statement runs (its event is delivered after it returned).
                _ = try? peer.execute("INSERT INTO cars DOCUMENTS ({'_id': 'mine-2'})")
            }
        }
        defer { handle.cancel() }
        _ = try peer.execute("INSERT INTO cars DOCUMENTS ({'_id': 'mine'})")
        _ = try peer.applyFromServer(fromServer("from-server-2"), origin: server)
        #expect(seen.withLock { $0 } == ["mine local", "from-server sync", "from-peer sync", "from-server-2 sync", "mine-2 local"])
        #expect(try rows(peer, "SELECT _id FROM cars ORDER BY _id").count == 5)
    }
}
