// The serving small peer's in-memory change log (PeerChangeLog.swift): whole commits dropped past
// its bounds, reads cut inside a commit, and which checkpoints it takes for its own.
@testable import SmallPeer
import Sync
import SyncProtocol
import Testing
import Values

@Suite struct PeerChangeLogTests {
    static func rows(_ n: Int) -> [PeerChangeLog.Row] {
        (0..<n).map { i in
            PeerChangeLog.Row(position: ChangeLogPosition(txn: 0, seq: Int32(i)), document: DocumentRef(collection: "c", id: .int(Int64(i))),
                              kind: .upsert, delta: [1, 2, 3], origin: nil)
        }
    }

    static func positions(_ read: (rows: ArraySlice<PeerChangeLog.Row>, end: ChangeLogPosition)?) -> [String] {
        read?.rows.map { "\($0.position)" } ?? ["unreachable"]
    }

    @Test func keepsWholeCommits_readsCutInsideOne_andReachesOnlyItsOwnNumbers() throws {
        var log = PeerChangeLog(head: 100, maxRows: 5, maxBytes: 1 << 20)
        log.append(txn: 110, Self.rows(3))  // before the first session: only the numbers move
        #expect(log.count == 0 && log.head == 110 && log.reaches(back: 110) && !log.reaches(back: 100))

        log.keepsRows = true
        log.append(txn: 120, Self.rows(2))
        log.append(txn: 130, Self.rows(3))
        log.append(txn: 125, Self.rows(1))  // not above the head: refused
        #expect(log.count == 5 && log.head == 130)
        #expect([110, 119, 120, 129, 130].allSatisfy { log.reaches(back: $0) }, "from, commits, and just below a commit")
        #expect(![105, 115, 125, 131].contains { log.reaches(back: $0) }, "numbers this log never handed out")

        // Three rows end inside commit 130: the read ends at its row, the next one finishes it.
        let first = try #require(log.read(after: .end(of: 110), maxRows: 3, maxBytes: 1 << 20))
        #expect(Self.positions(first) == ["120/0", "120/1", "130/0"] && first.end == ChangeLogPosition(txn: 130, seq: 0))
        #expect(first.end.completeThrough == 129 && log.reaches(back: first.end.completeThrough))
        let second = log.read(after: first.end, maxRows: 3, maxBytes: 1 << 20)
        #expect(Self.positions(second) == ["130/1", "130/2"] && second?.end == .end(of: 130))
        // The byte bound keeps the first row whatever its size.
        #expect(Self.positions(log.read(after: .end(of: 120), maxRows: 10, maxBytes: 1)) == ["130/0"])

        // Past the bounds the oldest commit goes, whole; a read from before it cannot be served.
        log.append(txn: 140, Self.rows(1))
        #expect(log.count == 4 && !log.reaches(back: 110) && log.reaches(back: 120))
        #expect(Self.positions(log.read(after: .end(of: 110), maxRows: 10, maxBytes: 1 << 20)) == ["unreachable"])
        #expect(Self.positions(log.read(after: .end(of: 140), maxRows: 10, maxBytes: 1 << 20)) == [])
    }
}
