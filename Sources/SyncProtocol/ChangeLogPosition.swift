// A place in a sync peer's change log: what the store behind a sync session (Sync's `SyncStorage`)
// and its sessions count positions in. The PostgreSQL store (Store) and a small peer's in-memory
// log (SmallPeer) both use it, so it lives with the protocol types both see.
//
// A position is a place between two rows, in the log's (txn, seq) order:
//
//        txn 7           txn 8 (3 rows)              txn 9
//   ... ─┬──────┬──────┬───────┬───────┬───────┬──────┬─────
//        │ 7/0  │ 7/1  │  8/0  │  8/1  │  8/2  │ 9/0  │ ...
//   ... ─┴──────┴──────┴───────┴───────┴───────┴──────┴─────
//                      ▲               ▲               ▲
//              end of 7: (7, max)   (8, 1): 8 partly   end of 8: (8, max)
//

/// A place in the change log: after every row up to and including `(txn, seq)` in (txn, seq)
/// order. `seq == Int32.max` is the end of transaction `txn` (a real `seq` is a row's index in
/// its transaction: never that large).
public struct ChangeLogPosition: Sendable, Hashable, Comparable, CustomStringConvertible {
    public var txn: Int64
    public var seq: Int32

    @inlinable public init(txn: Int64, seq: Int32) {
        self.txn = txn
        self.seq = seq
    }

    /// After the last row of transaction `txn`.
    @inlinable public static func end(of txn: Int64) -> ChangeLogPosition { ChangeLogPosition(txn: txn, seq: .max) }

    @inlinable public var isTransactionEnd: Bool { seq == .max }

    /// The newest transaction whose rows all lie at or before this position.
    @inlinable public var completeThrough: Int64 { isTransactionEnd ? txn : txn - 1 }

    @inlinable public static func < (a: ChangeLogPosition, b: ChangeLogPosition) -> Bool {
        (a.txn, a.seq) < (b.txn, b.seq)
    }

    public var description: String { isTransactionEnd ? "end of \(txn)" : "\(txn)/\(seq)" }
}
