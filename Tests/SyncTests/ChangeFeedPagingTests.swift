import BigPeerTestSupport
import Postgres
import Store
import Synchronization
import Testing
import Values
@testable import Store
@testable import Sync
@testable import SyncProtocol

/// Large transactions are read in bounded pages by a (txn, seq) position — by the store, the
/// change feed and live sessions — and still arrive complete and in order; nothing is ever told
/// a transaction is complete before its last row was read.
@Suite struct ChangeFeedPagingTests {

    /// One statement inserting documents `b<lo>`…`b<hi-1>` (~`pad` bytes each), or updating them.
    static func bulk(_ range: Range<Int>, color: String, pad: Int = 0) -> (String, [String: Value]) {
        var placeholders: [String] = []
        var arguments: [String: Value] = [:]
        let padding = Value.string(String(repeating: "p", count: pad))
        for i in range {
            placeholders.append("(:d\(i))")
            arguments["d\(i)"] = ["_id": .string("b\(i)"), "color": .string(color), "n": .int(Int64(i)), "pad": padding]
        }
        return ("INSERT INTO bulk DOCUMENTS \(placeholders.joined(separator: ", ")) ON ID CONFLICT DO UPDATE", arguments)
    }

    static let pointRead = "SELECT * FROM bulk WHERE _id = :id"

    @Test func theStore_pagesALargeTransaction_byRowsAndBytes_completeAndInOrder() async throws {
        try await withTwoStores { a, _ in
            let t0 = try await a.execute("INSERT INTO bulk DOCUMENTS ({_id: 'first'})").transactionID
            let (sql, arguments) = Self.bulk(0..<2000, color: "red", pad: 1000)
            let t1 = try await a.execute(sql, arguments: arguments).transactionID
            let t2 = try await a.execute("INSERT INTO bulk DOCUMENTS ({_id: 'last'})").transactionID
            for (maxRows, maxBytes) in [(300, 64 << 20), (5000, 20_000)] {
                var position = ChangeLogPosition.end(of: t0 - 1)
                var rows: [ChangeLogRow] = []
                var pages = 0
                while true {
                    let page = try await a.changeFeed.readChangeLog(after: position, maxTransactions: 100, maxRows: maxRows, maxBytes: maxBytes)
                    pages += 1
                    #expect(page.rows.count <= maxRows)
                    #expect(page.rows.count == 1 || page.rows.reduce(0) { $0 + ($1.state?.count ?? 0) } <= maxBytes + 2000,
                            "cut near the byte bound")
                    #expect(page.end > position && page.rows.allSatisfy { $0.position > position && $0.position <= page.end })
                    // The page's end says which transactions are complete, and only those.
                    if page.end.completeThrough >= t1 { #expect(rows.count + page.rows.count >= 2001) }
                    else if page.end.txn == t1 { #expect(!page.end.isTransactionEnd && page.end == page.rows.last?.position) }
                    rows += page.rows
                    position = page.end
                    if !page.more { break }
                    #expect(pages < 10_000)
                }
                #expect(position == .end(of: t2))
                #expect(rows.map(\.txn) == [t0] + Array(repeating: t1, count: 2000) + [t2])
                #expect(rows.filter { $0.txn == t1 }.map(\.seq) == (0..<2000).map(Int32.init), "every row once, in order")
                #expect(rows.filter { $0.txn == t1 }.map(\.id) == (0..<2000).map { .string("b\($0)") })
                #expect(rows.allSatisfy { $0.value != nil && $0.state != nil })
                #expect(pages >= 7, "cut into pages (\(pages))")
            }
            // Skimming (keys only) pages the same way.
            var position = ChangeLogPosition.end(of: t0)
            var skimmed = 0
            while true {
                let page = try await a.changeFeed.skimChangeLog(after: position, maxRows: 700)
                #expect(page.rows.count <= 700 && page.rows.allSatisfy { $0.value == nil && $0.state == nil })
                skimmed += page.rows.count
                position = page.end
                if !page.more { break }
            }
            #expect(skimmed == 2001 && position == .end(of: t2))
        }
    }

    /// Another instance's bulk, read by a feed with a listener (values into the ring) in pages of
    /// 64 rows: the listener hears only transaction ends, and a session reading the feed gets every
    /// row in order in batches of at most 50, whether the ring holds the transaction or not.
    @Test(arguments: [20_000, 1000])
    func aListenedFeed_readsALargeTransactionInPieces_andAnnouncesOnlyItsEnd(ringEntries: Int) async throws {
        try await withTwoStores(changeFeed: ChangeFeed.Limits(maxRingEntries: ringEntries, readRows: 64, sessionRows: 50)) { a, b in
            let feed = a.changeFeed
            try await feed.start()
            let t0 = feed.head
            let heard = MutexBox<[(head: Int64, position: ChangeLogPosition)]>([])
            let token = feed.addListener { head in
                // Called outside the feed's lock: the position it has read to is already past `head`.
                let position = feed.state.withLock { $0.position }
                heard.withLock { $0.append((head, position)) }
            }
            defer { feed.removeListener(token) }
            let (sql, arguments) = Self.bulk(0..<5000, color: "red")
            let t1 = try await b.execute(sql, arguments: arguments).transactionID
            let t2 = try await b.execute("INSERT INTO bulk DOCUMENTS ({_id: 'after'})").transactionID
            feed.noteNotified(t2)
            await feed.refresh(readRequired: false)
            #expect(feed.head == t2)
            let heads = heard.withLock { $0 }
            // t1's last page may also hold t2 (then t1 is never announced on its own); never a head
            // before t1's last row was read, and only increasing.
            #expect(heads.last?.head == t2 && heads.allSatisfy { $0.head == t1 || $0.head == t2 })
            #expect(heads.map(\.head) == heads.map(\.head).sorted() && Set(heads.map(\.head)).count == heads.count)
            #expect(heads.allSatisfy { $0.position.completeThrough >= $0.head })
            #expect((feed.cachedRead(after: .end(of: t0)) != nil) == (ringEntries > 5000))
            if ringEntries > 5000 {
                let one = feed.cachedRead(after: .end(of: t0), maxBytes: 1)
                #expect(one?.rows.count == 1 && one?.end == one?.rows.first?.position, "a byte budget cuts the ring read too")
            }
            // A session's reads: bounded batches, every row once and in order, `through` only at the end.
            var position = ChangeLogPosition.end(of: t0)
            var entries: [LogEntry] = []
            while position.completeThrough < feed.head {
                let batch = LogBatch(try await feed.read(after: position))
                #expect(batch.entries.count <= 50 && batch.end > position)
                if batch.through >= t1 { #expect(entries.count + batch.entries.count >= 5000) }
                entries += batch.entries
                position = batch.end
            }
            #expect(entries.map(\.txn) == Array(repeating: t1, count: 5000) + [t2])
            #expect(entries.prefix(5000).map(\.seq) == (0..<5000).map(Int32.init))
            #expect(entries.allSatisfy { $0.value?["color"] == "red" || $0.document.id == "after" })
        }
    }

    /// A feed with nobody listening: another instance's bulk is skimmed (keys only, bounded pages)
    /// and invalidates every cached document; the instance's own bulk is not read at all.
    @Test func withNobodyListening_aForeignBulkInvalidates_andAnOwnBulkIsNotReadBack() async throws {
        try await withTwoStores(changeFeed: ChangeFeed.Limits(readRows: 64, skimRows: 100)) { a, b in
            let feed = a.changeFeed
            try await feed.start()
            let (create, createArguments) = Self.bulk(0..<5000, color: "red")
            let t1 = try await b.execute(create, arguments: createArguments).transactionID
            feed.noteNotified(t1)
            await feed.refresh(readRequired: false)
            #expect(feed.head == t1 && a.readCache.statistics.appliedThrough == t1)
            let probe = ["b0", "b777", "b4999"]
            for id in probe { _ = try await a.execute(Self.pointRead, arguments: ["id": .string(id)]) }
            let hits = a.readCache.statistics.hits
            for id in probe { #expect(try await a.execute(Self.pointRead, arguments: ["id": .string(id)]).items.first?["color"] == "red") }
            #expect(a.readCache.statistics.hits == hits + probe.count, "cached")

            // Another instance's bulk: skimmed in pages of 100 rows, every cached copy dropped.
            let (green, greenArguments) = Self.bulk(0..<5000, color: "green")
            let t2 = try await b.execute(green, arguments: greenArguments).transactionID
            feed.noteNotified(t2)
            await feed.refresh(readRequired: false)
            #expect(feed.head == t2 && a.readCache.statistics.appliedThrough == t2)
            #expect(feed.cachedRead(after: .end(of: t1)) == nil, "skimmed: no values in the ring")
            for id in probe {
                let r = try await a.execute(Self.pointRead, arguments: ["id": .string(id)])
                #expect(r.items.first?["color"] == "green" && r.transactionID >= t2)
            }

            // The instance's own bulk: its keys reached the cache at commit; the feed takes the
            // recorded number instead of reading 5000 rows back.
            for id in probe { _ = try await a.execute(Self.pointRead, arguments: ["id": .string(id)]) }  // cached (green)
            let (blue, blueArguments) = Self.bulk(0..<5000, color: "blue")
            let t3 = try await a.execute(blue, arguments: blueArguments).transactionID
            for id in probe {
                let r = try await a.execute(Self.pointRead, arguments: ["id": .string(id)])
                #expect(r.items.first?["color"] == "blue" && r.transactionID >= t3, "own write read back at once")
            }
            feed.noteNotified(t3)
            await feed.refresh(readRequired: false)
            #expect(feed.head == t3 && a.readCache.statistics.appliedThrough == t3)
            let stillRecorded = feed.state.withLock { $0.own.take(after: t3 - 1, through: t3) }
            #expect(!stillRecorded, "the feed took t3 from OwnCommits (a read would have left it recorded)")
            for id in probe { #expect(try await a.execute(Self.pointRead, arguments: ["id": .string(id)]).items.first?["color"] == "blue") }
        }
    }

    /// The record of an own commit applies its keys to the read cache before the feed can take it:
    /// once taken, the cache's position may pass the transaction with no read of the change log.
    @Test func recordingAnOwnCommit_invalidatesItsKeys_beforeTheFeedCanTakeIt() async throws {
        try await withTwoStores { a, _ in
            let feed = a.changeFeed
            a.readCache.enable(through: 1)
            feed.state.withLock { $0.head = 1; $0.position = .end(of: 1) }
            let key = DocumentReadCache.Key(collection: "c", id: "x")
            a.readCache.insert(key, json: Array(#"{"_id":"x"}"#.utf8), txn: 1)
            #expect(a.readCache.lookup(key) != nil)
            var changes: [WriteTransaction.ChangeRecord] = []
            for i in 0..<(3 * ChangeFeed.ownCommitKeysPerLock) {  // several lock holds
                changes.append(.init(key: DocumentKey(collection: "c", id: .string(i == 5000 ? "x" : "k\(i)")), kind: "upsert"))
            }
            feed.committed(Committed(transaction: 2, changes: changes))
            #expect(a.readCache.lookup(key) == nil, "dropped at record time")
            a.readCache.insert(key, json: Array(#"{"_id":"x"}"#.utf8), txn: 1)
            #expect(a.readCache.lookup(key) == nil, "a value read before the commit is refused")
            await feed.simulateNotification(2)
            #expect(feed.head == 2 && feed.reads == 0, "taken, not read")
            #expect(a.readCache.statistics.appliedThrough == 2)
            let taken = feed.state.withLock { $0.own.take(after: 2, through: 3) }
            #expect(!taken, "3 was not recorded")
        }
    }
}
