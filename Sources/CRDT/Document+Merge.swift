// Merging deltas: a join (commutative, associative, idempotent).
//
// Per component the merge keeps the greater of the two (LWW by Meta; a removal by its barrier;
// counters per site and per restart), skipping events whose dot the version vector already holds
// (they are stored or were superseded here). Then `normalize` prunes what the new events make
// irrelevant. The result depends only on the set of events seen, never on order or duplicates.

import Values

/// What a merge changed.
public struct ChangeSet: Sendable, Equatable {
    /// Paths written by the delta whose materialized value differs afterwards (a changed path implies
    /// its ancestors changed too). Sorted.
    public var paths: [FieldPath]
    /// The document appeared (insert, re-insert) or disappeared (delete).
    public var existenceChanged: Bool

    public var isEmpty: Bool { paths.isEmpty && !existenceChanged }
    public static let none = ChangeSet(paths: [], existenceChanged: false)
}

extension Document {
    /// Applies a delta from another replica. Throws `deltaGap` (and changes nothing) if the delta
    /// starts after what this replica has seen from some site.
    public mutating func merge(_ delta: Delta) throws(CRDTError) -> ChangeSet {
        if delta.kind == .reset { return mergeReset(delta) }
        for (site, range) in delta.ranges {
            guard let from = range.from else { continue }
            guard versionVector.contains(site, from) else { throw .deltaGap(site: site) }
        }
        var candidates: [FieldPath] = []
        Self.collectNewPaths(delta.root, path: [], vv: versionVector, into: &candidates)
        let existedBefore = exists
        let before = candidates.map { value(at: $0) }
        var stamp = maxStamp
        Self.mergeSlot(&root, delta.root, barrier: nil, vv: versionVector, maxStamp: &stamp)
        maxStamp = stamp
        for (site, range) in delta.ranges { versionVector.raise(site, to: range.to) }
        for path in candidates { recent.record(path.keys[...], meta: nil) }
        recent.settle(versionVector: versionVector)
        var changed: [FieldPath] = []
        for (path, old) in zip(candidates, before) where value(at: path) != old { changed.append(path) }
        return ChangeSet(paths: changed.sorted(), existenceChanged: existedBefore != exists)
    }

    /// A reset snapshot replaces everything the sender has seen; our events it never saw are kept.
    private mutating func mergeReset(_ delta: Delta) -> ChangeSet {
        let before = materialize()
        let senderVV = delta.upperBounds
        let mine = Self.extract(root, unseenBy: senderVV)
        var newRoot = delta.root
        Self.normalize(&newRoot, barrier: nil)
        var stamp: UInt64 = 0
        newRoot.forEachMeta { stamp = max(stamp, $0.stamp) }
        if let mine {
            Self.mergeSlot(&newRoot, mine, barrier: nil, vv: VersionVector(), maxStamp: &stamp)
        }
        root = newRoot
        maxStamp = max(maxStamp, stamp)
        versionVector.formUnion(senderVV)
        reapedVersionVector.formUnion(delta.reaped)
        recent.forget(versionVector: versionVector)
        let after = materialize()
        var changed: [FieldPath] = []
        let oldFields = before?.objectValue ?? [:], newFields = after?.objectValue ?? [:]
        for key in Set(oldFields.keys).union(newFields.keys) where oldFields[key] != newFields[key] {
            changed.append(FieldPath([key]))
        }
        return ChangeSet(paths: changed.sorted(), existenceChanged: (before == nil) != (after == nil))
    }

    static func collectNewPaths(_ slot: Slot, path: [String], vv: VersionVector, into out: inout [FieldPath]) {
        var isNew = false
        slot.forEachOwnMeta { m in if !vv.contains(m.site, m.dot) { isNew = true } }
        if isNew { out.append(FieldPath(path)) }
        for (key, child) in slot.children { collectNewPaths(child, path: path + [key], vv: vv, into: &out) }
    }

    /// Joins `remote` into `local`; returns nothing, normalizes every slot that took a new event.
    static func mergeSlot(_ local: inout Slot, _ remote: Slot, barrier: Meta?, vv: VersionVector, maxStamp: inout UInt64) {
        func new(_ m: Meta) -> Bool { !vv.contains(m.site, m.dot) }
        var touched = false
        if let r = remote.register, new(r.meta), local.register.map({ r.meta > $0.meta }) ?? true {
            local.register = r
            touched = true
            maxStamp = max(maxStamp, r.meta.stamp)
        }
        if let m = remote.marker, new(m), local.marker.map({ m > $0 }) ?? true {
            local.marker = m
            touched = true
            maxStamp = max(maxStamp, m.stamp)
        }
        if let x = remote.removal, new(x.meta),
           local.removal.map({ x.barrier > $0.barrier || (x.barrier == $0.barrier && x.meta > $0.meta) }) ?? true {
            local.removal = x
            touched = true
            maxStamp = max(maxStamp, x.meta.stamp, x.barrier.stamp)
        }
        if let rc = remote.counter {
            var incoming = CounterState()
            if let r = rc.restart, new(r.meta) { incoming.restart = r }
            for (site, c) in rc.contributions where new(c.meta) { incoming.contributions[site] = c }
            var lc = local.counter ?? CounterState()
            if lc.merge(incoming) {
                local.counter = lc
                touched = true
                incoming.restart.map { maxStamp = max(maxStamp, $0.meta.stamp) }
                for c in incoming.contributions.values { maxStamp = max(maxStamp, c.meta.stamp) }
            }
        }
        if !remote.children.isEmpty {
            let childBarrier = local.childBarrier(inherited: barrier)
            for (key, rchild) in remote.children {
                mergeSlot(&local.children[key, default: Slot()], rchild, barrier: childBarrier, vv: vv, maxStamp: &maxStamp)
            }
        }
        if touched { normalize(&local, barrier: barrier) }
    }
}
