// The stored CRDT state of one document: a tree of slots, one per field path.
//
// Every stored event carries a `Meta`:
//   * `dot`   (site, HLC timestamp): when the event was created, per-site monotonic; version
//             vectors and delta extraction are built on dots.
//   * `stamp` the last-writer-wins order. Usually equal to the dot's timestamp, raised above every
//             stamp the writer had seen in the document (so a local write always wins over what it
//             saw, even if a peer's clock ran far ahead), and 0 for INITIAL writes.
// Events are ordered by `Meta` itself: (stamp, site, dot) — total, identical on every replica.
//
// A slot holds at most one of each component (see docs/CRDT.md for the rules):
//
//   Slot ── register   LWW REGISTER or ATTACHMENT (payload dropped once it can never win again)
//        ├─ marker     "this path is a MAP" (newest only)
//        ├─ counter    per-site cumulative totals + the winning RESTART
//        ├─ removal    UNSET / DELETE: everything here with Meta <= barrier is gone
//        └─ children   MAP entries by key

import Values

/// Event metadata; also the LWW ordering key.
struct Meta: Hashable, Comparable, Sendable {
    var stamp: UInt64
    var site: SiteID
    var dot: HLCTimestamp

    static func < (a: Meta, b: Meta) -> Bool {
        if a.stamp != b.stamp { return a.stamp < b.stamp }
        if a.site != b.site { return a.site < b.site }
        return a.dot < b.dot
    }
}

/// Attachment token: the bytes live elsewhere and are fetched lazily by `id`.
public struct AttachmentToken: Hashable, Sendable {
    public var id: String
    public var length: UInt64
    public var metadata: [String: Value]

    public init(id: String, length: UInt64, metadata: [String: Value] = [:]) {
        self.id = id
        self.length = length
        self.metadata = metadata
    }

    /// Marker key and value that identify a materialized attachment token.
    public static let typeKey = "_type"
    public static let typeValue = "attachment"

    /// The JSON shape SELECT returns: `{"_type":"attachment","id":…,"len":…,"metadata":{…}}`.
    public var materialized: Value {
        .object([Self.typeKey: .string(Self.typeValue), "id": .string(id),
                 "len": .int(Int64(clamping: length)), "metadata": .object(metadata)])
    }

    /// Parses the materialized shape back (what DQL passes when a token is written as a value).
    public init?(materialized v: Value) {
        guard case .object(let o) = v, o[Self.typeKey] == .string(Self.typeValue),
              case .string(let id)? = o["id"], case .int(let len)? = o["len"], len >= 0 else { return nil }
        var meta: [String: Value] = [:]
        if let m = o["metadata"] {
            guard case .object(let mo) = m else { return nil }
            meta = mo
        }
        guard o.count == (o["metadata"] == nil ? 3 : 4) else { return nil }
        self.init(id: id, length: UInt64(len), metadata: meta)
    }
}

enum Payload: Hashable, Sendable {
    case value(Value)
    /// Boxed: tokens are rare and would otherwise double the size of every REGISTER.
    indirect case attachment(AttachmentToken)

    var materialized: Value {
        switch self {
        case .value(let v): v
        case .attachment(let t): t.materialized
        }
    }
}

struct Register: Hashable, Sendable {
    var meta: Meta
    /// nil once a newer MAP marker or COUNTER event at the same path means it can never win again;
    /// the register is then kept only for its key, which still hides older writes below this path.
    var payload: Payload?
}

struct CounterContribution: Hashable, Sendable {
    var meta: Meta
    /// This site's cumulative sum of increments (decrements negative) at this path.
    var total: Double
}

struct CounterRestart: Hashable, Sendable {
    var meta: Meta
    var base: Double
    /// Each site's cumulative total the restarting replica had seen; only later increments count.
    var observed: [SiteID: Double]
}

struct CounterState: Hashable, Sendable {
    var restart: CounterRestart?
    var contributions: [SiteID: CounterContribution] = [:]

    /// base + Σ (total − observed): increments the restart did not see survive it.
    var value: Double {
        var sum = restart?.base ?? 0
        for site in contributions.keys.sorted() {
            guard let c = contributions[site] else { continue }
            sum += c.total - (restart?.observed[site] ?? 0)
        }
        return sum
    }

    /// Newest event that is not hidden by `barrier`.
    func newestLive(above barrier: Meta?) -> Meta? {
        var best: Meta? = nil
        func consider(_ m: Meta) {
            if let b = barrier, m <= b { return }
            best = maxMeta(best, m)
        }
        if let r = restart { consider(r.meta) }
        for c in contributions.values { consider(c.meta) }
        return best
    }

    var newest: Meta? { newestLive(above: nil) }

    mutating func merge(_ other: CounterState) -> Bool {
        var changed = false
        if let r = other.restart, restart.map({ r.meta > $0.meta }) ?? true {
            restart = r
            changed = true
        }
        for (site, c) in other.contributions where contributions[site].map({ c.meta > $0.meta }) ?? true {
            contributions[site] = c
            changed = true
        }
        return changed
    }
}

struct Removal: Hashable, Sendable {
    var meta: Meta
    /// Everything at or below this path with `Meta <= barrier` is removed.
    var barrier: Meta
}

/// Rarely used components, kept out of line so a plain REGISTER field stays small.
struct SlotExtras: Hashable, Sendable {
    var marker: Meta?
    var counter: CounterState?
    var removal: Removal?
    var isEmpty: Bool { marker == nil && counter == nil && removal == nil }
}

struct Slot: Hashable, Sendable {
    var register: Register?
    var children = SlotChildren()
    private var extrasBox: [SlotExtras] = []

    init() {}

    var extras: SlotExtras {
        get { extrasBox.first ?? SlotExtras() }
        set { extrasBox = newValue.isEmpty ? [] : [newValue] }
    }
    var marker: Meta? {
        get { extrasBox.first?.marker }
        set { var e = extras; e.marker = newValue; extras = e }
    }
    var counter: CounterState? {
        get { extrasBox.first?.counter }
        set { var e = extras; e.counter = newValue; extras = e }
    }
    var removal: Removal? {
        get { extrasBox.first?.removal }
        set { var e = extras; e.removal = newValue; extras = e }
    }

    var isEmpty: Bool { register == nil && children.isEmpty && extrasBox.isEmpty }
    /// Whether a marker, counter or removal is stored (they live out of line).
    var hasExtras: Bool { !extrasBox.isEmpty }

    /// Calls `body` with the Meta of every event stored in this slot (not its children).
    func forEachOwnMeta(_ body: (Meta) -> Void) {
        if let r = register { body(r.meta) }
        guard let e = extrasBox.first else { return }
        if let m = e.marker { body(m) }
        if let x = e.removal { body(x.meta); body(x.barrier) }
        if let c = e.counter {
            if let r = c.restart { body(r.meta) }
            for k in c.contributions.values { body(k.meta) }
        }
    }

    /// Calls `body` with every Meta in this subtree.
    func forEachMeta(_ body: (Meta) -> Void) {
        forEachOwnMeta(body)
        for child in children.values { child.forEachMeta(body) }
    }
}
