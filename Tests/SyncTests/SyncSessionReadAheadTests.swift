import Testing
import Values
@testable import Sync
@testable import SyncProtocol

/// Initial-sync pages read ahead (performance-history.md, "Sync"): once the store says where a page ends
/// (`.pageBoundary`), the session asks for the next one while the first is decoded and sent; at
/// most two reads are in flight, pages are sent in id order, and a page read ahead is never sent
/// without credit (it is dropped and read again).
@Suite struct SyncSessionReadAheadTests {
    static func readPages(_ actions: [SyncSessionAction]) -> [(after: Value?, maxBytes: Int)] {
        actions.compactMap { if case .readPage(_, _, _, let after, _, let maxBytes) = $0 { (after, maxBytes) } else { nil } }
    }

    static func ids(_ messages: [SyncMessage]) -> [Value] {
        messages.flatMap { m -> [Value] in if case .documents(_, let entries) = m { entries.map(\.document.id) } else { [] } }
    }

    @Test func readAhead_twoReadsAtMost_inOrder() {
        var h = SessionHarness.ready(configure: { $0.pageRows = 2 })
        _ = h.receive(.subscribe(Subscribe(id: 1, query: "SELECT * FROM cars")))
        // Read 1 ends at car-2: read 2 starts there, budgeted with the credit read 1 will use
        // (its states plus an estimated 48 + 4 bytes of entry per row).
        let a = h.feed(.pageBoundary(subscription: 1, generation: 1, PageBoundary(nextAfter: "car-2", isLast: false, rows: 2, stateBytes: 1000)))
        #expect(Self.readPages(a).map(\.after) == ["car-2"])
        #expect(Self.readPages(a).map(\.maxBytes) == [65536 - 1000 - 2 * 52])
        // Read 2's boundary: a third read waits until read 1's page is out.
        #expect(Self.readPages(h.feed(.pageBoundary(subscription: 1, generation: 1, PageBoundary(nextAfter: "car-4", isLast: false, rows: 2, stateBytes: 10)))).isEmpty)
        let b = h.feed(.page(subscription: 1, generation: 1, DocumentPage(
            rows: [.init(id: "car-1", state: [1, 2]), .init(id: "car-2", state: [3])], txn: 10, isLast: false, nextAfter: "car-2")))
        #expect(Self.ids(sent(b)) == ["car-1", "car-2"])
        #expect(Self.readPages(b).map(\.after) == ["car-4"], "read 3 goes out as read 1's page leaves")
        let c = h.feed(.page(subscription: 1, generation: 1, DocumentPage(
            rows: [.init(id: "car-3", state: [4]), .init(id: "car-4", state: [5])], txn: 11, isLast: false, nextAfter: "car-4")))
        #expect(Self.ids(sent(c)) == ["car-3", "car-4"])
        #expect(Self.readPages(c).isEmpty, "read 3 has not said where it ends")
        #expect(Self.readPages(h.feed(.pageBoundary(subscription: 1, generation: 1, PageBoundary(nextAfter: "car-4", isLast: true, rows: 0, stateBytes: 0)))).isEmpty,
                "nothing after the last page")
        let d = h.feed(.page(subscription: 1, generation: 1, DocumentPage(rows: [], txn: 12, isLast: true, nextAfter: "car-4")))
        #expect(sent(d) == [.synced(subscription: 1, checkpoint: 10)], "the first page's snapshot")
        #expect(h.session.held.count == 4 && h.session.pagesReadAhead == 2 && h.session.pageReads.isEmpty)
        #expect(h.session.outstanding == nil)
    }

    /// The estimate of read 1's share was low (long ids): when read 2's page arrives the credit is
    /// gone. It is not sent or kept; the same page is read again when the peer grants credit.
    @Test func aPageReadAhead_isDroppedWithoutCredit_andReadAgain() {
        var h = SessionHarness.ready(configure: { $0.pageRows = 2 })
        _ = h.receive(.subscribe(Subscribe(id: 1, query: "SELECT * FROM cars")))
        let long = { (n: Int) -> Value in .string(String(n) + String(repeating: "i", count: 2000)) }
        let a = h.feed(.pageBoundary(subscription: 1, generation: 1, PageBoundary(nextAfter: long(2), isLast: false, rows: 2, stateBytes: 63_000)))
        #expect(Self.readPages(a).map(\.after) == [long(2)])
        let b = h.feed(.page(subscription: 1, generation: 1, DocumentPage(
            rows: [.init(id: long(1), state: Array(repeating: 1, count: 31_500)), .init(id: long(2), state: Array(repeating: 2, count: 31_500))],
            txn: 5, isLast: false, nextAfter: long(2))))
        #expect(Self.ids(sent(b)) == [long(1), long(2)])
        #expect(h.session.credit <= 0)
        let c = h.feed(.page(subscription: 1, generation: 1, DocumentPage(rows: [.init(id: long(3), state: [3])], txn: 6, isLast: true, nextAfter: long(3))))
        #expect(sent(c).isEmpty && Self.readPages(c).isEmpty, "dropped, and nothing read without credit")
        #expect(h.session.pagesDroppedWithoutCredit == 1 && h.session.outstanding == nil)
        let d = h.receive(.credit(bytes: 100_000))
        #expect(Self.readPages(d).map(\.after) == [long(2)], "read again from where the peer stands")
        let e = h.feed(.page(subscription: 1, generation: 1, DocumentPage(rows: [.init(id: long(3), state: [3])], txn: 7, isLast: true, nextAfter: long(3))))
        #expect(Self.ids(sent(e)) == [long(3)])
        #expect(sent(e).last == .synced(subscription: 1, checkpoint: 5))
    }

    /// Unsubscribing with two reads in flight: both answers are dropped, and the next
    /// subscription's first read waits for them (every answer meets its own read).
    @Test func unsubscribeWithAReadAhead_dropsBothPages_beforeTheNextSubscriptionReads() {
        var h = SessionHarness.ready(configure: { $0.pageRows = 2 })
        _ = h.receive(.subscribe(Subscribe(id: 1, query: "SELECT * FROM cars")))
        _ = h.feed(.pageBoundary(subscription: 1, generation: 1, PageBoundary(nextAfter: "car-2", isLast: false, rows: 2, stateBytes: 2)))
        _ = h.receive(.unsubscribe(id: 1))
        #expect(Self.readPages(h.receive(.subscribe(Subscribe(id: 1, query: "SELECT * FROM cars")))).isEmpty)
        let a = h.feed(.page(subscription: 1, generation: 1, DocumentPage(rows: [.init(id: "car-1", state: [1]), .init(id: "car-2", state: [2])], txn: 3, isLast: false, nextAfter: "car-2")))
        #expect(sent(a).isEmpty && Self.readPages(a).isEmpty)
        let b = h.feed(.page(subscription: 1, generation: 1, DocumentPage(rows: [.init(id: "car-3", state: [3])], txn: 3, isLast: true, nextAfter: "car-3")))
        #expect(sent(b).isEmpty)
        guard case .readPage(1, 2, _, nil, _, _)? = b.first else { Issue.record("\(b)"); return }
        #expect(h.session.held.isEmpty)
    }
}
