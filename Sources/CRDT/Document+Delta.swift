// Deltas: what one replica sends another so the receiver reflects everything the sender does.
//
// `delta(since: receiverVersionVector)` holds every stored event whose dot the receiver has not
// seen, in a sparse copy of the slot tree, plus per site the range (from, to] of dots it covers.
// Superseded events are not sent: whatever superseded them is either in the delta or already at
// the receiver, so after the merge the receiver's version vector can rise to the sender's.
//
// Usually only the recently written paths are visited (RecentWrites.swift); otherwise the whole tree.
//
// When this replica has reaped tombstones the receiver may never have seen
// (`!since.covers(reapedVersionVector)`), the delta is a *reset*: the full state; the receiver keeps
// only its own events the sender never saw and takes the rest from the snapshot (docs/CRDT.md "TTL").

import Values

/// Dots of one site covered by a delta: `from` (exclusive, nil = from the beginning) to `to` (inclusive).
public struct DeltaRange: Hashable, Sendable {
    public var from: HLCTimestamp?
    public var to: HLCTimestamp
}

public struct Delta: Sendable, Equatable {
    public enum Kind: UInt64, Sendable { case incremental = 1, reset = 2 }

    public internal(set) var kind: Kind
    public internal(set) var ranges: [SiteID: DeltaRange]
    /// Reset deltas carry the sender's reaped version vector; empty otherwise.
    public internal(set) var reaped: VersionVector
    var root: Slot

    /// True if the delta carries nothing the receiver lacks.
    public var isEmpty: Bool { ranges.isEmpty && root.isEmpty && kind == .incremental }

    /// The newest dot in the delta (for `Replica.observe`).
    public var newestDot: HLCTimestamp? { ranges.values.map(\.to).max() }

    /// The sender's version vector restricted to the sites this delta advances.
    public var upperBounds: VersionVector { VersionVector(ranges.mapValues(\.to)) }
}

extension Document {
    /// Everything a replica whose version vector is `since` has not seen.
    ///
    /// `since` must be a vector the receiver actually had (its current one or an older one);
    /// `merge` checks the ranges against the receiver and throws `deltaGap` otherwise.
    public func delta(since: VersionVector) -> Delta {
        delta(since: since, useRecentWrites: true)
    }

    /// `useRecentWrites: false` always walks the whole tree (tests compare the two).
    func delta(since: VersionVector, useRecentWrites: Bool) -> Delta {
        if !since.covers(reapedVersionVector) {
            return Delta(kind: .reset, ranges: versionVector.entries.mapValues { DeltaRange(from: nil, to: $0) },
                         reaped: reapedVersionVector, root: root)
        }
        var ranges: [SiteID: DeltaRange] = [:]
        for e in versionVector.sorted {
            let site = e.site, to = e.timestamp
            let from = since[site]
            if let f = from, f >= to { continue }
            ranges[site] = DeltaRange(from: from, to: to)
        }
        if ranges.isEmpty { return Delta(kind: .incremental, ranges: [:], reaped: VersionVector(), root: Slot()) }
        let sparse = (useRecentWrites && recent.serves(since) ? extractRecent(unseenBy: since) : Self.extract(root, unseenBy: since)) ?? Slot()
        return Delta(kind: .incremental, ranges: ranges, reaped: VersionVector(), root: sparse)
    }

    /// A copy of `slot` holding only events whose dots `vv` does not contain.
    static func extract(_ slot: Slot, unseenBy vv: VersionVector) -> Slot? {
        func new(_ m: Meta) -> Bool { !vv.contains(m.site, m.dot) }
        var out = Slot()
        if let r = slot.register, new(r.meta) { out.register = r }
        if let m = slot.marker, new(m) { out.marker = m }
        if let x = slot.removal, new(x.meta) { out.removal = x }
        if let c = slot.counter {
            var sc = CounterState()
            if let r = c.restart, new(r.meta) { sc.restart = r }
            for (site, k) in c.contributions where new(k.meta) { sc.contributions[site] = k }
            if sc.restart != nil || !sc.contributions.isEmpty { out.counter = sc }
        }
        for (key, child) in slot.children {
            if let sub = extract(child, unseenBy: vv) { out.children[key] = sub }
        }
        return out.isEmpty ? nil : out
    }

    /// TTL garbage collection: forgets removal records (UNSET and DELETE tombstones) created before
    /// `cutoff`, together with the hidden counter state they cover. Returns how many were reaped.
    ///
    /// The materialized value does not change. Peers whose version vector does not cover what was
    /// reaped get reset deltas from now on (see `delta(since:)`), and a write such a peer made before
    /// the tombstone without ever seeing it can come back: the resurrection risk in docs/CRDT.md.
    @discardableResult
    public mutating func reapTombstones(createdBefore cutoff: HLCTimestamp) -> Int {
        var count = 0
        var reaped = reapedVersionVector
        Self.reap(&root, cutoff: cutoff, count: &count, reaped: &reaped)
        reapedVersionVector = reaped
        return count
    }

    private static func reap(_ slot: inout Slot, cutoff: HLCTimestamp, count: inout Int, reaped: inout VersionVector) {
        if let x = slot.removal, x.meta.dot < cutoff {
            slot.removal = nil
            count += 1
            reaped.raise(x.meta.site, to: x.meta.dot)
            dropHiddenCounters(&slot, barrier: x.barrier)
        }
        guard !slot.children.isEmpty else { return }
        slot.children.updateEach { reap(&$0, cutoff: cutoff, count: &count, reaped: &reaped) }
        slot.children.removeAll { $0.isEmpty }
    }

    /// Drops counters all of whose events are at or below `barrier` (they were invisible).
    private static func dropHiddenCounters(_ slot: inout Slot, barrier: Meta) {
        if let c = slot.counter, let n = c.newest, n <= barrier { slot.counter = nil }
        guard !slot.children.isEmpty else { return }
        slot.children.updateEach { dropHiddenCounters(&$0, barrier: barrier) }
        slot.children.removeAll { $0.isEmpty }
    }
}

extension Replica {
    /// Lets the clock see a received delta's timestamps (bounded by the drift policy).
    public mutating func observe(_ delta: Delta) {
        if let t = delta.newestDot { observe(t) }
    }
}
