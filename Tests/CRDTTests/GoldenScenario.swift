// A deterministic multi-replica workload over the public API only, hashed over every state and
// delta encoding it produces. GoldenEncodingTests pins the digest: the canonical encodings are a
// wire and storage format (docs/PROTOCOL.md, docs/STORAGE.md), so a change to the in-memory
// representation must not move a single byte. Self-contained (own RNG, fixed clocks) so the same
// file can be compiled against an older revision to produce the pinned values.

import CRDT
import Values

enum GoldenScenario {
    /// SplitMix64: tiny and stable forever (the digest depends on every number drawn).
    struct Mix {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
        mutating func below(_ n: Int) -> Int { Int(next() % UInt64(n)) }
    }

    /// FNV-1a over a stream of byte strings, each prefixed by its length.
    struct Digest {
        var hash: UInt64 = 0xCBF2_9CE4_8422_2325
        var bytes = 0
        mutating func add(_ b: [UInt8]) {
            for x in withUnsafeBytes(of: UInt64(b.count).littleEndian, Array.init) + b {
                hash = (hash ^ UInt64(x)) &* 0x0000_0100_0000_01B3
            }
            bytes += b.count
        }
    }

    static let keys: [FieldPath] = ["a", "b", "c", "m.x", "m.y", "m.n.z", "cnt", "att"]

    static func value(_ g: inout Mix) -> Value {
        switch g.below(6) {
        case 0: .int(Int64(g.below(1000)) - 500)
        case 1: .double(Double(g.below(1000)) / 8)
        case 2: .string(String(repeating: "v", count: g.below(20)))
        case 3: .bool(g.below(2) == 0)
        case 4: .array([.int(Int64(g.below(9))), .null])
        default: .object(["k": .int(Int64(g.below(9)))])
        }
    }

    /// One seeded scenario: 3 replicas (one with a clock a year fast), 60 random steps.
    static func run(seed: UInt64, into d: inout Digest) throws {
        var g = Mix(state: seed)
        let base: UInt64 = 1_700_000_000_000
        var replicas = [
            Replica(site: SiteID(0x1111), wallClock: { base }),
            Replica(site: SiteID(0x2222), wallClock: { base + 7 }),
            Replica(site: SiteID(0x3333), wallClock: { base + 365 * 86_400_000 }),
        ]
        var docs = try (0..<3).map { _ in try Document(id: "golden") }
        _ = try docs[0].upsert(["a": 1, "m": ["x": "start"]], types: .nonStrict, replica: &replicas[0])
        for i in 1..<3 { _ = try docs[i].merge(docs[0].delta(since: VersionVector())) }
        for _ in 0..<60 {
            let i = g.below(3)
            let path = keys[g.below(keys.count)]
            let types: TypeDeclarations = g.below(2) == 0 ? .strict : .nonStrict
            switch g.below(11) {
            case 0, 1: _ = try? docs[i].set(path, to: value(&g), types: types, replica: &replicas[i])
            case 2: _ = try? docs[i].increment(path, by: Double(g.below(10)) - 3, types: types, replica: &replicas[i])
            case 3: _ = try? docs[i].restart(path, with: Double(g.below(5)), types: types, replica: &replicas[i])
            case 4: _ = try? docs[i].unset(path, replica: &replicas[i])
            case 5:
                let token = AttachmentToken(id: "blob\(g.below(3))", length: UInt64(g.below(100)), metadata: ["n": .int(1)])
                _ = try? docs[i].setAttachment(path, token, types: types, replica: &replicas[i])
            case 6: if g.below(3) == 0 { _ = docs[i].delete(replica: &replicas[i]) }
            case 7:
                let mode: Document.UpsertMode = g.below(2) == 0 ? .update : .updateLocalDiff
                _ = try? docs[i].upsert(["a": value(&g), "b": value(&g)], mode: mode, types: types, replica: &replicas[i])
            case 8: _ = try? docs[i].insertInitial(["c": value(&g)], replica: &replicas[i])
            case 9: docs[i].reapTombstones(createdBefore: HLCTimestamp(physicalMillis: base + 1, logical: 0))
            default:
                let j = (i + 1 + g.below(2)) % 3
                let delta = docs[j].delta(since: docs[i].versionVector)
                d.add(delta.encode())
                replicas[i].observe(delta)
                _ = try docs[i].merge(delta)
            }
            d.add(docs[i].encode())
        }
        for _ in 0..<2 {
            for i in 0..<3 {
                for j in 0..<3 where i != j {
                    let delta = docs[j].delta(since: docs[i].versionVector)
                    d.add(delta.encode())
                    _ = try docs[i].merge(delta)
                }
            }
        }
        for doc in docs { d.add(doc.encode()) }
    }

    /// A small state with every component kind and the delta of its last write, as bytes.
    static func sample() throws -> (state: [UInt8], delta: [UInt8]) {
        var r = Replica(site: SiteID(0xABCD), wallClock: { 1_700_000_000_000 })
        var doc = try Document(id: "s")
        _ = try doc.upsert(["t": "x", "n": 1.5, "m": ["k": true]], types: .nonStrict, replica: &r)
        _ = try doc.increment("c", by: 2, replica: &r)
        _ = try doc.setAttachment("f", AttachmentToken(id: "b", length: 3, metadata: [:]), replica: &r)
        _ = try doc.unset("m.k", replica: &r)
        let before = doc.versionVector
        _ = try doc.set("t", to: "y", replica: &r)
        return (doc.encode(), doc.delta(since: before).encode())
    }

    static func digest(seeds: Range<UInt64>) throws -> Digest {
        var d = Digest()
        for seed in seeds { try run(seed: seed, into: &d) }
        return d
    }
}
