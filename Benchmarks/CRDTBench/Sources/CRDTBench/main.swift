// CRDT engine measurements: merge throughput, delta sizes, materialize cost, memory per document,
// encode/decode throughput. Prints a Markdown section for docs/PERFORMANCE.md.
//
//   cd Benchmarks/CRDTBench && swift run -c release CRDTBench

import CRDT
import Values

#if canImport(Glibc)
import Glibc
#endif

func nowNanos() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
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

/// Resident set size from /proc/self/statm (malloc.h's mallinfo2 is not exported by the Glibc module).
func heapBytes() -> Int {
    guard let f = fopen("/proc/self/statm", "r") else { return 0 }
    defer { fclose(f) }
    var size = 0, resident = 0
    withUnsafeMutablePointer(to: &size) { sp in
        withUnsafeMutablePointer(to: &resident) { rp in
            var buf = [CChar](repeating: 0, count: 128)
            guard fgets(&buf, 128, f) != nil else { return }
            let text = String(decoding: buf.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            let parts = text.split(separator: " ")
            if parts.count > 1 { sp.pointee = Int(parts[0]) ?? 0; rp.pointee = Int(parts[1]) ?? 0 }
        }
    }
    return resident * Int(sysconf(Int32(_SC_PAGESIZE)))
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

var writer = Replica(site: SiteID(0x5EED_0000_0000_0001), wallClock: Replica.systemMillis)

// Memory per document (measured first, in a fresh heap, so RSS growth is real): 20 000 documents of ~1 KB (20 fields) vs. the same values as plain `Value`s.
do {
    let f = fields(targetBytes: 1_000)
    let json = jsonSize(.object(f))
    // Every document gets its own string storage, as documents decoded from storage would.
    func unique(_ i: Int) -> [String: Value] {
        var g: [String: Value] = [:]
        for (k, v) in f { g[k] = if case .string(let s) = v { .string(s + "\(i % 10)") } else { v } }
        g["n"] = .int(Int64(i))
        return g
    }
    let count = 20_000
    let h0 = heapBytes()
    var plain: [Value] = []
    for i in 0..<count { plain.append(try CBORValueCodec.decode(CBORValueCodec.encode(.object(unique(i))))) }
    let h1 = heapBytes()
    var docs: [Document] = []
    for i in 0..<count {
        var d = try Document(id: .string("doc\(i)"))
        _ = try d.upsert(unique(i), replica: &writer)
        docs.append(try Document.decode(d.encode()))  // as Store loads them
    }
    let h2 = heapBytes()
    let valueBytes = (h1 - h0) / count
    let docBytes = (h2 - h1) / count
    let state = docs[0].encode().count
    let cbor = CBORValueCodec.encode(docs[0].materialize() ?? .null).count
    line("")
    line("Memory per ~\(json)-byte JSON document with \(f.count + 1) fields (resident-set growth over \(count) documents):")
    line("- plain `Value` tree (decoded from CBOR): \(valueBytes) B; CRDT `Document` (decoded from its state): \(docBytes) B; CRDT metadata in memory: \(docBytes - valueBytes) B = \(format1(Double(docBytes - valueBytes) * 100 / Double(json)))% of the JSON")
    line("- encoded state: \(state) B vs. \(cbor) B canonical CBOR of the value alone: metadata \(state - cbor) B = \(format1(Double(state - cbor) * 100 / Double(json)))% of the JSON")
    withExtendedLifetime((plain, docs)) {}
}

line("| document (JSON) | fields | state bytes | one-field delta bytes (field's own CBOR) | materialize | encode | decode |")
line("|---|---|---|---|---|---|---|")
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
    let tMat = measure(runs: runs) { for _ in 0..<reps { _ = doc.materialize() } } / Double(reps)
    let tEnc = measure(runs: runs) { for _ in 0..<reps { _ = doc.encode() } } / Double(reps)
    let tDec = try measure(runs: runs) { for _ in 0..<reps { _ = try Document.decode(state) } } / Double(reps)
    let mb = Double(state.count) / 1e6
    func fmt(_ s: Double) -> String { s < 1e-3 ? String(format1(s * 1e6)) + " µs" : String(format1(s * 1e3)) + " ms" }
    line("| \(json / 1000) KB | \(f.count) | \(state.count) | \(delta.count) (\(fieldSize)) | \(fmt(tMat)) | \(fmt(tEnc)) (\(format1(mb / tEnc)) MB/s) | \(fmt(tDec)) (\(format1(mb / tDec)) MB/s) |")
}

func format1(_ d: Double) -> String {
    let r = (d * 10).rounded() / 10
    return String(r)
}

// Merge throughput: one-field deltas from a writer into a receiver holding a 1 000-field document.
do {
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
do {
    var d = try Document(id: "hot")
    _ = try d.upsert(fields(targetBytes: 1_000), replica: &writer)
    let before = d.encode().count
    let t = measure(runs: 1) {
        for i in 0..<1_000_000 { _ = try? d.set("field_2", to: .int(Int64(i % 1000)), replica: &writer) }
    }
    line("")
    line("One REGISTER overwritten 1 000 000 times: state \(before) B before, \(d.encode().count) B after (\(Int(1_000_000 / t)) local writes/s)")
}
