// Encoding of sync messages: one CBOR map per message, RFC 8949 §4.2.1 deterministic form.
//
//   message = { "t": type, field: value, ... }      keys sorted by encoded bytes:
//                                                  shorter first, then bytewise ("q" < "t" < "cp")
//   e.g. checkpoint:  a2                 map(2)
//                     61 74              "t"
//                     6a 63 68 65 ...    "checkpoint"
//                     63 74 78 6e        "txn"
//                     19 04 b8           1208
//
// The key order of every message is written out by hand below (canonical order for its fixed key
// set); `SyncMessageDecoder` rejects any other order, and the round-trip tests decode everything
// this file writes, so a misordered key cannot go unnoticed.

import Values

extension SyncMessage {
    /// The message's canonical CBOR encoding (what flow control counts, PROTOCOL.md §6).
    public func encode() -> [UInt8] { encode(capacity: 64) }

    /// The same encoding into a buffer reserved for `capacity` bytes: a sender that knows the
    /// size (`ChangeEntry.encodedSize` of a batch) spares the copies of a growing buffer.
    public func encode(capacity: Int) -> [UInt8] {
        var w = CBORWriter(capacity: max(16, capacity))
        w.write(self)
        return w.bytes
    }
}

extension CBORWriter {
    fileprivate mutating func key(_ k: String) { text(k) }

    fileprivate static func appendBigEndian(_ v: UInt64, to bytes: inout [UInt8]) {
        for shift in stride(from: 56, through: 0, by: -8) { bytes.append(UInt8(truncatingIfNeeded: v >> UInt64(shift))) }
    }

    fileprivate mutating func type(_ name: String) {
        text("t")
        text(name)
    }

    mutating func write(_ m: SyncMessage) {
        switch m {
        case .hello(let h):
            // t, v, key, max, caps, cred, meta, name, site, credit, resume
            mapHeader(8 + (h.credentials == nil ? 0 : 1) + (h.capabilities.isEmpty ? 0 : 1) + (h.resume == nil ? 0 : 1))
            type("hello")
            key("v"); unsigned(h.version)
            key("key"); byteString(h.peerKey)
            key("max"); unsigned(h.maxMessageSize)
            if !h.capabilities.isEmpty {
                key("caps")
                arrayHeader(h.capabilities.count)
                for c in h.capabilities { text(c) }
            }
            if let c = h.credentials { key("cred"); write(c) }
            key("meta"); value(.object(h.metadata))
            key("name"); text(h.deviceName)
            key("site"); unsigned(h.site)
            key("credit"); unsigned(h.credit)
            if let r = h.resume {
                key("resume")
                mapHeader(2)
                key("rx"); unsigned(r.received)
                key("tok"); byteString(r.token)
            }
        case .welcome(let w):
            // t, v, hb, rx, max, tok, ttl, info, site, credit, session
            mapHeader(7 + (w.resumedReceived == nil ? 0 : 1) + (w.resumeToken == nil ? 0 : 1) + w.credentials.fieldCount)
            type("welcome")
            key("v"); unsigned(w.version)
            key("hb"); unsigned(w.heartbeatMillis)
            if let rx = w.resumedReceived { key("rx"); unsigned(rx) }
            key("max"); unsigned(w.maxMessageSize)
            if let tok = w.resumeToken { key("tok"); byteString(tok) }
            if let ttl = w.credentials.validForMillis { key("ttl"); unsigned(ttl) }
            if let info = w.credentials.clientInfo { key("info"); value(info) }
            key("site"); unsigned(w.site)
            key("credit"); unsigned(w.credit)
            key("session"); text(w.sessionID)
        case .refuse(let code, let reason):
            mapHeader(3)
            type("refuse")
            key("code"); unsigned(UInt64(code))
            key("reason"); text(reason)
        case .subscribe(let s):
            // q, t, cp, id, args, have, known
            mapHeader(3 + (s.checkpoint == nil ? 0 : 1) + (s.arguments.isEmpty ? 0 : 1) + (s.have == nil ? 0 : 1) + (s.known == nil ? 0 : 1))
            key("q"); text(s.query)
            type("sub")
            if let cp = s.checkpoint { key("cp"); unsigned(UInt64(cp)) }
            key("id"); unsigned(UInt64(s.id))
            if !s.arguments.isEmpty { key("args"); value(.object(s.arguments)) }
            if let have = s.have {
                key("have")
                var bytes: [UInt8] = []
                bytes.reserveCapacity(have.count * 8)
                for h in have { Self.appendBigEndian(h, to: &bytes) }
                byteString(bytes)
            }
            if let known = s.known {
                key("known")
                var bytes: [UInt8] = []
                bytes.reserveCapacity(known.count * KnownState.encodedSize)
                for k in known {
                    Self.appendBigEndian(k.document, to: &bytes)
                    Self.appendBigEndian(k.state, to: &bytes)
                }
                byteString(bytes)
            }
        case .unsubscribe(let id):
            mapHeader(2)
            type("unsub")
            key("id"); unsigned(UInt64(id))
        case .subscriptionError(let id, let message):
            mapHeader(3)
            type("sub_error")
            key("id"); unsigned(UInt64(id))
            key("msg"); text(message)
        case .documents(let id, let entries):
            mapHeader(3)
            type("docs")
            key("id"); unsigned(UInt64(id))
            key("docs"); write(entries)
        case .synced(let id, let cp):
            mapHeader(3)
            type("synced")
            key("cp"); unsigned(UInt64(cp))
            key("id"); unsigned(UInt64(id))
        case .changes(let txn, let entries):
            mapHeader(3)
            type("changes")
            key("txn"); unsigned(UInt64(txn))
            key("docs"); write(entries)
        case .checkpoint(let txn):
            mapHeader(2)
            type("checkpoint")
            key("txn"); unsigned(UInt64(txn))
        case .upload(let seq, let entries):
            mapHeader(3)
            type("up")
            key("seq"); unsigned(seq)
            key("docs")
            arrayHeader(entries.count)
            for e in entries {
                mapHeader(3)
                key("c"); text(e.document.collection)
                key("id"); value(e.document.id)
                key("delta"); byteString(e.delta)
            }
        case .ack(let seq, let txn, let rejected):
            mapHeader(rejected.isEmpty ? 3 : 4)
            type("ack")
            key("seq"); unsigned(seq)
            key("txn"); unsigned(UInt64(txn))
            if !rejected.isEmpty {
                key("rejected")
                arrayHeader(rejected.count)
                for r in rejected {
                    mapHeader(2)
                    key("i"); unsigned(UInt64(r.index))
                    key("msg"); text(r.message)
                }
            }
        case .want(let refs):
            mapHeader(2)
            type("want")
            key("docs"); write(refs)
        case .gone(let refs):
            mapHeader(2)
            type("gone")
            key("docs"); write(refs)
        case .credit(let bytes):
            mapHeader(2)
            type("credit")
            key("bytes"); unsigned(bytes)
        case .ping(let n):
            mapHeader(2)
            key("n"); unsigned(n)
            type("ping")
        case .pong(let n):
            mapHeader(2)
            key("n"); unsigned(n)
            type("pong")
        case .received(let n):
            mapHeader(2)
            key("n"); unsigned(n)
            type("rack")
        case .bye(let code, let reason):
            mapHeader(3)
            type("bye")
            key("code"); unsigned(UInt64(code))
            key("reason"); text(reason)
        case .refreshAuth(let c):
            mapHeader(2)
            type("auth")
            key("cred"); write(c)
        case .authRefreshed(let c):
            // t, ttl, info
            mapHeader(1 + c.fieldCount)
            type("auth_ok")
            if let ttl = c.validForMillis { key("ttl"); unsigned(ttl) }
            if let info = c.clientInfo { key("info"); value(info) }
        case .credentialsExpiring(let millis):
            mapHeader(2)
            type("renew")
            key("ttl"); unsigned(millis)
        case .presence(let records):
            write(presence: records)
        case .query(let q):
            write(query: q)
        case .result(let r):
            write(result: r)
        }
    }

    /// `{"jwt": text}`, `{"apiKey": text}` or `{"token": text, "provider": text}` (`hello.cred`, `auth.cred`).
    mutating func write(_ c: SyncCredentials) {
        switch c {
        case .jwt(let s): mapHeader(1); key("jwt"); text(s)
        case .apiKey(let s): mapHeader(1); key("apiKey"); text(s)
        case .provider(let name, let token): mapHeader(2); key("token"); text(token); key("provider"); text(name)
        }
    }

    /// `[* {c, id}]` (`want`, `gone`).
    mutating func write(_ refs: [DocumentRef]) {
        arrayHeader(refs.count)
        for r in refs {
            mapHeader(2)
            key("c"); text(r.collection)
            key("id"); value(r.id)
        }
    }

    /// `[* entry]`, each `{c, id, kind, delta | state}` in canonical key order.
    mutating func write(_ entries: [ChangeEntry]) {
        arrayHeader(entries.count)
        for e in entries { write(e) }
    }

    mutating func write(_ e: ChangeEntry) {
        mapHeader(4)
        key("c"); text(e.document.collection)
        key("id"); value(e.document.id)
        key("kind"); text(e.kind.rawValue)
        switch e.payload {
        case .delta(let d): key("delta"); byteString(d)
        case .state(let s): key("state"); byteString(s)
        }
    }
}

extension CredentialStatus {
    /// Keys it adds to `welcome` or `auth_ok`.
    var fieldCount: Int { (validForMillis == nil ? 0 : 1) + (clientInfo == nil ? 0 : 1) }
}

extension ChangeEntry {
    /// Encoded size of this entry inside a `docs`/`changes` array (for batching to a size), computed
    /// without copying the payload.
    public var encodedSize: Int {
        let n = payload.bytes.count
        return document.encodedSize + 5 + cborTextSize(kind.rawValue) + 6 + cborHeadSize(n) + n
    }
}

extension DocumentRef {
    /// Encoded size of `{c, id}` inside a `want`/`gone` array (the start of an entry's map too,
    /// whose head is the same single byte for its four keys).
    public var encodedSize: Int { 1 + 2 + cborTextSize(collection) + 3 + CBORValueCodec.encode(id).count }
}

/// Size of a CBOR text string: its head and its UTF-8 bytes.
func cborTextSize(_ s: String) -> Int { cborHeadSize(s.utf8.count) + s.utf8.count }

/// Size of a CBOR head for `n` (what an array or string header costs).
func cborHeadSize(_ n: Int) -> Int { n < 24 ? 1 : n <= 0xFF ? 2 : n <= 0xFFFF ? 3 : n <= 0xFFFF_FFFF ? 5 : 9 }
