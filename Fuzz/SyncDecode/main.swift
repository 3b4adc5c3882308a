// libFuzzer entry point for the sync protocol message decoder (docs/PROTOCOL.md §3, §4).
// Build and run with `scripts/fuzz.sh SyncDecode <seconds>`; the codec's source files are compiled
// into this binary directly (they need only `Values`), so the fuzzer does not build Store/Postgres.
//
// Oracles beyond "does not crash": a message that decodes re-encodes canonically to bytes that
// decode to the same message and encode to the same bytes again.

import SyncProtocol
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

private let seeds: [SyncMessage] = [
    .hello(Hello(site: 7, peerKey: [1, 2], deviceName: "d", metadata: ["a": [1, 2.5, nil]], credentials: .jwt("x.y.z"),
                 credit: 65536, maxMessageSize: 1 << 20)),
    .subscribe(Subscribe(id: 1, query: "SELECT * FROM cars WHERE color = :c", arguments: ["c": "red"], checkpoint: 9, have: [1, 2])),
    .changes(txn: 5, entries: [ChangeEntry(document: DocumentRef(collection: "c", id: ["k": 1]), kind: .delete, payload: .delta([1, 2]))]),
    .documents(subscription: 2, entries: [ChangeEntry(document: DocumentRef(collection: "c", id: "a"), kind: .upsert, payload: .state([3]))]),
    .upload(seq: 3, entries: [UploadEntry(document: DocumentRef(collection: "c", id: "a"), delta: [4])]),
    .ack(seq: 3, txn: 4, rejected: [UploadRejection(index: 0, message: "m")]),
    .want([DocumentRef(collection: "c", id: "a")]),
    .welcome(Welcome(site: 1, sessionID: "s", heartbeatMillis: 20000, maxMessageSize: 1 << 24, credit: 1 << 20)),
    .bye(code: 1000, reason: "bye"),
    .hello(Hello(site: 8, peerKey: [3], deviceName: "", credentials: nil, credit: 65536, maxMessageSize: 65536, capabilities: ["query"])),
    .query(RemoteQuery(id: 1, statement: "SELECT * FROM c WHERE a = :a", arguments: ["a": 1], timeoutMillis: 10_000, maxResultBytes: 4096)),
    .result(RemoteQueryResult(id: 1, outcome: .success([["_id": "a", "n": [1, 2.5, nil, true]]]), warnings: ["w"], elapsedMillis: 3)),
    .result(RemoteQueryResult(id: 2, outcome: .failure(.notAllowedByPeer))),
]

@_cdecl("LLVMFuzzerInitialize")
public func fuzzInitialize(_ argc: UnsafeMutablePointer<CInt>, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>>) -> CInt {
    // `CRDT_FUZZ_SEEDS=dir` (the variable scripts/fuzz.sh sets) writes valid messages there.
    guard let dir = getenv("CRDT_FUZZ_SEEDS") else { return 0 }
    for (i, m) in seeds.enumerated() {
        let bytes = m.encode()
        if let f = fopen(String(cString: dir) + "/seed\(i)", "wb") {
            _ = bytes.withUnsafeBufferPointer { fwrite($0.baseAddress, 1, $0.count, f) }
            fclose(f)
        }
    }
    return 0
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    guard let m = try? SyncMessageDecoder.decode(bytes) else { return 0 }
    let encoded = m.encode()
    guard let again = try? SyncMessageDecoder.decode(encoded) else {
        check(false, "re-encoding of a decoded \(m.typeName) does not decode")
        return 0
    }
    check(again == m, "\(m.typeName) changed in a round trip")
    check(again.encode() == encoded, "\(m.typeName) re-encodes differently")
    return 0
}
