import BigPeerServer
import BigPeerTestSupport
import ServerTestSupport
import HTTP
import Testing
import Values
@testable import Auth

/// Attachments belong to no collection: uploading needs write access to some collection, downloading
/// read access to some collection (and then a readable document that references the attachment:
/// AttachmentReadRulesTests), and no key gets 401 before the upload body is read.
@Suite struct AttachmentAuthTests {
    static func upload(_ s: TestServer, key: String?) async throws -> HTTPClientResponse {
        let boundary = "b0undary"
        let body = Array("--\(boundary)\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.txt\"\r\nContent-Type: text/plain\r\n\r\nhello attachments\r\n--\(boundary)--\r\n".utf8)
        var h: HTTPHeaders = ["Content-Type": "multipart/form-data; boundary=\(boundary)"]
        if let key { h.add("Authorization", "Bearer \(key)") }
        return try await s.http.execute(HTTPClientRequest(method: .POST, url: "http://127.0.0.1:\(s.service.port)/api/v4/attachments/upload",
                                                            headers: h, body: body))
    }

    static func download(_ s: TestServer, _ id: String, key: String?) async throws -> HTTPClientResponse {
        var h = HTTPHeaders()
        if let key { h.add("Authorization", "Bearer \(key)") }
        return try await s.http.execute(HTTPClientRequest(method: .GET, url: "http://127.0.0.1:\(s.service.port)/api/v4/attachments/\(id)", headers: h))
    }

    @Test func uploadAndDownloadNeedKeysWithSomeScope() async throws {
        try await withServer { s in
            let noKey = try await Self.upload(s, key: nil)
            #expect(noKey.status.code == 401)
            #expect(noKey.headers["WWW-Authenticate"] != nil)

            let readOnly = try await s.newKey(read: .all, write: .none)
            #expect(try await Self.upload(s, key: readOnly).status.code == 403)

            let writer = try await s.newKey(read: .none, write: .only(["cars"]))
            let ok = try await Self.upload(s, key: writer)
            #expect(ok.status.code == 200)
            let id = try #require(try JSON.parse(ok.body)["id"]?.stringValue)

            #expect(try await Self.download(s, id, key: nil).status.code == 401)
            #expect(try await Self.download(s, id, key: writer).status.code == 403)  // no read scope at all
            // Read access to every collection, but no document references it yet.
            #expect(try await Self.download(s, id, key: readOnly).status.code == 404)
            _ = try await s.rest(key: writer).executeOK("INSERT INTO COLLECTION cars (manual ATTACHMENT) DOCUMENTS (:d)", ["d": [
                "_id": "c1", "manual": ["_type": "attachment", "id": .string(id), "len": 17, "metadata": [:]]]])
            let got = try await Self.download(s, id, key: readOnly)
            #expect(got.status.code == 200)
            #expect(String(decoding: got.body, as: UTF8.self) == "hello attachments")
        }
    }
}
