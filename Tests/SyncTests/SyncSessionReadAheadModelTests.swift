import Testing
import Values
@testable import Sync
@testable import SyncProtocol

/// The session with page read-ahead, driven by a model of its driver and peer in seeded random
/// interleavings: page queries finish in any order (each reports its boundary when it does), pages
/// are delivered in the order they were asked for (as `SyncConnection.readPage` does), the peer
/// grants back the bytes of each message it takes, and a writer inserts and deletes documents
/// between reads. Whatever the interleaving, an initial sync must end in `synced` once nothing is
/// left in flight (a session waiting for an answer that will never come is a stall), and the
/// pages must send each document at most once, in id order.
@Suite struct SyncSessionReadAheadModelTests {
    /// A `readPage` asked for and not yet answered with its page.
    struct Read {
        var subscription: UInt32, generation: UInt64, after: Value?, limit: Int, maxBytes: Int
        /// Set when its query ran (its boundary was delivered then).
        var page: DocumentPage?
    }

    struct Model {
        var h: SessionHarness
        var rng: SeededRandom
        /// id → state size: the collection as the database holds it now.
        var docs: [String: Int] = [:]
        var reads: [Read] = []
        /// Messages sent and not yet taken by the peer (it grants their size back when it takes one).
        var inFlight: [[UInt8]] = []
        var txn: Int64 = 1
        var generation: UInt64 = 1
        var log: [String] = []
        var sentIDs: [UInt64: [String]] = [:]
        var synced: Set<UInt64> = []
        /// Ids of up to 3,000 bytes: the session's estimate of a page's entries is then low, so a
        /// page read ahead can find the credit gone when it arrives.
        var longIDs = false

        mutating func apply(_ actions: [SyncSessionAction]) {
            for action in actions {
                switch action {
                case .readPage(let sub, let gen, _, let after, let limit, let maxBytes):
                    reads.append(Read(subscription: sub, generation: gen, after: after, limit: limit, maxBytes: maxBytes))
                case .send(let bytes, let m):
                    if m.consumesCredit { inFlight.append(bytes) }
                    switch m {
                    case .documents(_, let entries):
                        for e in entries { if case .string(let s) = e.document.id { sentIDs[generation, default: []].append(s) } }
                    case .synced: synced.insert(generation)
                    default: break
                    }
                case .close(let code, let reason):
                    Issue.record("closed \(code) \(reason)")
                default: break
                }
            }
        }

        /// What the database answers for `read` now (as `readSyncPage`): at most `limit` rows after
        /// `after`, cut where the states' running size passes `maxBytes` (the first row stays).
        func query(_ read: Read) -> DocumentPage {
            let after: String? = if case .string(let s)? = read.after { s } else { nil }
            let candidates = docs.keys.sorted().filter { after == nil || $0 > after! }.prefix(read.limit)
            var rows: [DocumentPage.Row] = []
            var before = 0
            for id in candidates where before < read.maxBytes {
                let size = docs[id] ?? 0
                rows.append(.init(id: .string(id), state: Array(repeating: 7, count: size)))
                before += size
            }
            let isLast = candidates.count < read.limit && rows.count == candidates.count
            return DocumentPage(rows: rows, txn: txn, isLast: isLast, nextAfter: rows.last?.id ?? read.after)
        }

        /// One random step; false when none is possible (nothing in flight anywhere).
        mutating func step() -> Bool {
            var choices: [Int] = []
            if reads.contains(where: { $0.page == nil }) { choices += [0, 0] }
            if reads.first?.page != nil { choices += [1, 1] }
            if !inFlight.isEmpty { choices += [2, 2] }
            if choices.isEmpty { return false }
            choices += [3]
            switch choices.randomElement(using: &rng)! {
            case 0:  // a query finishes: its boundary is reported at once
                let waiting = reads.indices.filter { reads[$0].page == nil }
                let i = waiting.randomElement(using: &rng)!
                let page = query(reads[i])
                reads[i].page = page
                log.append("boundary \(i) after \(String(describing: reads[i].after)) -> \(String(describing: page.nextAfter)) last \(page.isLast)")
                apply(h.feed(.pageBoundary(subscription: reads[i].subscription, generation: reads[i].generation, PageBoundary(
                    nextAfter: page.nextAfter, isLast: page.isLast, rows: page.rows.count, stateBytes: page.rows.reduce(0) { $0 + $1.state.count }))))
            case 1:  // the oldest read's page, decoded, is delivered
                let read = reads.removeFirst()
                log.append("page after \(String(describing: read.after))")
                apply(h.feed(.page(subscription: read.subscription, generation: read.generation, read.page!)))
            case 2:  // the peer takes a message and grants its size back
                let bytes = inFlight.removeFirst()
                log.append("credit \(bytes.count)")
                apply(h.receive(.credit(bytes: UInt64(bytes.count))))
            default:  // the writer commits: inserts a document or deletes one
                txn += 1
                if Bool.random(using: &rng) || docs.isEmpty {
                    docs[SyncSessionReadAheadModelTests.id(Int.random(in: 0..<400, using: &rng), longIDs: longIDs, &rng)] = Int.random(in: 1...20_000, using: &rng)
                } else {
                    docs[docs.keys.randomElement(using: &rng)!] = nil
                }
                apply(h.feed(.logHead(txn)))
            }
            return true
        }
    }

    static func id(_ n: Int, longIDs: Bool, _ rng: inout SeededRandom) -> String {
        let digits = String(n)
        let pad = longIDs ? String(repeating: "i", count: Int.random(in: 0...3000, using: &rng)) : ""
        return "d" + String(repeating: "0", count: max(0, 4 - digits.count)) + digits + pad
    }

    /// 300 seeded runs, half with long ids; together they must have read pages ahead and dropped
    /// some for want of credit, or the test no longer covers what it is for.
    @Test func readAhead_neverStalls_andSendsEachDocumentOnceInOrder() {
        var ahead = 0, dropped = 0
        for seed in 0..<300 as Range<UInt64> {
            let (a, d) = Self.run(seed: seed)
            ahead += a
            dropped += d
        }
        #expect(ahead > 1000)
        #expect(dropped > 10)
    }

    /// One initial sync under a seeded interleaving; returns the pages read ahead and dropped.
    static func run(seed: UInt64) -> (ahead: Int, dropped: Int) {
        var rng = SeededRandom(seed: 0xA11EAD + seed)
        let pageRows = Int.random(in: 1...4, using: &rng)
        var m = Model(h: SessionHarness.ready(credit: 65536, configure: { $0.pageRows = pageRows }), rng: rng)
        m.longIDs = seed % 2 == 1
        for n in stride(from: 0, to: 400, by: 5) where Bool.random(using: &m.rng) {
            m.docs[Self.id(n, longIDs: m.longIDs, &m.rng)] = Int.random(in: 1...20_000, using: &m.rng)
        }
        m.apply(m.h.receive(.subscribe(Subscribe(id: 1, query: "SELECT * FROM cars"))))
        var steps = 0
        while m.step() {
            steps += 1
            if steps > 100_000 { Issue.record("seed \(seed): no end"); break }
        }
        let s = m.h.session
        #expect(m.synced.contains(1), """
            seed \(seed) stalled: outstanding \(String(describing: s.outstanding)), pageReads \(s.pageReads), credit \(s.credit), \
            phases \(s.subscriptions.values.map(\.phase)); last steps \(m.log.suffix(12))
            """)
        let ids = m.sentIDs[1] ?? []
        #expect(ids == ids.sorted() && Set(ids).count == ids.count, "seed \(seed)")
        return (s.pagesReadAhead, s.pagesDroppedWithoutCredit)
    }
}
