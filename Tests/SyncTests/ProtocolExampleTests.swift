import Foundation
import Testing
import Values
@testable import Sync
@testable import SyncProtocol

/// Every hex example in docs/PROTOCOL.md decodes to the message listed here and re-encodes to the
/// same bytes, and every message listed here has an example: the document cannot drift.
@Suite struct ProtocolExampleTests {
    static let delta: [UInt8] = [0x01, 0xA0]
    static let redCars = "SELECT * FROM cars WHERE color = :c"

    static let expected: [String: SyncMessage] = [
        "hello": .hello(Hello(site: 0x1122_3344_5566_7788, peerKey: [0xA1, 0xB2, 0xC3, 0xD4], deviceName: "tablet-7",
                              metadata: ["app": "pos"], credentials: .apiKey("k_live_1"), credit: 262_144, maxMessageSize: 1_048_576)),
        "welcome": .welcome(Welcome(site: 42, sessionID: "s-9f2c", heartbeatMillis: 20000, maxMessageSize: 16_777_216, credit: 1_048_576)),
        "refuse": .refuse(code: 4001, reason: "invalid API key"),
        "sub": .subscribe(Subscribe(id: 1, query: redCars, arguments: ["c": "red"])),
        "sub-resume": .subscribe(Subscribe(id: 1, query: redCars, arguments: ["c": "red"], checkpoint: 1207, have: [1, 0xFFFF_FFFF_FFFF_FF00])),
        "sub-known": .subscribe(Subscribe(id: 2, query: "SELECT * FROM cars", known: [
            KnownState(document: 0x31b3_3814_aadb_b9ef, state: 0x0123_4567_89ab_cdef)])),
        "unsub": .unsubscribe(id: 1),
        "sub_error": .subscriptionError(id: 2, message: "syntax error at 1:8: expected FROM, found end of input"),
        "docs": .documents(subscription: 1, entries: [ChangeEntry(document: DocumentRef(collection: "cars", id: "car-1"), kind: .upsert, payload: .state(delta))]),
        "synced": .synced(subscription: 1, checkpoint: 1207),
        "changes": .changes(txn: 1208, entries: [
            ChangeEntry(document: DocumentRef(collection: "cars", id: "car-1"), kind: .upsert, payload: .delta(delta)),
            ChangeEntry(document: DocumentRef(collection: "cars", id: ["vin": "W0L1"]), kind: .delete, payload: .delta(delta)),
        ]),
        "checkpoint": .checkpoint(txn: 1208),
        "up": .upload(seq: 5, entries: [UploadEntry(document: DocumentRef(collection: "cars", id: "car-1"), delta: delta)]),
        "ack": .ack(seq: 5, txn: 1209, rejected: []),
        "ack-rejected": .ack(seq: 6, txn: 1209, rejected: [UploadRejection(index: 0, message: "delta does not follow the stored version: send the full state")]),
        "want": .want([DocumentRef(collection: "cars", id: "car-9")]),
        "gone": .gone([DocumentRef(collection: "cars", id: "car-9")]),
        "credit": .credit(bytes: 65536),
        "ping": .ping(7),
        "pong": .pong(7),
        "bye": .bye(code: 1000, reason: ""),
        "auth": .refreshAuth(.jwt("eyJhbGciOiJIUzI1NiJ9.e30.sig")),
        "auth_ok": .authRefreshed(CredentialStatus()),
        "auth_ok-ttl": .authRefreshed(CredentialStatus(validForMillis: 3_540_000, clientInfo: ["plan": "field"])),
        "renew": .credentialsExpiring(inMillis: 60_000),
        "presence": .presence([
            PresenceRecord(peerKey: [0xA1, 0xB2, 0xC3, 0xD4], epoch: 1_764_126_000_000, seq: 3, hops: 0, ttlMillis: 60_000,
                           deviceName: "tablet-7", os: "Linux", sdkVersion: "bigpeer-1", isConnectedToBigPeer: true,
                           metadata: ["role": "till"], links: [PresenceLink(peerKey: [0, 0, 0, 0, 0, 0, 0, 0x42], type: .accessPoint)]),
            PresenceRecord(peerKey: [0, 0, 0, 0, 0, 0, 0, 0x42], epoch: 1_764_125_000_000, seq: 9, hops: 1, ttlMillis: 41_250,
                           deviceName: "node-1", os: "Linux", sdkVersion: "bigpeer-1", isConnectedToBigPeer: true,
                           links: [PresenceLink(peerKey: [0xA1, 0xB2, 0xC3, 0xD4], type: .accessPoint),
                                   PresenceLink(peerKey: [0, 0, 0, 0, 0, 0, 0, 7], type: .webSocket)]),
        ]),
        "hello-caps": .hello(Hello(site: 0x1122_3344_5566_7788, peerKey: [0xA1, 0xB2, 0xC3, 0xD4], deviceName: "tablet-7",
                                   credentials: nil, credit: 262_144, maxMessageSize: 1_048_576, capabilities: ["query"])),
        "query": .query(RemoteQuery(id: 1, statement: redCars, arguments: ["c": "red"], timeoutMillis: 10_000, maxResultBytes: 4 << 20)),
        "result": .result(RemoteQueryResult(id: 1, outcome: .success([["_id": "car-1", "color": "red"]]), elapsedMillis: 3)),
        "result-error": .result(RemoteQueryResult(id: 2, outcome: .failure(.notAllowedByPeer))),
        "hello-resume": .hello(Hello(site: 0x1122_3344_5566_7788, peerKey: [0xA1, 0xB2, 0xC3, 0xD4], deviceName: "tablet-7",
                                     credentials: nil, credit: 262_144, maxMessageSize: 1_048_576, capabilities: ["resume"],
                                     resume: ResumeRequest(token: Array(0..<16), received: 812))),
        "welcome-token": .welcome(Welcome(site: 42, sessionID: "s-9f2c", heartbeatMillis: 20000, maxMessageSize: 16_777_216, credit: 1_048_576,
                                          resumeToken: Array(0..<16))),
        "welcome-resumed": .welcome(Welcome(site: 42, sessionID: "s-9f2c", heartbeatMillis: 20000, maxMessageSize: 16_777_216, credit: 0,
                                            resumeToken: Array(0..<16), resumedReceived: 95)),
        "rack": .received(812),
        "welcome-ttl": .welcome(Welcome(site: 42, sessionID: "s-9f2c", heartbeatMillis: 20000, maxMessageSize: 16_777_216, credit: 1_048_576,
                                        credentials: CredentialStatus(validForMillis: 3_599_000, clientInfo: ["plan": "field"]))),
    ]

    /// `name -> bytes` for every ```` ```hex example=NAME ```` block of the document.
    static func examples() throws -> [String: [UInt8]] {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let text = try String(contentsOf: root.appendingPathComponent("docs/PROTOCOL.md"), encoding: .utf8)
        var out: [String: [UInt8]] = [:]
        var current: String? = nil
        var bytes: [UInt8] = []
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("```hex example=") {
                current = String(line.dropFirst("```hex example=".count))
                bytes = []
            } else if let name = current {
                if line.hasPrefix("```") {
                    out[name] = bytes
                    current = nil
                } else {
                    for pair in line.split(separator: " ") {
                        guard let b = UInt8(pair, radix: 16) else { throw CocoaError(.fileReadCorruptFile) }
                        bytes.append(b)
                    }
                }
            }
        }
        return out
    }

    @Test func documentExamples_decodeToTheListedMessages() throws {
        let examples = try Self.examples()
        #expect(Set(examples.keys) == Set(Self.expected.keys))
        for (name, bytes) in examples {
            let decoded = try SyncMessageDecoder.decode(bytes)
            #expect(decoded == Self.expected[name], "\(name)")
            #expect(decoded.encode() == bytes, "\(name) re-encodes to the same bytes")
        }
    }
}
