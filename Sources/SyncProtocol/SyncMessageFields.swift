// Per-message field validation for SyncMessageDecoder: required keys, CBOR types and ranges
// (PROTOCOL.md §4 CDDL), each failure a typed `SyncProtocolError` naming the message and field.

import Values

struct Fields {
    let type: String
    let items: [String: (item: SyncItem, size: Int)]
    let limits: SyncLimits

    typealias E = SyncProtocolError

    func message() throws(E) -> SyncMessage {
        switch type {
        case "hello": return .hello(try hello())
        case "welcome":
            return .welcome(Welcome(version: try uint("v"), site: try uint("site"), sessionID: try text("session", max: 64, min: 1),
                                    heartbeatMillis: try uint("hb"), maxMessageSize: try uint("max"), credit: try uint("credit"),
                                    resumeToken: items["tok"] == nil ? nil : try resumeToken(try bytes("tok", max: 64)),
                                    resumedReceived: items["rx"] == nil ? nil : try uint("rx"), credentials: try credentialStatus()))
        case "refuse": return .refuse(code: try code(), reason: try text("reason", max: limits.maxReasonBytes))
        case "sub": return .subscribe(try subscribe())
        case "unsub": return .unsubscribe(id: try subID("id"))
        case "sub_error": return .subscriptionError(id: try subID("id"), message: try text("msg", max: 64 << 10))
        case "docs": return .documents(subscription: try subID("id"), entries: try entries(allowEmpty: true))
        case "synced": return .synced(subscription: try subID("id"), checkpoint: try txn("cp"))
        case "changes": return .changes(txn: try txn("txn"), entries: try entries(allowEmpty: false))
        case "checkpoint": return .checkpoint(txn: try txn("txn"))
        case "up": return .upload(seq: try uint("seq"), entries: try uploadEntries())
        case "ack": return .ack(seq: try uint("seq"), txn: try txn("txn"), rejected: try rejections())
        case "want": return .want(try documentRefs())
        case "gone": return .gone(try documentRefs())
        case "credit":
            let bytes = try uint("bytes")
            guard bytes >= 1 && bytes <= UInt64(limits.maxOutstandingCredit) else {
                throw .outOfRange(type: type, field: "bytes", reason: "must be 1...\(limits.maxOutstandingCredit)")
            }
            return .credit(bytes: bytes)
        case "ping": return .ping(try uint("n"))
        case "pong": return .pong(try uint("n"))
        case "rack": return .received(try uint("n"))
        case "bye": return .bye(code: try code(), reason: try text("reason", max: limits.maxReasonBytes))
        case "auth":
            guard let c = try credentials() else { throw .missingField(type: type, field: "cred") }
            return .refreshAuth(c)
        case "auth_ok": return .authRefreshed(try credentialStatus())
        case "renew": return .credentialsExpiring(inMillis: try uint("ttl"))
        case "presence": return .presence(try presenceRecords())
        case "query": return .query(try remoteQuery())
        case "result": return .result(try remoteQueryResult())
        default: throw .unknownType(type)
        }
    }

    // MARK: - Messages with structure

    func hello() throws(E) -> Hello {
        let metaSize = items["meta"]?.size ?? 0
        let meta = try object("meta", depth: limits.maxValueDepth)
        guard meta.count <= limits.maxMetadataEntries, metaSize <= limits.maxMetadataBytes else {
            throw .outOfRange(type: type, field: "meta", reason: "at most \(limits.maxMetadataEntries) entries and \(limits.maxMetadataBytes) bytes")
        }
        let credentials = try credentials()
        let site = try uint("site")
        guard site != 0 else { throw .outOfRange(type: type, field: "site", reason: "site id 0 is reserved") }
        let key = try bytes("key", max: limits.maxPeerKeyBytes)
        guard !key.isEmpty else { throw .outOfRange(type: type, field: "key", reason: "must not be empty") }
        return Hello(version: try uint("v"), site: site, peerKey: key, deviceName: try text("name", max: limits.maxDeviceNameBytes),
                     metadata: meta, credentials: credentials, credit: try uint("credit"), maxMessageSize: try uint("max"),
                     capabilities: try capabilities(), resume: try resumeRequest())
    }

    /// `hello.resume`: `{"rx": uint, "tok": bstr .size 16}` (absent: a new session).
    func resumeRequest() throws(E) -> ResumeRequest? {
        guard let r = items["resume"] else { return nil }
        guard case .map(let m) = r.item, m.count == 2, case .unsigned(let rx)? = m["rx"], case .bytes(let tok)? = m["tok"] else {
            throw .wrongType(type: type, field: "resume", expected: "{\"rx\": unsigned, \"tok\": byte string}")
        }
        return ResumeRequest(token: try resumeToken(tok), received: rx)
    }

    func resumeToken(_ bytes: [UInt8]) throws(E) -> [UInt8] {
        guard bytes.count == SessionResumption.tokenSize else {
            throw .outOfRange(type: type, field: "tok", reason: "a resume token is \(SessionResumption.tokenSize) bytes")
        }
        return bytes
    }

    /// `hello.caps`: at most 16 names of 1...32 bytes (absent: none).
    func capabilities() throws(E) -> [String] {
        guard items["caps"] != nil else { return [] }
        let list = try array("caps", minCount: 0)
        guard list.count <= 16 else { throw .outOfRange(type: type, field: "caps", reason: "at most 16 capabilities") }
        var out: [String] = []
        for item in list {
            guard case .text(let c) = item, (1...32).contains(c.utf8.count) else {
                throw .wrongType(type: type, field: "caps[]", expected: "a text string of 1...32 bytes")
            }
            out.append(c)
        }
        return out
    }

    /// `ttl` and `info` of `welcome` and `auth_ok` (each absent: none).
    func credentialStatus() throws(E) -> CredentialStatus {
        var status = CredentialStatus(validForMillis: items["ttl"] == nil ? nil : try uint("ttl"))
        if let info = items["info"] {
            guard info.size <= limits.maxMetadataBytes else {
                throw .outOfRange(type: type, field: "info", reason: "larger than \(limits.maxMetadataBytes) bytes")
            }
            status.clientInfo = try value(info.item, field: "info", depth: limits.maxValueDepth)
        }
        return status
    }

    /// `cred` of `hello` and `auth` (nil when absent).
    func credentials() throws(E) -> SyncCredentials? {
        guard let c = items["cred"] else { return nil }
        guard c.size <= limits.maxCredentialBytes else { throw .outOfRange(type: type, field: "cred", reason: "larger than \(limits.maxCredentialBytes) bytes") }
        let expected = "{\"apiKey\": text}, {\"jwt\": text} or {\"provider\": text, \"token\": text}"
        guard case .map(let m) = c.item else { throw .wrongType(type: type, field: "cred", expected: expected) }
        switch (m.count, m["apiKey"], m["jwt"], m["provider"], m["token"]) {
        case (1, .text(let k)?, nil, nil, nil): return .apiKey(k)
        case (1, nil, .text(let j)?, nil, nil): return .jwt(j)
        case (2, nil, nil, .text(let name)?, .text(let token)?): return .provider(name, token: token)
        default: throw .wrongType(type: type, field: "cred", expected: expected)
        }
    }

    func subscribe() throws(E) -> Subscribe {
        let query = try text("q", max: limits.maxQueryBytes, min: 1)
        var arguments: [String: Value] = [:]
        if items["args"] != nil {
            guard (items["args"]?.size ?? 0) <= limits.maxArgumentsBytes else {
                throw .outOfRange(type: type, field: "args", reason: "larger than \(limits.maxArgumentsBytes) bytes")
            }
            arguments = try object("args", depth: limits.maxValueDepth)
        }
        let checkpoint: Int64? = items["cp"] == nil ? nil : try txn("cp")
        var have: [UInt64]? = nil
        if items["have"] != nil {
            let raw = try bytes("have", max: limits.maxMessageSize)
            guard raw.count % 8 == 0 else { throw .outOfRange(type: type, field: "have", reason: "length must be a multiple of 8") }
            var hashes: [UInt64] = []
            hashes.reserveCapacity(raw.count / 8)
            for i in stride(from: 0, to: raw.count, by: 8) {
                var h: UInt64 = 0
                for j in 0..<8 { h = h << 8 | UInt64(raw[i + j]) }
                if let last = hashes.last, last >= h { throw .outOfRange(type: type, field: "have", reason: "hashes must be strictly ascending") }
                hashes.append(h)
            }
            have = hashes
        }
        var known: [KnownState]? = nil
        if items["known"] != nil {
            let raw = try bytes("known", max: limits.maxMessageSize)
            let size = KnownState.encodedSize
            guard raw.count % size == 0 else { throw .outOfRange(type: type, field: "known", reason: "length must be a multiple of \(size)") }
            var entries: [KnownState] = []
            entries.reserveCapacity(raw.count / size)
            for i in stride(from: 0, to: raw.count, by: size) {
                var document: UInt64 = 0, state: UInt64 = 0
                for j in 0..<8 { document = document << 8 | UInt64(raw[i + j]) }
                for j in 8..<16 { state = state << 8 | UInt64(raw[i + j]) }
                if let last = entries.last, last.document >= document {
                    throw .outOfRange(type: type, field: "known", reason: "document hashes must be strictly ascending")
                }
                entries.append(KnownState(document: document, state: state))
            }
            known = entries
        }
        return Subscribe(id: try subID("id"), query: query, arguments: arguments, checkpoint: checkpoint, have: have, known: known)
    }

    func entries(allowEmpty: Bool) throws(E) -> [ChangeEntry] {
        let list = try array("docs", minCount: allowEmpty ? 0 : 1)
        var out: [ChangeEntry] = []
        out.reserveCapacity(list.count)
        for item in list {
            let m = try entryMap(item)
            let document = try documentRef(m)
            let kind: ChangeKind
            switch m["kind"] {
            case .text("upsert")?: kind = .upsert
            case .text("delete")?: kind = .delete
            case nil: throw .missingField(type: type, field: "docs[].kind")
            default: throw .wrongType(type: type, field: "docs[].kind", expected: "\"upsert\" or \"delete\"")
            }
            let payload: EntryPayload
            switch (m["delta"], m["state"]) {
            case (.bytes(let d)?, nil): payload = .delta(d)
            case (nil, .bytes(let s)?): payload = .state(s)
            default: throw .wrongType(type: type, field: "docs[]", expected: "exactly one of \"delta\" or \"state\", a byte string")
            }
            out.append(ChangeEntry(document: document, kind: kind, payload: payload))
        }
        return out
    }

    func uploadEntries() throws(E) -> [UploadEntry] {
        let list = try array("docs", minCount: 1)
        guard list.count <= limits.maxUploadDocuments else { throw .outOfRange(type: type, field: "docs", reason: "at most \(limits.maxUploadDocuments) documents") }
        var out: [UploadEntry] = []
        out.reserveCapacity(list.count)
        for item in list {
            let m = try entryMap(item)
            guard case .bytes(let d)? = m["delta"] else { throw .wrongType(type: type, field: "docs[].delta", expected: "a byte string") }
            out.append(UploadEntry(document: try documentRef(m), delta: d))
        }
        return out
    }

    /// `docs` of `want` and `gone`: 1...`maxWantDocuments` `{c, id}`.
    func documentRefs() throws(E) -> [DocumentRef] {
        let list = try array("docs", minCount: 1)
        guard list.count <= limits.maxWantDocuments else { throw .outOfRange(type: type, field: "docs", reason: "at most \(limits.maxWantDocuments) documents") }
        var out: [DocumentRef] = []
        for item in list { out.append(try documentRef(try entryMap(item))) }
        return out
    }

    func rejections() throws(E) -> [UploadRejection] {
        guard items["rejected"] != nil else { return [] }
        var out: [UploadRejection] = []
        for item in try array("rejected", minCount: 1) {
            let m = try entryMap(item)
            guard case .unsigned(let i)? = m["i"], i <= UInt64(Int32.max) else { throw .wrongType(type: type, field: "rejected[].i", expected: "an unsigned integer") }
            guard case .text(let msg)? = m["msg"] else { throw .wrongType(type: type, field: "rejected[].msg", expected: "a text string") }
            out.append(UploadRejection(index: Int(i), message: msg))
        }
        return out
    }

    // MARK: - Field readers

    func entryMap(_ item: SyncItem) throws(E) -> [String: SyncItem] {
        guard case .map(let m) = item else { throw .wrongType(type: type, field: "docs[]", expected: "a map") }
        return m
    }

    func documentRef(_ m: [String: SyncItem]) throws(E) -> DocumentRef {
        guard case .text(let c)? = m["c"] else { throw .wrongType(type: type, field: "docs[].c", expected: "a text string") }
        guard !c.isEmpty && c.utf8.count <= limits.maxCollectionBytes else {
            throw .outOfRange(type: type, field: "docs[].c", reason: "1...\(limits.maxCollectionBytes) bytes")
        }
        guard let idItem = m["id"] else { throw .missingField(type: type, field: "docs[].id") }
        let id = try value(idItem, field: "docs[].id", depth: limits.maxValueDepth)
        switch id {
        case .string, .object: break
        default: throw .wrongType(type: type, field: "docs[].id", expected: "a text string or a map")
        }
        return DocumentRef(collection: c, id: id)
    }

    func item(_ k: String) throws(E) -> SyncItem {
        guard let i = items[k] else { throw .missingField(type: type, field: k) }
        return i.item
    }

    func uint(_ k: String) throws(E) -> UInt64 {
        guard case .unsigned(let v) = try item(k) else { throw .wrongType(type: type, field: k, expected: "an unsigned integer") }
        return v
    }

    func txn(_ k: String) throws(E) -> Int64 {
        let v = try uint(k)
        guard v <= UInt64(Int64.max) else { throw .outOfRange(type: type, field: k, reason: "above 2^63-1") }
        return Int64(v)
    }

    func subID(_ k: String) throws(E) -> UInt32 {
        let v = try uint(k)
        guard v <= UInt64(UInt32.max) else { throw .outOfRange(type: type, field: k, reason: "above 2^32-1") }
        return UInt32(v)
    }

    func code() throws(E) -> UInt16 {
        let v = try uint("code")
        guard v <= UInt64(UInt16.max) else { throw .outOfRange(type: type, field: "code", reason: "above 65535") }
        return UInt16(v)
    }

    func text(_ k: String, max: Int, min: Int = 0) throws(E) -> String {
        guard case .text(let s) = try item(k) else { throw .wrongType(type: type, field: k, expected: "a text string") }
        guard s.utf8.count >= min && s.utf8.count <= max else { throw .outOfRange(type: type, field: k, reason: "\(min)...\(max) bytes") }
        return s
    }

    func bytes(_ k: String, max: Int) throws(E) -> [UInt8] {
        guard case .bytes(let b) = try item(k) else { throw .wrongType(type: type, field: k, expected: "a byte string") }
        guard b.count <= max else { throw .outOfRange(type: type, field: k, reason: "at most \(max) bytes") }
        return b
    }

    func array(_ k: String, minCount: Int) throws(E) -> [SyncItem] {
        guard case .array(let a) = try item(k) else { throw .wrongType(type: type, field: k, expected: "an array") }
        guard a.count >= minCount else { throw .outOfRange(type: type, field: k, reason: "must not be empty") }
        return a
    }

    func object(_ k: String, depth: Int) throws(E) -> [String: Value] {
        guard case .object(let o) = try value(try item(k), field: k, depth: depth) else { throw .wrongType(type: type, field: k, expected: "a map") }
        return o
    }

    /// A `Value` (JSON in CBOR, §3): no byte strings, integers within Int64, nesting bounded.
    func value(_ item: SyncItem, field: String, depth: Int) throws(E) -> Value {
        guard depth > 0 else { throw .outOfRange(type: type, field: field, reason: "nested deeper than \(limits.maxValueDepth)") }
        switch item {
        case .null: return .null
        case .bool(let b): return .bool(b)
        case .double(let d):
            guard d.isFinite else { throw .outOfRange(type: type, field: field, reason: "numbers must be finite (JSON)") }
            return .double(d)
        case .text(let s): return .string(s)
        case .unsigned(let u):
            guard u <= UInt64(Int64.max) else { throw .outOfRange(type: type, field: field, reason: "integer outside int64") }
            return .int(Int64(u))
        case .negative(let a):
            guard a <= UInt64(Int64.max) else { throw .outOfRange(type: type, field: field, reason: "integer outside int64") }
            return .int(-1 - Int64(a))
        case .bytes: throw .wrongType(type: type, field: field, expected: "a JSON value (no byte strings)")
        case .array(let a):
            var out: [Value] = []
            out.reserveCapacity(a.count)
            for e in a { out.append(try value(e, field: field, depth: depth - 1)) }
            return .array(out)
        case .map(let m):
            var out: [String: Value] = [:]
            out.reserveCapacity(m.count)
            for (k, e) in m { out[k] = try value(e, field: field, depth: depth - 1) }
            return .object(out)
        }
    }
}
