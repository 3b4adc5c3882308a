// The local store: DQL semantics (same as the server's), persistence across restarts, torn tails,
// compaction, the lock file.
import Foundation
import TestRandomness
import Testing
@testable import SmallPeer
import Values
import CRDT
import SyncPeer
import SyncProtocol

@Suite("SmallPeer local store")
struct LocalStoreTests {
    @Test func insertSelectUpdateDelete_followServerSemantics() throws {
        let dir = TempDirectory()
        defer { dir.cleanup() }
        let peer = try openPeer(dir.path)
        let ins = try peer.execute("INSERT INTO cars DOCUMENTS ({'_id': 'a', 'color': 'red', 'n': 1}), ({'_id': 'b', 'color': 'blue', 'n': 2})")
        #expect(ins.queryType == "insert")
        #expect(ins.mutatedDocumentIDs == [.string("a"), .string("b")])
        #expect(try rows(peer, "SELECT color FROM cars WHERE n > 1") == [.object(["color": .string("blue")])])

        // ON ID CONFLICT FAIL (default) is a typed conflict and changes nothing.
        #expect(throws: SmallPeerError.self) { try peer.execute("INSERT INTO cars DOCUMENTS ({'_id': 'a', 'color': 'green'})") }
        let nothing = try peer.execute("INSERT INTO cars DOCUMENTS ({'_id': 'a', 'color': 'green'}) ON ID CONFLICT DO NOTHING")
        #expect(nothing.mutatedDocumentIDs.isEmpty)
        let same = try peer.execute("INSERT INTO cars DOCUMENTS ({'_id': 'a', 'color': 'red'}) ON ID CONFLICT DO UPDATE_LOCAL_DIFF")
        #expect(same.mutatedDocumentIDs.isEmpty)
        let upd = try peer.execute("INSERT INTO cars DOCUMENTS ({'_id': 'a', 'color': 'green'}) ON ID CONFLICT DO UPDATE")
        #expect(upd.mutatedDocumentIDs == [.string("a")])
        #expect(try rows(peer, "SELECT color, n FROM cars WHERE _id = 'a'") == [.object(["color": .string("green"), "n": .int(1)])])

        let u = try peer.execute("UPDATE cars SET color = :c, n = n + 10 WHERE color = 'blue'", arguments: ["c": .string("black")])
        #expect(u.mutatedDocumentIDs == [.string("b")])
        #expect(try rows(peer, "SELECT n FROM cars WHERE _id = 'b'") == [.object(["n": .int(12)])])

        let d = try peer.execute("DELETE FROM cars WHERE _id = 'a'")
        #expect(d.mutatedDocumentIDs == [.string("a")])
        #expect(try rows(peer, "SELECT _id FROM cars") == [.object(["_id": .string("b")])])
        // A delete keeps a tombstone (it syncs); a re-insert re-creates the document.
        _ = try peer.execute("INSERT INTO cars DOCUMENTS ({'_id': 'a', 'color': 'white'})")
        #expect(try rows(peer, "SELECT color FROM cars WHERE _id = 'a'") == [.object(["color": .string("white")])])

        let e = try peer.execute("EVICT FROM cars WHERE _id = 'a'")
        #expect(e.queryType == "evict")
        #expect(try rows(peer, "SELECT COUNT(*) AS n FROM cars") == [.object(["n": .int(1)])])
    }

    /// `{k: 1}` and `{k: 1.0}` are one `_id` to the server (PostgreSQL's jsonb compares numbers by
    /// value); the local store holds them as one document too, under the form it got first, also
    /// after a restart. It held two, which sync then mapped onto one server row.
    @Test func idsThatDifferOnlyInNumberForm_areOneDocument() throws {
        let dir = TempDirectory()
        defer { dir.cleanup() }
        do {
            let peer = try openPeer(dir.path)
            _ = try peer.execute("INSERT INTO cars DOCUMENTS ({'_id': {'k': 1}, 'color': 'red'})")
            #expect(throws: SmallPeerError.self) { try peer.execute("INSERT INTO cars DOCUMENTS ({'_id': {'k': 1.0}, 'color': 'blue'})") }
            let upd = try peer.execute("INSERT INTO cars DOCUMENTS ({'_id': {'k': 1.0}, 'n': 2}) ON ID CONFLICT DO UPDATE")
            #expect(upd.mutatedDocumentIDs.count == 1)
            let both = try peer.execute("INSERT INTO cars DOCUMENTS ({'_id': {'k': 3}, 'a': 1}), ({'_id': {'k': 3.0}, 'b': 2}) ON ID CONFLICT DO UPDATE")
            #expect(both.mutatedDocumentIDs.count == 1)
            #expect(try rows(peer, "SELECT COUNT(*) AS n FROM cars") == [["n": 2]])
            #expect(try rows(peer, "SELECT color, n FROM cars WHERE _id = {'k': 1}") == [["color": "red", "n": 2]])
            #expect(try rows(peer, "SELECT a, b FROM cars WHERE _id = {'k': 3}") == [["a": 1, "b": 2]])
            _ = try peer.execute("DELETE FROM cars WHERE _id = {'k': 3.0}")
            #expect(try rows(peer, "SELECT _id FROM cars") == [["_id": ["k": 1]]])
            peer.close()
        }
        let reopened = try openPeer(dir.path)
        #expect(try rows(reopened, "SELECT _id, color, n FROM cars") == [["_id": ["k": 1], "color": "red", "n": 2]])
        #expect(try reopened.execute("UPDATE cars SET n = 5 WHERE _id = {'k': 1.0}").mutatedDocumentIDs.count == 1)
        #expect(try rows(reopened, "SELECT COUNT(*) AS n FROM cars") == [["n": 1]])
    }

    /// `have` (a resumed subscription's held documents) leaves out documents the peer created
    /// without any server version and has not uploaded: the server takes `have` to mean "holds
    /// every change up to the checkpoint" and would not send their merged state back (issue #16
    /// item 13). A document received from the server stays in `have`, also with local changes.
    @Test func have_leavesOutDocumentsCreatedLocally_untilUploaded() throws {
        let dir = TempDirectory()
        defer { dir.cleanup() }
        let peer = try openPeer(dir.path)
        let sub = try peer.subscribe("SELECT * FROM cars")
        defer { sub.cancel() }
        guard let subscription = peer.subscriptions.first else { Issue.record("no subscription"); return }
        let server: UInt64 = 0x5
        try peer.linkServer(server)
        try peer.saveCheckpoints([(subscription.key, 5)], server: server)
        let received = try CRDTFixtures.document("from-server")
        _ = try peer.applyFromServer([ChangeEntry(document: DocumentRef(collection: "cars", id: "from-server"), kind: .upsert, payload: .state(received.encode()))],
                                     origin: server)
        _ = try peer.execute("INSERT INTO cars DOCUMENTS ({'_id': 'mine', 'v': 1})")
        _ = try peer.execute("UPDATE cars SET v = 3 WHERE _id = 'from-server'")
        let fromServer = DocumentHash.of(collection: "cars", id: "from-server")
        #expect(peer.resume(for: subscription, server: server)?.have == [fromServer])
        // Acknowledged, the created document is listed (the server has sent what it lacked).
        let uploads = peer.takeUploads(excluding: [], maxDocuments: 10, maxBytes: 1 << 20, server: server)
        _ = try peer.acknowledge(uploads, rejected: [], server: server)
        #expect(peer.resume(for: subscription, server: server)?.have == [fromServer, DocumentHash.of(collection: "cars", id: "mine")].sorted())
    }

    /// `gone` (PROTOCOL.md §4.7): the server has no such document, or may not show it to this
    /// peer, so the copy here would never get another change from it: evicted (no tombstone, it
    /// does not sync), except a copy with local changes not yet uploaded.
    @Test func evictGone_evictsServerCopies_butNotLocalChanges() throws {
        let dir = TempDirectory()
        defer { dir.cleanup() }
        let peer = try openPeer(dir.path)
        let server: UInt64 = 0x5
        try peer.linkServer(server)
        let received = try CRDTFixtures.document("from-server")
        let fromServer = DocumentRef(collection: "cars", id: "from-server")
        _ = try peer.applyFromServer([ChangeEntry(document: fromServer, kind: .upsert, payload: .state(received.encode()))], origin: server)
        _ = try peer.execute("INSERT INTO cars DOCUMENTS ({'_id': 'mine', 'v': 1})")
        let mine = DocumentRef(collection: "cars", id: "mine"), never = DocumentRef(collection: "cars", id: "never")
        #expect(try peer.evictGone([fromServer, mine, never]) == [fromServer])
        #expect(try rows(peer, "SELECT _id FROM cars") == [["_id": "mine"]])
        #expect(peer.pendingUploadCount == 1, "an eviction uploads nothing")
    }

    @Test func countersMapsAndStrictMode() throws {
        let dir = TempDirectory()
        defer { dir.cleanup() }
        let peer = try openPeer(dir.path)
        _ = try peer.execute("INSERT INTO COLLECTION c (tags MAP) DOCUMENTS ({'_id': 'x', 'hits': 0, 'tags': {'a': 1}})")
        _ = try peer.execute("UPDATE c APPLY hits INCREMENT BY 5 WHERE _id = 'x'")
        _ = try peer.execute("UPDATE c APPLY hits INCREMENT BY -2 WHERE _id = 'x'")
        #expect(try rows(peer, "SELECT hits FROM c") == [.object(["hits": .double(3)])] || rows(peer, "SELECT hits FROM c") == [.object(["hits": .int(3)])])
        // Strict mode: a nested SET needs the parent declared MAP.
        #expect(throws: SmallPeerError.self) { try peer.execute("UPDATE c SET tags.b = 2 WHERE _id = 'x'") }
        _ = try peer.execute("UPDATE COLLECTION c (tags MAP) SET tags.b = 2 WHERE _id = 'x'")
        #expect(try rows(peer, "SELECT tags FROM c") == [.object(["tags": .object(["a": .int(1), "b": .int(2)])])])
        _ = try peer.execute("UPDATE COLLECTION c (tags MAP) UNSET tags.a WHERE _id = 'x'")
        #expect(try rows(peer, "SELECT tags FROM c") == [.object(["tags": .object(["b": .int(2)])])])
        // Errors are typed, never a crash.
        #expect(throws: SmallPeerError.self) { try peer.execute("SELEC * FROM c") }
        #expect(throws: SmallPeerError.self) { try peer.execute("UPDATE c APPLY hits INCREMENT BY 'x' WHERE _id = 'x'") }
        #expect(throws: SmallPeerError.self) { try peer.execute("SELECT * FROM c WHERE a = :missing") }
        #expect(throws: SmallPeerError.self) { try peer.execute("CREATE INDEX i ON c (a)") }
    }

    @Test func idLookups_fastPathAndFullScan_agree() throws {
        let dir = TempDirectory()
        defer { dir.cleanup() }
        let peer = try openPeer(dir.path)
        _ = try peer.execute("INSERT INTO c DOCUMENTS ({'_id': 'b', 'n': 2}), ({'_id': 'a', 'n': 1}), ({'_id': {'k': 1}, 'n': 3})")
        #expect(try rows(peer, "SELECT n FROM c WHERE _id = :id", ["id": "a"]) == [["n": 1]])
        #expect(try rows(peer, "SELECT n FROM c WHERE n > 1 AND 'b' = _id") == [["n": 2]])
        #expect(try rows(peer, "SELECT n FROM c WHERE _id = 'a' AND n > 1").isEmpty)
        #expect(try rows(peer, "SELECT n FROM c WHERE _id = 'zz'").isEmpty)
        #expect(try rows(peer, "SELECT n FROM c WHERE _id = :id", ["id": ["k": 1]]) == [["n": 3]])
        #expect(try rows(peer, "SELECT n FROM c WHERE _id = 'a' OR _id = 'b' ORDER BY n") == [["n": 1], ["n": 2]])
        // Scans come in _id order (strings before objects), without ORDER BY.
        #expect(try rows(peer, "SELECT n FROM c") == [["n": 1], ["n": 2], ["n": 3]])
        _ = try peer.execute("EVICT FROM c WHERE _id = 'a'")
        #expect(try rows(peer, "SELECT n FROM c") == [["n": 2], ["n": 3]])
    }

    @Test func nonStrictMode_dotPathsWriteMapKeys() throws {
        let dir = TempDirectory()
        defer { dir.cleanup() }
        let peer = try openPeer(dir.path, strict: false)
        _ = try peer.execute("INSERT INTO c DOCUMENTS ({'_id': 'x', 'm': {'a': 1}})")
        _ = try peer.execute("UPDATE c SET m.b = 2 WHERE _id = 'x'")
        #expect(try rows(peer, "SELECT m FROM c") == [.object(["m": .object(["a": .int(1), "b": .int(2)])])])
    }

    @Test func stateSurvivesRestart_includingSiteIdClockAndOutbox() throws {
        let dir = TempDirectory()
        defer { dir.cleanup() }
        let clock = ManualWallClock()
        var site: UInt64 = 0
        do {
            let peer = try openPeer(dir.path, clock: clock)
            site = peer.siteID.rawValue
            #expect(site != 0)
            for i in 0..<50 {
                clock.advance()
                _ = try peer.execute("INSERT INTO t DOCUMENTS (:d) ON ID CONFLICT DO UPDATE", arguments: ["d": .object(["_id": .string("d\(i % 10)"), "v": .int(Int64(i))])])
            }
            _ = try peer.execute("DELETE FROM t WHERE _id = 'd3'")
            #expect(peer.pendingUploadCount == 10)
            peer.close()
        }
        let clockBehind = ManualWallClock(1_000)  // a wall clock that went backwards across the restart
        let reopened = try openPeer(dir.path, clock: clockBehind)
        #expect(reopened.siteID.rawValue == site)
        #expect(reopened.pendingUploadCount == 10)
        #expect(try rows(reopened, "SELECT v FROM t WHERE _id = 'd9'") == [.object(["v": .int(49)])])
        #expect(try rows(reopened, "SELECT _id FROM t WHERE _id = 'd3'").isEmpty)
        // The persisted HLC keeps new writes ordered after the old ones although the wall clock is behind.
        _ = try reopened.execute("UPDATE t SET v = 100 WHERE _id = 'd9'")
        #expect(try rows(reopened, "SELECT v FROM t WHERE _id = 'd9'") == [.object(["v": .int(100)])])
    }

    @Test func tornTail_isCutOff_andEverythingBeforeItSurvives() throws {
        let dir = TempDirectory()
        defer { dir.cleanup() }
        do {
            let peer = try openPeer(dir.path)
            _ = try peer.execute("INSERT INTO t DOCUMENTS ({'_id': 'a', 'v': 1})")
            _ = try peer.execute("INSERT INTO t DOCUMENTS ({'_id': 'b', 'v': 2})")
            peer.close()
        }
        let logPath = dir.path + "/log"
        let full = try #require(FileManager.default.contents(atPath: logPath))
        // Every cut inside the last record loses exactly that record and nothing before it.
        let records = RecordFraming.split(Array(full)).records
        // A flipped byte in an earlier record is damage, not a torn tail: reported, nothing dropped.
        var middle = Array(full)
        middle[RecordFraming.headerBytes + records[0].count + RecordFraming.headerBytes + 2] ^= 0x40
        _ = FileManager.default.createFile(atPath: logPath, contents: Data(middle))
        #expect { try openPeer(dir.path) } throws: { error in
            if case SmallPeerError.storage(.corrupt) = error { true } else { false }
        }
        let lastStart = full.count - records[records.count - 1].count - RecordFraming.headerBytes
        for cut in [lastStart + 1, lastStart + 4, lastStart + 8, full.count - 1] {
            _ = FileManager.default.createFile(atPath: logPath, contents: full.prefix(cut))
            let peer = try openPeer(dir.path)
            #expect(peer.recoveredTornBytes == cut - lastStart)
            #expect(try rows(peer, "SELECT _id FROM t") == [.object(["_id": .string("a")])])
            peer.close()
        }
        // A flipped byte in the last record (checksum mismatch) is a torn tail too.
        var damaged = Array(full)
        damaged[damaged.count - 3] ^= 0xFF
        _ = FileManager.default.createFile(atPath: logPath, contents: Data(damaged))
        let peer = try openPeer(dir.path)
        #expect(try rows(peer, "SELECT _id FROM t") == [.object(["_id": .string("a")])])
        // Appending after the cut works and survives the next open.
        _ = try peer.execute("INSERT INTO t DOCUMENTS ({'_id': 'c', 'v': 3})")
        peer.close()
        let again = try openPeer(dir.path)
        #expect(try rows(again, "SELECT _id FROM t ORDER BY _id") == [.object(["_id": .string("a")]), .object(["_id": .string("c")])])
    }

    @Test func compaction_writesASnapshot_andStateIsUnchanged() throws {
        let dir = TempDirectory()
        defer { dir.cleanup() }
        let big = String(repeating: "x", count: 4000)
        do {
            let peer = try openPeer(dir.path)
            for i in 0..<400 {  // ~1.6 MB of log: at least one compaction
                _ = try peer.execute("INSERT INTO t DOCUMENTS (:d) ON ID CONFLICT DO UPDATE",
                                     arguments: ["d": .object(["_id": .string("k\(i % 40)"), "i": .int(Int64(i)), "pad": .string(big)])])
            }
            peer.close()
        }
        #expect(FileManager.default.fileExists(atPath: dir.path + "/snapshot"))
        let logSize = try #require(try FileManager.default.attributesOfItem(atPath: dir.path + "/log")[.size] as? Int)
        #expect(logSize < 1_700_000)
        let peer = try openPeer(dir.path)
        #expect(try rows(peer, "SELECT COUNT(*) AS n FROM t") == [.object(["n": .int(40)])])
        #expect(try rows(peer, "SELECT i FROM t WHERE _id = 'k39'") == [.object(["i": .int(399)])])
        #expect(peer.pendingUploadCount == 40)
    }

    @Test func staleLogOfAnOlderGeneration_isIgnored() throws {
        // A crash between the snapshot's rename and the new log's: the old log's commits are in the snapshot.
        let dir = TempDirectory()
        defer { dir.cleanup() }
        do {
            let (storage, _) = try PeerStorage.open(dir.path) { 7 }
            var c = Commit(clock: 1)
            c.checkpoints = [(5, "k", 5)]
            try storage.append(c)
            let oldLog = try #require(FileManager.default.contents(atPath: storage.logPath))
            var s = Commit(clock: 2)
            s.checkpoints = [(5, "k", 9)]
            try storage.compact([s])
            _ = FileManager.default.createFile(atPath: storage.logPath, contents: oldLog)  // as if the log rename never happened
        }
        let (storage, commits) = try PeerStorage.open(dir.path) { 8 }
        #expect(storage.header.site == 7)
        #expect(commits.count == 1)
        #expect(commits.first?.checkpoints.first?.txn == 9)
    }

    @Test func damagedLogHeader_isReportedNotReplaced() throws {
        let dir = TempDirectory()
        defer { dir.cleanup() }
        do {
            let peer = try openPeer(dir.path)
            _ = try peer.execute("INSERT INTO t DOCUMENTS ({'_id': 'a'})")
            peer.close()
        }
        var bytes = Array(try #require(FileManager.default.contents(atPath: dir.path + "/log")))
        bytes[9] ^= 0x55  // inside the header record's payload: its checksum no longer matches
        _ = FileManager.default.createFile(atPath: dir.path + "/log", contents: Data(bytes))
        #expect {
            try openPeer(dir.path)
        } throws: { error in
            if case SmallPeerError.storage(.corrupt) = error { true } else { false }
        }
    }

    @Test func seededDamage_neverCrashes_opensOrReportsCorruption() throws {
        let dir = TempDirectory()
        defer { dir.cleanup() }
        do {
            let peer = try openPeer(dir.path)
            for i in 0..<20 { _ = try peer.execute("INSERT INTO t DOCUMENTS (:d)", arguments: ["d": .object(["_id": .string("k\(i)"), "m": .object(["a": .int(Int64(i))])])]) }
            peer.close()
        }
        let original = Array(try #require(FileManager.default.contents(atPath: dir.path + "/log")))
        var rng = SeededRandom(seed: 0xD15C)
        var opened = 0, refused = 0
        for _ in 0..<200 {
            var bytes = original
            for _ in 0...rng.below(6) { bytes[rng.below(bytes.count)] = UInt8(truncatingIfNeeded: rng.next()) }
            if rng.below(4) == 0 { bytes = Array(bytes.prefix(rng.below(bytes.count))) }
            _ = FileManager.default.createFile(atPath: dir.path + "/log", contents: Data(bytes))
            do {
                let peer = try openPeer(dir.path)
                // Whatever survived is a prefix of the history: documents k0 ..< kN.
                let ids = try rows(peer, "SELECT _id FROM t").compactMap { $0["_id"] }
                #expect(Set(ids) == Set((0..<ids.count).map { Value.string("k\($0)") }))
                peer.close()
                opened += 1
            } catch SmallPeerError.storage(.corrupt) {
                refused += 1
            }
        }
        #expect(opened + refused == 200)
    }

    @Test func lockFile_keepsASecondOpenerOut() throws {
        let dir = TempDirectory()
        defer { dir.cleanup() }
        let peer = try openPeer(dir.path)
        #expect(throws: SmallPeerError.storage(.locked(path: dir.path + "/LOCK"))) { try openPeer(dir.path) }
        peer.close()
        let again = try openPeer(dir.path)
        again.close()
    }

    @Test func crc32_matchesTheStandardCheckValue() {
        #expect(CRC32.checksum(Array("123456789".utf8)) == 0xCBF4_3926)  // IEEE 802.3 / zlib check value
        #expect(CRC32.checksum(Array("123456789".utf8)[2...]) == CRC32.checksum(Array("3456789".utf8)))
        #expect(CRC32.checksum([UInt8]()) == 0)
    }

    @Test func recordCodec_roundTripsEveryField() throws {
        var c = Commit(clock: 42)
        var doc = try CRDTFixtures.document("a")
        c.documents = [(.init(collection: "c", id: .string("a")), .replace(doc)),
                       (.init(collection: "c", id: .object(["k": .int(1)])), .evict)]
        let before = doc.versionVector
        doc = try CRDTFixtures.edit(doc)
        c.documents.append((.init(collection: "c", id: .string("a")), .merge(doc.delta(since: before))))
        c.outbox = [(0, .init(collection: "c", id: .string("a")), before), (0, .init(collection: "c", id: .string("z")), nil),
                    (7, .init(collection: "c", id: .string("a")), VersionVector()), (8, .init(collection: "c", id: .string("b")), nil)]
        c.checkpoints = [(0, "q\u{0}{}", 77), (7, "q", 78)]
        c.linkedServers = [7, 8]
        c.nextUploadSeq = 9
        let decoded = try PeerRecordCodec.decode(PeerRecordCodec.encode(c)[...])
        guard case .commit(let d) = decoded else { Issue.record("not a commit"); return }
        #expect(d.clock == 42 && d.nextUploadSeq == 9 && d.linkedServers == [7, 8])
        #expect(d.documents.count == 3 && d.outbox.count == 4)
        #expect(d.outbox.map(\.server) == [0, 0, 7, 8])
        #expect(d.outbox[0].base == before && d.outbox[1].base == nil && d.outbox[2].base == VersionVector() && d.outbox[3].base == nil)
        #expect(d.checkpoints.map(\.server) == [0, 7] && d.checkpoints.map(\.key) == ["q\u{0}{}", "q"] && d.checkpoints.map(\.txn) == [77, 78])
        // Garbage never crashes the decoder.
        var rng = SeededRandom(seed: 0x5eed)
        let bytes = PeerRecordCodec.encode(c)
        for _ in 0..<500 {
            var m = bytes
            m[Int.random(in: 0..<m.count, using: &rng)] = UInt8.random(in: 0...255, using: &rng)
            _ = try? PeerRecordCodec.decode(m[...])
            _ = try? PeerRecordCodec.decode(m.prefix(Int.random(in: 0..<m.count, using: &rng)))
        }
    }
}
