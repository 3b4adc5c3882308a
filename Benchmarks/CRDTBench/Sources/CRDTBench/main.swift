// CRDT engine measurements: merge throughput, delta sizes, materialize cost, memory per document,
// encode/decode throughput. Prints a Markdown section for docs/PERFORMANCE.md.
//
//   cd Benchmarks/CRDTBench && swift run -c release CRDTBench [memory] [sizes] [merge] [overwrite]
//
// Times are medians of the thread's CPU time (CLOCK_THREAD_CPUTIME_ID), not wall time.

import CRDT
import Values
import CMallocStats

#if canImport(Glibc)
import Glibc
#endif

/// CPU time of this (the only) thread: on a shared machine, wall time mostly measures the neighbours.
func nowNanos() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts)
    return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
}

/// Median of `runs` timings of `body`, in seconds.
func measure(runs: Int = 5, _ body: () throws -> Void) rethrows -> Double {
    var times: [Double] = []
    for _ in 0..<runs {
        let t0 = nowNanos()
        try body()
        times.append(Double(nowNanos() - t0) / 1e9)
    }
    return times.sorted()[runs / 2]
}

/// Minimal JSON text (strings here are plain ASCII), only to know how big the document is as JSON.
func jsonSize(_ v: Value) -> Int {
    switch v {
    case .null: return 4
    case .bool(let b): return b ? 4 : 5
    case .int(let i): return String(i).utf8.count
    case .double(let d): return String(d).utf8.count
    case .string(let s): return s.utf8.count + 2
    case .array(let a): return 2 + a.map(jsonSize).reduce(0, +) + max(0, a.count - 1)
    case .object(let o): return 2 + o.map { $0.key.utf8.count + 3 + jsonSize($0.value) }.reduce(0, +) + max(0, o.count - 1)
    }
}

/// A document of about `targetBytes` of JSON: string, number and boolean fields, ~48 bytes of JSON each.
func fields(targetBytes: Int) -> [String: Value] {
    var o: [String: Value] = [:]
    var size = 2
    var i = 0
    while size < targetBytes {
        let key = "field_\(i)"
        let v: Value = switch i % 4 {
        case 0: .int(Int64(i) * 7919)
        case 1: .bool(i % 3 == 0)
        default: .string(String(repeating: "abcdefghij", count: 6) + "\(i)")
        }
        o[key] = v
        size += key.utf8.count + 4 + jsonSize(v)
        i += 1
    }
    return o
}

func line(_ s: String) { print(s) }

/// Sections to run (all by default): memory, sizes, merge, overwrite.
let only = Set(CommandLine.arguments.dropFirst())
func enabled(_ section: String) -> Bool { only.isEmpty || only.contains(section) }

var writer = Replica(site: SiteID(0x5EED_0000_0000_0001), wallClock: Replica.systemMillis)

// Memory per document: 20 000 documents of ~1 KB (20 fields + "n"), decoded from their stored state
// as Store loads them, vs. the same values decoded from CBOR as plain `Value` trees. Inputs are
// encoded first; only the decoded results are alive between the heap readings (glibc mallinfo2:
// bytes malloc has handed out, chunk headers included), so the difference is exactly what they hold.
if enabled("memory") {
    let f = fields(targetBytes: 1_000)
    // Every document gets its own string storage, as documents decoded from storage would.
    func unique(_ i: Int) -> [String: Value] {
        var g: [String: Value] = [:]
        for (k, v) in f { g[k] = if case .string(let s) = v { .string(s + "\(i % 10)") } else { v } }
        g["n"] = .int(Int64(i))
        return g
    }
    let count = 20_000
    var plainInputs: [[UInt8]] = [], stateInputs: [[UInt8]] = [], fieldByField: [[UInt8]] = [], jsonBytes = 0
    for i in 0..<count {
        let u = unique(i)
        let withID = u.merging(["_id": .string("doc\(i)")]) { a, _ in a }  // what materialize() returns
        jsonBytes += jsonSize(.object(withID))
        plainInputs.append(CBORValueCodec.encode(.object(withID)))
        var d = try Document(id: .string("doc\(i)"))
        _ = try d.upsert(u, replica: &writer)
        stateInputs.append(d.encode())
        // The least favourable history: every field rewritten by its own operation (one Meta each).
        if i < count / 4 {
            for (k, v) in u { _ = try d.set(FieldPath([k]), to: v, replica: &writer) }
            fieldByField.append(d.encode())
        }
    }
    var plain: [Value] = [], docs: [Document] = []
    plain.reserveCapacity(count)
    docs.reserveCapacity(count)
    let h0 = bp_heap_in_use()
    for bytes in plainInputs { plain.append(try CBORValueCodec.decode(bytes)) }
    let h1 = bp_heap_in_use()
    for bytes in stateInputs { docs.append(try Document.decode(bytes)) }
    let h2 = bp_heap_in_use()
    // The same keys and values without CRDT metadata, in the sorted key and value arrays a MAP
    // node keeps (no hash-table slack): what holding just the data costs in the Document's layout.
    var flat: [(ContiguousArray<String>, ContiguousArray<Value>)] = []
    flat.reserveCapacity(count)
    let h3 = bp_heap_in_use()
    for bytes in plainInputs {
        guard case .object(let o) = try CBORValueCodec.decode(bytes) else { continue }
        let keys = ContiguousArray(CBORKeyOrder.sorted(o.keys))
        flat.append((keys, ContiguousArray(keys.map { o[$0] ?? .null })))
    }
    let h4 = bp_heap_in_use()
    // Inline parts live in the preallocated arrays (not counted above): add their strides.
    let valueBytes = Double(h1 - h0) / Double(count) + Double(MemoryLayout<Value>.stride)
    let docBytes = Double(h2 - h1) / Double(count) + Double(MemoryLayout<Document>.stride)
    let flatBytes = Double(h4 - h3) / Double(count) + Double(MemoryLayout<(ContiguousArray<String>, ContiguousArray<Value>)>.stride)
    let json = Double(jsonBytes) / Double(count)
    let state = docs[0].encode().count
    let cbor = CBORValueCodec.encode(docs[0].materialize() ?? .null).count
    line("")
    line("Memory per document, ~\(Int(json)) B of JSON with \(f.count + 1) fields (+ _id), mean over \(count) documents (mallinfo2 heap deltas + inline strides):")
    line("- plain `Value` tree decoded from CBOR: \(Int(valueBytes)) B (\(format1(valueBytes * 100 / json))% of the JSON); CRDT `Document` decoded from its state: \(Int(docBytes)) B (\(format1(docBytes * 100 / json))%)")
    line("- the same keys and values in sorted arrays, no metadata: \(Int(flatBytes)) B (\(format1(flatBytes * 100 / json))%)")
    line("- CRDT metadata in memory (Document − sorted arrays): \(Int(docBytes - flatBytes)) B = \(format1((docBytes - flatBytes) * 100 / json))% of the JSON; Document − plain Value: \(Int(docBytes - valueBytes)) B = \(format1((docBytes - valueBytes) * 100 / json))%")
    do {
        var separate: [Document] = []
        separate.reserveCapacity(fieldByField.count)
        let h5 = bp_heap_in_use()
        for bytes in fieldByField { separate.append(try Document.decode(bytes)) }
        let h6 = bp_heap_in_use()
        let sepBytes = Double(h6 - h5) / Double(fieldByField.count) + Double(MemoryLayout<Document>.stride)
        line("- every field last written by its own operation (\(fieldByField.count) documents): Document \(Int(sepBytes)) B, metadata \(Int(sepBytes - flatBytes)) B = \(format1((sepBytes - flatBytes) * 100 / json))% of the JSON")
        withExtendedLifetime(separate) {}
    }
    line("- encoded state: \(state) B vs. \(cbor) B canonical CBOR of the value alone: metadata \(state - cbor) B = \(format1(Double(state - cbor) * 100 / json))% of the JSON")
    withExtendedLifetime((plain, docs, flat, plainInputs, stateInputs, fieldByField)) {}
}

if enabled("sizes") {
line("| document (JSON) | fields | state bytes | one-field delta bytes (field's own CBOR) | delta(since:) | materialize | encode | decode |")
line("|---|---|---|---|---|---|---|---|")
for target in [1_000, 250_000, 5_000_000] {
    let f = fields(targetBytes: target)
    var doc = try Document(id: "bench")
    _ = try doc.upsert(f, replica: &writer)
    let json = jsonSize(.object(f))
    let since = doc.versionVector
    _ = try doc.set("field_2", to: "a changed value", replica: &writer)
    let delta = doc.delta(since: since).encode()
    let fieldSize = CBORValueCodec.encode("field_2").count + CBORValueCodec.encode("a changed value").count
    let state = doc.encode()
    let runs = target > 1_000_000 ? 3 : 7
    let reps = target < 10_000 ? 1000 : 1
    let tDelta = measure(runs: runs) { for _ in 0..<reps { _ = doc.delta(since: since) } } / Double(reps)
    let tMat = measure(runs: runs) { for _ in 0..<reps { _ = doc.materialize() } } / Double(reps)
    let tEnc = measure(runs: runs) { for _ in 0..<reps { _ = doc.encode() } } / Double(reps)
    let tDec = try measure(runs: runs) { for _ in 0..<reps { _ = try Document.decode(state) } } / Double(reps)
    let mb = Double(state.count) / 1e6
    func fmt(_ s: Double) -> String { s < 1e-3 ? String(format1(s * 1e6)) + " µs" : String(format1(s * 1e3)) + " ms" }
    line("| \(json / 1000) KB | \(f.count) | \(state.count) | \(delta.count) (\(fieldSize)) | \(fmt(tDelta)) | \(fmt(tMat)) | \(fmt(tEnc)) (\(format1(mb / tEnc)) MB/s) | \(fmt(tDec)) (\(format1(mb / tDec)) MB/s) |")
}
}

func format1(_ d: Double) -> String {
    let r = (d * 10).rounded() / 10
    return String(r)
}

// Merge throughput: one-field deltas from a writer into a receiver holding a 1 000-field document.
if enabled("merge") {
    var source = try Document(id: "m")
    _ = try source.upsert(fields(targetBytes: 50_000), replica: &writer)
    var receiver = try Document(id: "m")
    _ = try receiver.merge(source.delta(since: receiver.versionVector))
    var deltas: [[UInt8]] = []
    let n = 20_000
    for i in 0..<n {
        let since = source.versionVector
        _ = try source.set(FieldPath(["field_\(i % 1000)"]), to: .int(Int64(i)), replica: &writer)
        deltas.append(source.delta(since: since).encode())
    }
    let decoded = try deltas.map { try Delta.decode($0) }
    var r1 = receiver
    let tMerge = try measure(runs: 1) { for d in decoded { _ = try r1.merge(d) } }
    var r2 = receiver
    let tBoth = try measure(runs: 1) { for d in deltas { _ = try r2.merge(try Delta.decode(d)) } }
    line("")
    line("Merge throughput (one-field deltas into a 1 000-field, ~50 KB document, single thread):")
    line("- merge only: \(Int(Double(n) / tMerge)) deltas/s; decode + merge: \(Int(Double(n) / tBoth)) deltas/s")
    precondition(r1.encode() == source.encode() && r2.encode() == source.encode())
}


// Bounded metadata: one register overwritten a million times.
if enabled("overwrite") {
    var d = try Document(id: "hot")
    _ = try d.upsert(fields(targetBytes: 1_000), replica: &writer)
    let before = d.encode().count
    let t = measure(runs: 1) {
        for i in 0..<1_000_000 { _ = try? d.set("field_2", to: .int(Int64(i % 1000)), replica: &writer) }
    }
    line("")
    line("One REGISTER overwritten 1 000 000 times: state \(before) B before, \(d.encode().count) B after (\(Int(1_000_000 / t)) local writes/s)")
}
