// libFuzzer entry point for the CRDT decoders (document state, delta) and the CBOR Value decoder.
// Build and run with `scripts/fuzz.sh CRDTDecode <seconds>`.
//
// Oracles beyond "does not crash": anything that decodes must re-encode to bytes that decode and
// re-encode to the same bytes, and merging a decoded delta into a valid document must keep it encodable and decodable.

import CRDT
import Values

#if canImport(Glibc)
import Glibc
#endif

private func check(_ condition: Bool, _ message: String) {
    if !condition {
        fputs("fuzz oracle failed: \(message)\n", stderr)
        abort()
    }
}

/// A small but varied document used as a merge target and as seed material.
private func sampleDocument() -> Document? {
    var ra = Replica(site: SiteID(0xA), wallClock: { 1_700_000_000_000 })
    var rb = Replica(site: SiteID(0xB), wallClock: { 1_700_000_000_500 })
    guard var a = try? Document(id: "doc"), var b = try? Document(id: "doc") else { return nil }
    _ = try? a.upsert(["m": ["k": [1, 2.5, "x"], "j": nil], "s": "text"], types: .nonStrict, replica: &ra)
    _ = try? b.merge(a.delta(since: b.versionVector))
    _ = try? a.increment("c", by: 3, replica: &ra)
    _ = try? b.increment("c", by: -4, replica: &rb)
    _ = try? b.restart("r", with: 9, replica: &rb)
    _ = try? a.setAttachment("f", AttachmentToken(id: "blob", length: 3, metadata: ["t": "png"]), replica: &ra)
    _ = try? a.unset("m.k", replica: &ra)
    _ = try? b.insertInitial(["i": true], replica: &rb)
    _ = try? b.merge(a.delta(since: b.versionVector))
    return b
}

private let target = sampleDocument()

@_cdecl("LLVMFuzzerInitialize")
public func fuzzInitialize(_ argc: UnsafeMutablePointer<CInt>, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>>) -> CInt {
    // `CRDT_FUZZ_SEEDS=dir` writes a few valid encodings there to start the corpus from.
    guard let dir = getenv("CRDT_FUZZ_SEEDS"), let doc = target else { return 0 }
    let seeds: [[UInt8]] = [
        doc.encode(),
        doc.delta(since: VersionVector()).encode(),
        CBORValueCodec.encode(doc.materialize() ?? .null),
    ]
    for (i, seed) in seeds.enumerated() {
        let path = String(cString: dir) + "/seed\(i)"
        guard let f = fopen(path, "wb") else { continue }
        _ = seed.withUnsafeBufferPointer { fwrite($0.baseAddress, 1, $0.count, f) }
        fclose(f)
    }
    return 0
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    if let doc = try? Document.decode(bytes) {
        // Compare encodings, not values: a `Value` holding NaN is never `==` to itself.
        let again = doc.encode()
        let back = try? Document.decode(again)
        check(back?.encode() == again, "state re-encoding does not decode to the same bytes")
        _ = doc.materialize()
        _ = doc.delta(since: VersionVector())
    }
    if let delta = try? Delta.decode(bytes) {
        let again = delta.encode()
        check((try? Delta.decode(again))?.encode() == again, "delta re-encoding does not decode to the same bytes")
        if var t = target {
            if (try? t.merge(delta)) != nil {
                let s = t.encode()
                check((try? Document.decode(s))?.encode() == s, "merged state does not round-trip")
                _ = t.materialize()
            }
        }
        if var empty = try? Document(id: "doc"), (try? empty.merge(delta)) != nil {
            _ = empty.materialize()
            _ = empty.encode()
        }
    }
    if let v = try? CBORValueCodec.decode(bytes) {
        check(CBORValueCodec.encode(v) == bytes, "canonical Value does not re-encode to its bytes")
    }
    return 0
}
