// A CRDT document: immutable `_id`, a root MAP of fields, a version vector.
//
// The public surface DQL, Store and Sync use:
//   * operations (Document+Operations.swift): upsert, insertInitial, set, unset, increment, restart,
//     setAttachment, delete — each returns whether the materialized value changed;
//   * materialize() (Document+Materialize.swift);
//   * delta(since:) / merge(_:) (Document+Delta.swift, Document+Merge.swift);
//   * encode() / decode(_:) and Delta.encode() / Delta.decode(_:) (DocumentCodec.swift).
// Rules and examples: docs/CRDT.md.

import Values

public struct Document: Sendable, Equatable {
    /// The document's `_id`: a string or an object, never changes.
    public let id: Value
    var root: Slot
    public internal(set) var versionVector: VersionVector
    /// Per site, the newest dot of a removal record this replica has reaped (TTL garbage collection).
    /// A peer whose version vector does not cover it gets a reset snapshot instead of a delta.
    public internal(set) var reapedVersionVector: VersionVector
    /// Highest LWW stamp stored; local writes are stamped above it.
    var maxStamp: UInt64
    /// Paths written since this value was created or decoded, for O(delta) `delta(since:)`.
    var recent = RecentWrites()

    /// An empty, not-yet-inserted document. Use an operation (upsert, insertInitial) to create it.
    public init(id: Value) throws(CRDTError) {
        try Document.validateID(id)
        self.id = id
        root = Slot()
        versionVector = VersionVector()
        reapedVersionVector = VersionVector()
        maxStamp = 0
    }

    static func validateID(_ id: Value) throws(CRDTError) {
        switch id {
        case .string: return
        case .object: return
        default: throw .invalidDocumentID("must be a string or an object, not \(id.typeName)")
        }
    }

    public static func == (a: Document, b: Document) -> Bool {
        a.id == b.id && a.root == b.root && a.versionVector == b.versionVector
            && a.reapedVersionVector == b.reapedVersionVector
    }

    /// True unless the document was deleted (and not re-created) or never inserted.
    public var exists: Bool { Self.winnerIsMap(root, barrier: nil) }
}

// MARK: - Events and their application (shared by local operations and merges)

/// One write, as applied to the tree. Local operations create these; merges receive slots.
enum Event {
    case register(Payload)
    case marker
    case contribution(total: Double)
    case restart(base: Double, observed: [SiteID: Double])
    case removal(barrier: Meta)
}

extension Document {
    /// Inserts `event` at `path` and normalizes the affected subtree. Local operations only.
    mutating func apply(_ event: Event, at path: ArraySlice<String>, meta: Meta) {
        Self.apply(event, at: path, meta: meta, in: &root, barrier: nil)
        recent.record(path, meta: meta)
        maxStamp = max(maxStamp, meta.stamp)
    }

    private static func apply(_ event: Event, at path: ArraySlice<String>, meta: Meta, in slot: inout Slot, barrier: Meta?) {
        guard let key = path.first else {
            switch event {
            case .register(let p):
                if slot.register.map({ meta > $0.meta }) ?? true { slot.register = Register(meta: meta, payload: p) }
            case .marker:
                if slot.marker.map({ meta > $0 }) ?? true { slot.marker = meta }
            case .contribution(let total):
                var c = slot.counter ?? CounterState()
                _ = c.merge(CounterState(restart: nil, contributions: [meta.site: CounterContribution(meta: meta, total: total)]))
                slot.counter = c
            case .restart(let base, let observed):
                var c = slot.counter ?? CounterState()
                _ = c.merge(CounterState(restart: CounterRestart(meta: meta, base: base, observed: observed)))
                slot.counter = c
            case .removal(let b):
                if slot.removal.map({ b > $0.barrier || (b == $0.barrier && meta > $0.meta) }) ?? true {
                    slot.removal = Removal(meta: meta, barrier: b)
                }
            }
            normalize(&slot, barrier: barrier)
            return
        }
        let childBarrier = slot.childBarrier(inherited: barrier)
        apply(event, at: path.dropFirst(), meta: meta, in: &slot.children[key, default: Slot()], barrier: childBarrier)
    }

    /// Drops everything the stored events make irrelevant forever (docs/CRDT.md "Pruning").
    ///
    /// `barrier` is the inherited one: the newest removal barrier and live REGISTER key of the
    /// ancestors. Pruning is a pure function of the state, and each pruned event is superseded by one
    /// that stays (or by one superseding that), so replicas holding the same events hold the same bytes.
    static func normalize(_ slot: inout Slot, barrier: Meta?) {
        var local = barrier
        if let x = slot.removal {
            if let b = barrier, x.barrier <= b {
                slot.removal = nil
            } else {
                local = maxMeta(local, x.barrier)
            }
        }
        if let b = local {
            if let r = slot.register, r.meta <= b { slot.register = nil }
            if let m = slot.marker, m <= b { slot.marker = nil }
        }
        if var r = slot.register, r.payload != nil {
            let markerNewer = slot.marker.map { $0 > r.meta } ?? false
            let counterNewer = slot.counter?.newestLive(above: local).map { $0 > r.meta } ?? false
            if markerNewer || counterNewer {
                r.payload = nil
                slot.register = r
            }
        }
        if slot.children.isEmpty { return }
        let childBarrier = maxMeta(local, slot.register?.meta)
        // A plain register child only loses its event to the barrier (nothing else in it to prune).
        slot.children.prune(keepRegister: { m in childBarrier.map { m > $0 } ?? true }) { child in
            normalize(&child, barrier: childBarrier)
        }
    }
}

func maxMeta(_ a: Meta?, _ b: Meta?) -> Meta? {
    guard let a else { return b }
    guard let b else { return a }
    return a > b ? a : b
}

extension Slot {
    /// The barrier children inherit: the removal here, this slot's live REGISTER (type barrier), and the ancestors'.
    func childBarrier(inherited: Meta?) -> Meta? {
        maxMeta(maxMeta(inherited, removal?.barrier), register?.meta)
    }
}
