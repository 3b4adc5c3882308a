import Store
import Testing
import Values
@testable import Sync
@testable import SyncProtocol

/// A transaction delivered in pieces (batches that end inside it, credit that runs out inside it):
/// the sans-I/O session sends each row once, keeps its place by (txn, seq), and never sends a
/// checkpoint that covers the transaction before its last row, nor a lower txn after a higher one.
@Suite struct SyncSessionLargeTransactionTests {
    /// Rows 0..<n of transaction 11, car-i each, red (matching), held by the peer, 1000-byte deltas.
    static func rows(_ range: Range<Int>) -> [LogEntry] {
        range.map { i in
            LogEntry(txn: 11, seq: Int32(i), document: DocumentRef(collection: "cars", id: .string("car-\(i)")), kind: .upsert,
                     delta: [UInt8](repeating: UInt8(i % 251), count: 1000), value: ["_id": .string("car-\(i)"), "color": "red"])
        }
    }

    /// Synced on red cars at txn 10 with car-0...car-199 held (their deltas are sent).
    static func session(credit: UInt64, max: UInt64 = 1 << 20) -> SessionHarness {
        var h = SessionHarness(configure: { $0.pageRows = 500 })
        _ = h.receive(.hello(SessionHarness.hello(credit: credit, max: max)))
        _ = h.feed(.authenticated(.accept(.everything)))
        _ = h.receive(.subscribe(Subscribe(id: 1, query: "SELECT * FROM cars WHERE color = 'red'")))
        _ = h.feed(.page(subscription: 1, generation: 1, DocumentPage(
            rows: (0..<200).map { .init(id: .string("car-\($0)"), state: [1]) }, txn: 10, isLast: true)))
        _ = h.receive(.credit(bytes: 1 << 20))  // what the initial sync used
        return h
    }

    static func changes(_ messages: [SyncMessage]) -> [ChangeEntry] {
        messages.flatMap { m -> [ChangeEntry] in if case .changes(_, let e) = m { e } else { [] } }
    }

    @Test func batchesEndingInsideATransaction_continueAfterTheirLastRow_andCheckpointOnlyAtItsEnd() {
        var h = Self.session(credit: 1 << 20)
        var all: [SyncMessage] = []
        let a = h.feed(.logHead(11))
        #expect(a.last == .readLog(after: .end(of: 10)))
        // Rows 0..<80 of 200, then 80..<150, then the rest with transaction 12's row.
        let b = h.feed(.log(LogBatch(entries: Self.rows(0..<80), end: ChangeLogPosition(txn: 11, seq: 79))))
        all += sent(b)
        #expect(h.session.cursor == 10 && h.session.partialSeq == 79)
        #expect(b.last == .readLog(after: ChangeLogPosition(txn: 11, seq: 79)), "reads on from inside the transaction")
        #expect(!sent(b).contains { if case .checkpoint(let t) = $0 { t >= 11 } else { false } })
        // A batch that overlaps what was handled (e.g. read from the ring from an older place) skips it.
        let c = h.feed(.log(LogBatch(entries: Self.rows(60..<150), end: ChangeLogPosition(txn: 11, seq: 149))))
        all += sent(c)
        #expect(h.session.cursor == 10 && h.session.partialSeq == 149)
        let tail = Self.rows(150..<200) + [LogEntry(txn: 12, document: DocumentRef(collection: "cars", id: "other"), kind: .upsert,
                                                    delta: [1], value: ["_id": "other", "color": "blue"])]
        let d = h.feed(.log(LogBatch(entries: tail, through: 12)))
        all += sent(d)
        #expect(h.session.cursor == 12 && h.session.partialSeq == nil)
        #expect(Self.changes(all).map(\.document.id) == (0..<200).map { .string("car-\($0)") }, "every row once, in order")
        #expect(all.last == .checkpoint(txn: 12))
        let checkpoints = all.compactMap { if case .checkpoint(let t) = $0 { t } else { nil } }
        #expect(checkpoints.allSatisfy { $0 == 10 || $0 == 12 })
        var highest: Int64 = 0
        for m in all {
            let t: Int64? = if case .changes(let t, _) = m { t } else if case .checkpoint(let t) = m { t } else { nil }
            if let t { #expect(t >= highest); highest = max(highest, t) }
        }
    }

    @Test func creditRunningOutInsideATransaction_stopsWithinAboutAMessage_andResumesFromTheRow() {
        var h = Self.session(credit: 1 << 20, max: 65536)
        _ = h.feed(.logHead(11))
        // Spend the credit down to 50 KB, then a 200-row (200 KB) transaction arrives whole; the
        // peer takes messages of at most 64 KiB.
        h.session.credit = 50_000
        let a = h.feed(.log(LogBatch(entries: Self.rows(0..<200), through: 11)))
        let first = Self.changes(sent(a))
        let bytes = sent(a).filter(\.consumesCredit).map { $0.encode().count }.reduce(0, +)
        #expect(bytes > 50_000 && bytes <= 50_000 + 2_000, "just past the credit: by one entry (\(bytes))")
        #expect(first.count < 200 && h.session.cursor == 10)
        #expect(h.session.partialSeq == Int32(first.count - 1))
        #expect(!sent(a).contains { if case .checkpoint(let t) = $0 { t >= 11 } else { false } })
        // Credit returns: the session reads on from the row after the last one sent.
        let b = h.receive(.credit(bytes: 1 << 20))
        #expect(b == [.readLog(after: ChangeLogPosition(txn: 11, seq: Int32(first.count - 1)))])
        let c = h.feed(.log(LogBatch(entries: Self.rows(first.count..<200), through: 11)))
        #expect((first + Self.changes(sent(c))).map(\.document.id) == (0..<200).map { .string("car-\($0)") })
        #expect(sent(c).last == .checkpoint(txn: 11) && h.session.cursor == 11 && h.session.partialSeq == nil)
    }

    @Test func aResumeInsideATransaction_rereadsItFromItsStart() {
        var h = Self.session(credit: 1 << 20)
        _ = h.feed(.logHead(11))
        _ = h.feed(.log(LogBatch(entries: Self.rows(0..<80), end: ChangeLogPosition(txn: 11, seq: 79))))
        #expect(h.session.partialSeq == 79)
        _ = h.receive(.subscribe(Subscribe(id: 2, query: "SELECT * FROM cars WHERE color = 'blue'", checkpoint: 10)))
        // The log read in flight answers (nothing new), then the resume is checked.
        let a = h.feed(.log(LogBatch(entries: [], end: ChangeLogPosition(txn: 11, seq: 79))))
        guard case .checkResume(2, let generation, 10)? = a.last else { Issue.record("\(a)"); return }
        _ = h.feed(.resumeChecked(subscription: 2, generation: generation, reachable: true))
        #expect(h.session.cursor == 10 && h.session.partialSeq == nil, "the resumed subscription needs all of 11")
    }
}
