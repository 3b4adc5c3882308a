import Testing
import TestRandomness
import Values
@testable import CRDT

/// Random operations of every kind against one replica's copy of a document.
struct RandomOps {
    static let keys = ["a", "b", "c"]

    static func path(_ rng: inout SeededRNG) -> FieldPath {
        let depth = 1 + Int(rng.next() % 3)
        return FieldPath((0..<depth).map { _ in keys[Int(rng.next() % 3)] })
    }

    static func value(_ rng: inout SeededRNG, depth: Int = 0) -> Value {
        switch rng.next() % (depth > 1 ? 5 : 7) {
        case 0: return .null
        case 1: return .bool(rng.next() & 1 == 0)
        case 2: return .int(Int64(rng.next() % 7))
        case 3: return .double(Double(rng.next() % 9) / 4)
        case 4: return .string(["x", "y", "zz"][Int(rng.next() % 3)])
        case 5: return .array((0..<(rng.next() % 3)).map { _ in value(&rng, depth: depth + 1) })
        default:
            var o: [String: Value] = [:]
            for _ in 0..<(rng.next() % 3) { o[keys[Int(rng.next() % 3)]] = value(&rng, depth: depth + 1) }
            return .object(o)
        }
    }

    static func types(_ rng: inout SeededRNG) -> TypeDeclarations {
        switch rng.next() % 3 {
        case 0: return .nonStrict
        case 1: return .strict
        default: return TypeDeclarations(strict: true, declared: [FieldPath(["a"]): .map, FieldPath(["a", "b"]): .map])
        }
    }

    /// Applies one random operation; operations that are invalid in the current state just throw.
    static func apply(_ rng: inout SeededRNG, to doc: inout Document, replica: inout Replica) {
        let types = types(&rng)
        do {
            switch rng.next() % 11 {
            case 0, 1:
                var fields: [String: Value] = [:]
                for _ in 0..<(1 + rng.next() % 3) { fields[keys[Int(rng.next() % 3)]] = value(&rng) }
                _ = try doc.upsert(fields, mode: rng.next() & 1 == 0 ? .update : .updateLocalDiff, types: types, replica: &replica)
            case 2:
                _ = try doc.insertInitial([keys[Int(rng.next() % 3)]: value(&rng)], types: types, replica: &replica)
            case 3, 4:
                _ = try doc.set(path(&rng), to: value(&rng), types: types, replica: &replica)
            case 5:
                _ = try doc.unset(path(&rng), replica: &replica)
            case 6:
                _ = try doc.increment(path(&rng), by: Double(Int(rng.next() % 7) - 3), types: types, replica: &replica)
            case 7:
                _ = try doc.restart(path(&rng), with: Double(rng.next() % 5), types: types, replica: &replica)
            case 8:
                let token = AttachmentToken(id: "blob\(rng.next() % 3)", length: rng.next() % 100, metadata: ["n": .int(1)])
                _ = try doc.setAttachment(path(&rng), token, types: types, replica: &replica)
            case 9:
                if rng.next() % 3 == 0 { _ = doc.delete(replica: &replica) }
            default:
                _ = try doc.increment(FieldPath([keys[Int(rng.next() % 3)]]), by: 1, types: types, replica: &replica)
            }
        } catch {
            // Invalid for this state (missing document, not a MAP in strict mode, ...): no change.
        }
    }
}

/// A simulated network of replicas exchanging deltas with delays, reordering, duplicates and drops.
struct Network {
    var docs: [Document]
    var replicas: [Replica]
    var clocks: [ManualClock]
    var inFlight: [(to: Int, delta: [UInt8])] = []

    init(count: Int, rng: inout SeededRNG) throws {
        // Wall clocks a few seconds apart; now and then one replica is a year fast.
        let clocks = (0..<count).map { _ in
            ManualClock(1_700_000_000_000 + rng.next() % 5_000 + (rng.next() % 8 == 0 ? 365 * 86_400_000 : 0))
        }
        self.clocks = clocks
        replicas = (0..<count).map { i in makeReplica(rng.next() | 1, clock: clocks[i]) }
        docs = try (0..<count).map { _ in try Document(id: "p") }
    }

    mutating func step(_ rng: inout SeededRNG) throws {
        let i = Int(rng.next() % UInt64(docs.count))
        switch rng.next() % 10 {
        case 0..<5:
            RandomOps.apply(&rng, to: &docs[i], replica: &replicas[i])
        case 5..<8:
            // Send i's delta to j, computed against what j has now; it travels for a while.
            let j = Int(rng.next() % UInt64(docs.count))
            guard i != j else { return }
            let bytes = docs[i].delta(since: docs[j].versionVector).encode()
            inFlight.append((j, bytes))
            if rng.next() % 5 == 0 { inFlight.append((j, bytes)) }  // duplicate
        case 8:
            guard !inFlight.isEmpty else { return }
            let k = Int(rng.next() % UInt64(inFlight.count))
            let message = inFlight.remove(at: k)
            if rng.next() % 6 == 0 { return }  // dropped
            try deliver(message.delta, to: message.to)
        default:
            // Wall clocks move, sometimes backwards.
            let c = clocks[i]
            if rng.next() % 4 == 0 { c.set(c.now - rng.next() % 50) } else { c.advance(rng.next() % 20) }
        }
    }

    mutating func deliver(_ bytes: [UInt8], to j: Int) throws {
        let delta = try Delta.decode(bytes)
        replicas[j].observe(delta)
        _ = try docs[j].merge(delta)
    }

    /// Delivers what is still in flight in order, then retries until everyone has everything.
    mutating func settle() throws {
        for message in inFlight { try deliver(message.delta, to: message.to) }
        inFlight = []
        for _ in 0..<2 {
            for i in docs.indices {
                for j in docs.indices where i != j {
                    try deliver(docs[i].delta(since: docs[j].versionVector).encode(), to: j)
                }
            }
        }
    }
}

@Suite struct ConvergencePropertyTests {
    @Test(arguments: 0..<8)
    func replicasThatSawTheSameDeltasHoldByteIdenticalState(batch: Int) throws {
        var rng = SeededRNG(seed: 0xC0FFEE + UInt64(batch))
        for scenario in 0..<60 {
            let count = 2 + Int(rng.next() % 7)  // 2...8 replicas
            var net = try Network(count: count, rng: &rng)
            for _ in 0..<(20 + rng.next() % 60) { try net.step(&rng) }
            try net.settle()
            let first = net.docs[0].encode()
            for (i, d) in net.docs.enumerated() {
                #expect(d.encode() == first, "batch \(batch) scenario \(scenario): replica \(i) diverged")
                #expect(d.materialize() == net.docs[0].materialize(), "batch \(batch) scenario \(scenario)")
                #expect(d.versionVector == net.docs[0].versionVector)
            }
            // And the state survives its own encoding.
            let decoded = try Document.decode(first)
            #expect(decoded.encode() == first)
            #expect(decoded.materialize() == net.docs[0].materialize())
        }
    }

    @Test func replicasStillConvergeAfterReapingTombstonesAtTheSameHorizon() throws {
        var rng = SeededRNG(seed: 0x7EA9)
        for scenario in 0..<100 {
            var net = try Network(count: 2 + Int(rng.next() % 4), rng: &rng)
            for _ in 0..<40 { try net.step(&rng) }
            try net.settle()
            let horizon = HLCTimestamp(rawValue: HLCTimestamp.max.rawValue)
            for i in net.docs.indices { net.docs[i].reapTombstones(createdBefore: horizon) }
            let reaped = net.docs[0].encode()
            #expect(net.docs.allSatisfy { $0.encode() == reaped }, "scenario \(scenario) after reaping")
            for _ in 0..<40 { try net.step(&rng) }
            try net.settle()
            let first = net.docs[0].encode()
            #expect(net.docs.allSatisfy { $0.encode() == first }, "scenario \(scenario) after more work")
        }
    }

    @Test func mergeIsCommutativeAssociativeAndIdempotent() throws {
        var rng = SeededRNG(seed: 99)
        for _ in 0..<300 {
            var net = try Network(count: 3, rng: &rng)
            // A shared base, then independent work on each replica.
            RandomOps.apply(&rng, to: &net.docs[0], replica: &net.replicas[0])
            _ = try net.docs[0].upsert(["a": 1], replica: &net.replicas[0])
            try net.settle()
            let base = net.docs[0]
            for i in 0..<3 {
                for _ in 0..<(1 + rng.next() % 6) { RandomOps.apply(&rng, to: &net.docs[i], replica: &net.replicas[i]) }
            }
            let deltas = (0..<3).map { net.docs[$0].delta(since: base.versionVector) }
            var results: Set<[UInt8]> = []
            for order in [[0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]] {
                var d = base
                for k in order { _ = try d.merge(deltas[k]) }
                results.insert(d.encode())
                // Idempotent: merging any of them again changes nothing.
                let again = try d.merge(deltas[order[0]])
                #expect(again.isEmpty)
                results.insert(d.encode())
            }
            #expect(results.count == 1)
            // Associative: (d0 ⊔ d1) merged as one delta, then d2, equals the sequential merges.
            var left = base
            _ = try left.merge(deltas[0])
            _ = try left.merge(deltas[1])
            var grouped = base
            _ = try grouped.merge(left.delta(since: base.versionVector))
            _ = try grouped.merge(deltas[2])
            #expect(results.contains(grouped.encode()))
        }
    }

    @Test func randomDocumentsRoundTripThroughTheirEncoding() throws {
        var rng = SeededRNG(seed: 5)
        for _ in 0..<300 {
            var net = try Network(count: 2, rng: &rng)
            for _ in 0..<30 { try net.step(&rng) }
            for d in net.docs {
                let bytes = d.encode()
                let back = try Document.decode(bytes)
                #expect(back == d)
                #expect(back.encode() == bytes)
                let delta = d.delta(since: VersionVector())
                let deltaBack = try Delta.decode(delta.encode())
                #expect(deltaBack == delta)
            }
        }
    }
}
