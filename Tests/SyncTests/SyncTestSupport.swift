@_exported import TestRandomness
import Values
@testable import Sync
@testable import SyncProtocol

/// One instance of every message type, with optional fields both present and absent.
enum SampleMessages {
    static let delta: [UInt8] = [0x01, 0xA0]
    static let car1 = DocumentRef(collection: "cars", id: "car-1")
    static let objectID = DocumentRef(collection: "cars", id: .object(["vin": "W0L1", "n": 3]))

    static let all: [SyncMessage] = [
        .hello(Hello(site: 0x1122_3344_5566_7788, peerKey: [1, 2, 3], deviceName: "tablet-7",
                     metadata: ["app": "pos", "nested": ["a": [1, 2.5, nil, true]]], credentials: .apiKey("k"),
                     credit: 1 << 18, maxMessageSize: 1 << 20)),
        .hello(Hello(site: 1, peerKey: [0], deviceName: "", credentials: .jwt("a.b.c"), credit: 65536, maxMessageSize: 65536)),
        .hello(Hello(site: 2, peerKey: [0], deviceName: "", credentials: .provider("corp", token: "t-1"), credit: 65536, maxMessageSize: 65536)),
        .hello(Hello(site: UInt64.max, peerKey: [9], deviceName: "ñ", credentials: nil, credit: 65536, maxMessageSize: 65536)),
        .hello(Hello(site: 3, peerKey: [9], deviceName: "", credentials: .apiKey("k"), credit: 65536, maxMessageSize: 65536,
                     capabilities: [SyncCapability.remoteQuery, "later"])),
        .welcome(Welcome(site: 42, sessionID: "s-1", heartbeatMillis: 20000, maxMessageSize: 16 << 20, credit: 1 << 20)),
        .refuse(code: 4001, reason: "invalid API key"),
        .subscribe(Subscribe(id: 1, query: "SELECT * FROM cars")),
        .subscribe(Subscribe(id: UInt32.max, query: "SELECT * FROM cars WHERE color = :c", arguments: ["c": "red"],
                             checkpoint: 1207, have: [1, 0xFFFF_FFFF_FFFF_FF00])),
        .subscribe(Subscribe(id: 2, query: "SELECT * FROM c", checkpoint: 0, have: [])),
        .unsubscribe(id: 1),
        .subscriptionError(id: 2, message: "syntax error"),
        .documents(subscription: 1, entries: [ChangeEntry(document: car1, kind: .upsert, payload: .state(delta))]),
        .documents(subscription: 1, entries: []),
        .synced(subscription: 1, checkpoint: 1207),
        .changes(txn: Int64.max, entries: [ChangeEntry(document: car1, kind: .upsert, payload: .delta(delta)),
                                           ChangeEntry(document: objectID, kind: .delete, payload: .delta([]))]),
        .checkpoint(txn: 0),
        .upload(seq: 5, entries: [UploadEntry(document: car1, delta: delta), UploadEntry(document: objectID, delta: [])]),
        .ack(seq: 5, txn: 1209, rejected: []),
        .ack(seq: UInt64.max, txn: 1, rejected: [UploadRejection(index: 0, message: "gap"), UploadRejection(index: 7, message: "")]),
        .want([car1, objectID]),
        .credit(bytes: 1),
        .ping(0),
        .pong(UInt64.max),
        .bye(code: 1000, reason: ""),
        .presence([PresenceRecord(peerKey: [1, 2, 3], epoch: UInt64.max, seq: 0, hops: 16, ttlMillis: 1, deviceName: "ñ", os: "", sdkVersion: "",
                                  isConnectedToBigPeer: false, metadata: ["nested": ["a": [1, 2.5, nil, true]]], identityMetadata: ["id": "x"],
                                  links: [PresenceLink(peerKey: [4], type: .bluetooth), PresenceLink(peerKey: [5, 6], type: .webSocket)]),
                   PresenceRecord(peerKey: [7], epoch: 1, seq: 2, ttlMillis: 60_000, deviceName: "")]),
        .query(RemoteQuery(id: 1, statement: "SELECT * FROM cars", timeoutMillis: 10_000, maxResultBytes: 1 << 20)),
        .query(RemoteQuery(id: UInt32.max, statement: "SELECT * FROM cars WHERE color = :c", arguments: ["c": "red"],
                           timeoutMillis: 0, maxResultBytes: 1024)),
        .result(RemoteQueryResult(id: 1, outcome: .success([["_id": "car-1", "n": [1, 2.5, nil, true]], "x"]), elapsedMillis: 3)),
        .result(RemoteQueryResult(id: 2, outcome: .success([]), warnings: ["w1", "ñ"], elapsedMillis: 0)),
        .result(RemoteQueryResult(id: 3, outcome: .failure(.notAllowedByPeer), warnings: ["w"], elapsedMillis: UInt64.max)),
        .result(RemoteQueryResult(id: 4, outcome: .failure(RemoteQueryError(.other("from_the_future"), "")))),
    ]
}
