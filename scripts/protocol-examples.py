#!/usr/bin/env python3
"""Prints the hex examples of docs/PROTOCOL.md from an encoder written independently of the Swift
codec (RFC 8949 §4.2.1 deterministic CBOR: shortest heads, map keys sorted by their encoded bytes).
Tests/SyncTests/ProtocolExampleTests.swift decodes every example in the document, so the document,
this script and the Swift codec cannot drift apart silently."""

def head(major, n):
    if n < 24: return bytes([major << 5 | n])
    for ai, width in ((24, 1), (25, 2), (26, 4), (27, 8)):
        if n < 1 << (8 * width): return bytes([major << 5 | ai]) + n.to_bytes(width, "big")
    raise ValueError(n)

def enc(v):
    if v is None: return b"\xf6"
    if v is True: return b"\xf5"
    if v is False: return b"\xf4"
    if isinstance(v, int): return head(0, v) if v >= 0 else head(1, -1 - v)
    if isinstance(v, str): b = v.encode(); return head(3, len(b)) + b
    if isinstance(v, bytes): return head(2, len(v)) + v
    if isinstance(v, list): return head(4, len(v)) + b"".join(enc(x) for x in v)
    if isinstance(v, dict):
        items = sorted((enc(k), enc(x)) for k, x in v.items())
        return head(5, len(items)) + b"".join(k + x for k, x in items)
    raise TypeError(v)

D = bytes.fromhex("01a0")  # stands in for a CRDT delta / state (opaque to the message layer)
EXAMPLES = [
    ("hello", {"t": "hello", "v": 1, "site": 0x1122334455667788, "key": bytes.fromhex("a1b2c3d4"),
               "name": "tablet-7", "meta": {"app": "pos"}, "cred": {"apiKey": "k_live_1"},
               "credit": 262144, "max": 1048576}),
    ("welcome", {"t": "welcome", "v": 1, "site": 42, "session": "s-9f2c", "hb": 20000,
                 "max": 16777216, "credit": 1048576}),
    ("refuse", {"t": "refuse", "code": 4001, "reason": "invalid API key"}),
    ("sub", {"t": "sub", "id": 1, "q": "SELECT * FROM cars WHERE color = :c", "args": {"c": "red"}}),
    ("sub-resume", {"t": "sub", "id": 1, "q": "SELECT * FROM cars WHERE color = :c", "args": {"c": "red"},
                    "cp": 1207, "have": bytes.fromhex("0000000000000001ffffffffffffff00")}),
    ("sub-known", {"t": "sub", "id": 2, "q": "SELECT * FROM cars",
                   "known": bytes.fromhex("31b33814aadbb9ef0123456789abcdef")}),
    ("unsub", {"t": "unsub", "id": 1}),
    ("sub_error", {"t": "sub_error", "id": 2, "msg": "syntax error at 1:8: expected FROM, found end of input"}),
    ("docs", {"t": "docs", "id": 1, "docs": [{"c": "cars", "id": "car-1", "kind": "upsert", "state": D}]}),
    ("synced", {"t": "synced", "id": 1, "cp": 1207}),
    ("changes", {"t": "changes", "txn": 1208, "docs": [{"c": "cars", "id": "car-1", "kind": "upsert", "delta": D},
                                                        {"c": "cars", "id": {"vin": "W0L1"}, "kind": "delete", "delta": D}]}),
    ("checkpoint", {"t": "checkpoint", "txn": 1208}),
    ("up", {"t": "up", "seq": 5, "docs": [{"c": "cars", "id": "car-1", "delta": D}]}),
    ("ack", {"t": "ack", "seq": 5, "txn": 1209}),
    ("ack-rejected", {"t": "ack", "seq": 6, "txn": 1209, "rejected": [{"i": 0, "msg": "delta does not follow the stored version: send the full state"}]}),
    ("want", {"t": "want", "docs": [{"c": "cars", "id": "car-9"}]}),
    ("credit", {"t": "credit", "bytes": 65536}),
    ("ping", {"t": "ping", "n": 7}),
    ("pong", {"t": "pong", "n": 7}),
    ("bye", {"t": "bye", "code": 1000, "reason": ""}),
    ("auth", {"t": "auth", "cred": {"jwt": "eyJhbGciOiJIUzI1NiJ9.e30.sig"}}),
    ("auth_ok", {"t": "auth_ok"}),
    ("auth_ok-ttl", {"t": "auth_ok", "ttl": 3540000, "info": {"plan": "field"}}),
    ("renew", {"t": "renew", "ttl": 60000}),
    # A tablet's own record (hops 0, one LAN link to the node) and the node's record forwarded once.
    ("presence", {"t": "presence", "recs": [
        {"pk": bytes.fromhex("a1b2c3d4"), "ep": 1764126000000, "seq": 3, "hops": 0, "ttl": 60000, "name": "tablet-7",
         "os": "Linux", "sdk": "bigpeer-1", "cloud": True, "meta": {"role": "till"}, "idmeta": {},
         "links": [{"pk": bytes.fromhex("0000000000000042"), "type": "AccessPoint"}]},
        {"pk": bytes.fromhex("0000000000000042"), "ep": 1764125000000, "seq": 9, "hops": 1, "ttl": 41250, "name": "node-1",
         "os": "Linux", "sdk": "bigpeer-1", "cloud": True, "meta": {}, "idmeta": {},
         "links": [{"pk": bytes.fromhex("a1b2c3d4"), "type": "AccessPoint"},
                   {"pk": bytes.fromhex("0000000000000007"), "type": "WebSocket"}]}]}),
    ("hello-caps", {"t": "hello", "v": 1, "site": 0x1122334455667788, "key": bytes.fromhex("a1b2c3d4"),
                    "name": "tablet-7", "meta": {}, "caps": ["query"], "credit": 262144, "max": 1048576}),
    ("query", {"t": "query", "id": 1, "q": "SELECT * FROM cars WHERE color = :c", "args": {"c": "red"},
               "ms": 10000, "max": 4194304}),
    ("result", {"t": "result", "id": 1, "ms": 3, "items": [{"_id": "car-1", "color": "red"}]}),
    ("result-error", {"t": "result", "id": 2, "ms": 0,
                      "err": {"code": "not_allowed", "msg": "remote queries are not allowed by this peer"}}),
    ("hello-resume", {"t": "hello", "v": 1, "site": 0x1122334455667788, "key": bytes.fromhex("a1b2c3d4"),
                      "name": "tablet-7", "meta": {}, "caps": ["resume"], "credit": 262144, "max": 1048576,
                      "resume": {"tok": bytes(range(16)), "rx": 812}}),
    ("welcome-token", {"t": "welcome", "v": 1, "site": 42, "session": "s-9f2c", "hb": 20000, "max": 16777216,
                       "credit": 1048576, "tok": bytes(range(16))}),
    ("welcome-resumed", {"t": "welcome", "v": 1, "site": 42, "session": "s-9f2c", "hb": 20000, "max": 16777216,
                         "credit": 0, "tok": bytes(range(16)), "rx": 95}),
    ("rack", {"t": "rack", "n": 812}),
    ("welcome-ttl", {"t": "welcome", "v": 1, "site": 42, "session": "s-9f2c", "hb": 20000, "max": 16777216,
                     "credit": 1048576, "ttl": 3599000, "info": {"plan": "field"}}),
    ("gone", {"t": "gone", "docs": [{"c": "cars", "id": "car-9"}]}),
]

def fnv1a64(collection, id_value):
    h = 0xcbf29ce484222325
    for b in collection.encode() + b"\x00" + enc(id_value):
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h

def state_digest(state):
    """PROTOCOL.md §4.3 `known`: the first 8 bytes of SHA-256 over the CRDT state, big-endian."""
    import hashlib
    return int.from_bytes(hashlib.sha256(state).digest()[:8], "big")

if __name__ == "__main__":
    for name, msg in EXAMPLES:
        data = enc(msg).hex()
        print(f"```hex example={name}")
        for i in range(0, len(data), 64):
            print(" ".join(data[j:j + 2] for j in range(i, min(i + 64, len(data)), 2)))
        print("```")
    print("fnv1a64('cars', 'car-1') = %016x" % fnv1a64("cars", "car-1"))
    print("fnv1a64('cars', {'vin': 'W0L1'}) = %016x" % fnv1a64("cars", {"vin": "W0L1"}))
    print("state digest of bytes 01 a0 = %016x" % state_digest(D))
