// Materialization: the JSON value SELECT returns and PostgreSQL stores as JSONB.
//
// At every slot the winner is the component with the newest live event (docs/CRDT.md "Types"):
//   REGISTER / ATTACHMENT  its own Meta
//   COUNTER                its newest live restart or contribution
//   MAP                    its newest live marker or the newest winner among its children
// A slot with no live component is MISSING (absent from its parent object); never NULL.

import Values

extension Document {
    /// The document as JSON with `_id`, or nil if it is deleted or was never inserted.
    ///
    /// Counters are numbers (Int64 when integral and within ±2^53, else Double); attachments are
    /// `{"_type":"attachment","id":String,"len":Int,"metadata":Object}`.
    public func materialize() -> Value? {
        guard case .object(var fields)? = Self.mapComponent(root, barrier: nil)?.value else { return nil }
        fields["_id"] = id
        return .object(fields)
    }

    /// The visible value at `path` (MISSING = nil). The empty path is the whole document.
    public func value(at path: FieldPath) -> Value? {
        if path.isRoot { return materialize() }
        guard exists else { return nil }
        var slot = root
        var barrier: Meta? = nil
        for (i, key) in path.keys.enumerated() {
            if i > 0 {
                // The parent must currently be a MAP for a child to be visible.
                guard Self.winnerIsMap(slot, barrier: barrier) else { return nil }
            }
            let local = maxMeta(barrier, slot.removal?.barrier)
            barrier = maxMeta(local, Self.liveRegister(slot, local)?.meta)
            guard let child = slot.children[key] else { return nil }
            slot = child
        }
        return Self.visible(slot, barrier: barrier)?.value
    }

    static func liveRegister(_ slot: Slot, _ local: Meta?) -> Register? {
        guard let r = slot.register else { return nil }
        if let b = local, r.meta <= b { return nil }
        return r
    }

    static func counterValue(_ c: CounterState) -> Value {
        let v = c.value
        if v == v.rounded(), abs(v) <= 9_007_199_254_740_992 { return .int(Int64(v)) }
        return .double(v)
    }

    /// The winning component's value and newest Meta, or nil if nothing here is live.
    static func visible(_ slot: Slot, barrier: Meta?) -> (value: Value, newest: Meta)? {
        let local = maxMeta(barrier, slot.removal?.barrier)
        var best: (value: Value, newest: Meta)? = nil
        if let r = liveRegister(slot, local), let p = r.payload {
            best = (p.materialized, r.meta)
        }
        if let c = slot.counter, let n = c.newestLive(above: local), best.map({ n > $0.newest }) ?? true {
            best = (counterValue(c), n)
        }
        if let m = mapComponent(slot, barrier: barrier), best.map({ m.newest > $0.newest }) ?? true {
            best = m
        }
        return best
    }

    /// The MAP reading of a slot: its visible children and the newest live event among marker and children.
    static func mapComponent(_ slot: Slot, barrier: Meta?) -> (value: Value, newest: Meta)? {
        let local = maxMeta(barrier, slot.removal?.barrier)
        var newest: Meta? = slot.marker.flatMap { m in local.map { m > $0 } ?? true ? m : nil }
        let childBarrier = maxMeta(local, liveRegister(slot, local)?.meta)
        var fields: [String: Value] = [:]
        fields.reserveCapacity(slot.children.count)
        slot.children.forEachChild { key, child in
            switch child {
            case .register(let v, let m):  // what visible(_:barrier:) gives for a plain register
                if let b = childBarrier, m <= b { return }
                fields[key] = v
                newest = maxMeta(newest, m)
            case .slot(let s):
                guard let (v, m) = visible(s, barrier: childBarrier) else { return }
                fields[key] = v
                newest = maxMeta(newest, m)
            }
        }
        guard let n = newest else { return nil }
        return (.object(fields), n)
    }

    /// Newest live Meta anywhere in the subtree (what the MAP component competes with), without building values.
    static func newestLive(_ slot: Slot, barrier: Meta?) -> Meta? {
        let local = maxMeta(barrier, slot.removal?.barrier)
        let reg = liveRegister(slot, local)
        var newest: Meta? = reg?.payload == nil ? nil : reg?.meta
        newest = maxMeta(newest, slot.counter?.newestLive(above: local))
        if let m = slot.marker, local.map({ m > $0 }) ?? true { newest = maxMeta(newest, m) }
        let childBarrier = maxMeta(local, reg?.meta)
        for child in slot.children.values {
            newest = maxMeta(newest, newestLive(child, barrier: childBarrier))
        }
        return newest
    }

    /// Whether the MAP component wins at this slot (cheap unless a REGISTER or COUNTER competes).
    static func winnerIsMap(_ slot: Slot, barrier: Meta?) -> Bool {
        let local = maxMeta(barrier, slot.removal?.barrier)
        var competitor: Meta? = nil
        if let r = liveRegister(slot, local), r.payload != nil { competitor = r.meta }
        competitor = maxMeta(competitor, slot.counter?.newestLive(above: local))
        let childBarrier = maxMeta(local, liveRegister(slot, local)?.meta)
        var mapNewest: Meta? = slot.marker.flatMap { m in local.map { m > $0 } ?? true ? m : nil }
        if competitor == nil {
            if mapNewest != nil { return true }
            return slot.children.values.contains { visible($0, barrier: childBarrier) != nil }
        }
        for child in slot.children.values { mapNewest = maxMeta(mapNewest, newestLive(child, barrier: childBarrier)) }
        guard let m = mapNewest, let c = competitor else { return false }
        return m > c
    }

    /// The component that currently wins at `path`, for operations that depend on it.
    func visibleKind(at path: FieldPath) -> VisibleKind {
        guard let v = value(at: path) else { return .missing }
        var slot = root
        for key in path.keys {
            guard let child = slot.children[key] else { return .missing }
            slot = child
        }
        if case .object = v, Self.winnerIsMap(slot, barrier: inheritedBarrier(of: path)) { return .map }
        if let c = slot.counter, let n = c.newestLive(above: maxMeta(inheritedBarrier(of: path), slot.removal?.barrier)),
           n == Self.visible(slot, barrier: inheritedBarrier(of: path))?.newest {
            return .counter
        }
        return .other
    }

    /// The barrier the slot at `path` inherits from its ancestors.
    func inheritedBarrier(of path: FieldPath) -> Meta? {
        var slot = root
        var barrier: Meta? = nil
        for key in path.keys {
            let local = maxMeta(barrier, slot.removal?.barrier)
            barrier = maxMeta(local, Self.liveRegister(slot, local)?.meta)
            guard let child = slot.children[key] else { return barrier }
            slot = child
        }
        return barrier
    }

    /// The stored slot at `path`, if any.
    func slot(at path: FieldPath) -> Slot? {
        var slot = root
        for key in path.keys {
            guard let child = slot.children[key] else { return nil }
            slot = child
        }
        return slot
    }
}

enum VisibleKind: Equatable { case missing, map, counter, other }
