import BigPeerTestSupport
import ServerTestSupport
import HTTP
import Testing
import Values

/// `Accept: application/cbor` / `Content-Type: application/cbor` on the store endpoints.
@Suite struct CBOREndpointTests {
    @Test func cborRequestAndResponseCarryTheSameObjectAsJSON() async throws {
        try await withServer { s in
            let key = try await s.newKey()
            let doc: Value = ["_id": "c1", "n": 7, "x": 1.5, "ok": true, "none": nil, "list": [1, "two", ["three": 3]]]
            let request: Value = ["statement": "INSERT INTO cars DOCUMENTS (:d)", "args": ["d": doc]]
            var cbor = HTTPHeaders()
            cbor.add("Content-Type", "application/cbor")
            cbor.add("Accept", "application/cbor")
            let ins = try await s.post("/api/v4/store/execute", raw: CBORValueCodec.encode(request), key: key, headers: cbor)
            #expect(ins.status == 200)
            #expect(ins.headers["Content-Type"] == "application/cbor")
            #expect(ins.headers["Vary"] == "Accept")
            #expect(ins["mutatedDocumentIds"] == ["c1"])

            let select: Value = ["statement": "SELECT * FROM cars WHERE _id = 'c1'"]
            let viaCBOR = try await s.post("/api/v4/store/execute", raw: CBORValueCodec.encode(select), key: key, headers: cbor)
            let viaJSON = try await s.post("/api/v4/store/execute", select, key: key)
            #expect(viaJSON.headers["Content-Type"] == "application/json")
            #expect(viaCBOR["items"] == [doc])
            #expect(viaCBOR.body == viaJSON.body)
            #expect(viaCBOR.raw == CBORValueCodec.encode(viaJSON.body))  // canonical encoding of the same object

            // Legacy endpoints and errors negotiate too.
            var accept = HTTPHeaders()
            accept.add("Accept", "application/json;q=0.5, application/cbor")
            let found = try await s.post("/api/v4/store/find", ["collection": "cars"], key: key, headers: accept)
            #expect(found.headers["Content-Type"] == "application/cbor")
            #expect(found["documents"] == [["id": "c1", "fields": doc]])
            let denied = try await s.post("/api/v4/store/execute", select, key: nil, headers: accept)
            #expect(denied.status == 401)
            #expect(denied.headers["Content-Type"] == "application/cbor")
            #expect(denied["queryType"] == "unknown")

            // JSON wins when preferred or when CBOR is refused.
            var prefersJSON = HTTPHeaders()
            prefersJSON.add("Accept", "application/cbor;q=0.2, application/json")
            #expect(try await s.post("/api/v4/store/execute", select, key: key, headers: prefersJSON).headers["Content-Type"] == "application/json")
            var refuses = HTTPHeaders()
            refuses.add("Accept", "application/cbor;q=0")
            #expect(try await s.post("/api/v4/store/execute", select, key: key, headers: refuses).headers["Content-Type"] == "application/json")

            // Broken CBOR is a 400, not a crash.
            var bad = HTTPHeaders()
            bad.add("Content-Type", "application/cbor")
            for junk: [UInt8] in [[0xFF], [0xBF], [0x9B, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF], []] {
                let r = try await s.post("/api/v4/store/execute", raw: junk, key: key, headers: bad)
                #expect(r.status == 400)
                #expect(r.description?.contains("not valid CBOR") == true)
            }
        }
    }
}
