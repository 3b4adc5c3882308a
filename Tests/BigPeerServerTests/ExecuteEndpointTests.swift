import BigPeerServer
import BigPeerTestSupport
import ServerTestSupport
import Foundation
import HTTP
import Postgres
import Store
import Testing
import Values

/// `POST /api/v4/store/execute` over real HTTP.
@Suite struct ExecuteEndpointTests {
    static func post(_ client: HTTPClient, _ port: Int, _ body: String, headers: HTTPHeaders = HTTPHeaders()) async throws -> (Int, Value) {
        let r = try await RESTClient(http: client, port: port).post("/api/v4/store/execute", raw: Array(body.utf8), headers: headers)
        return (r.status, r.body)
    }

    @Test func shapesForSuccessAndEveryErrorKind() async throws {
        try await InProcessServer.with({ config in
            config.insecureDevelopment = true  // response shapes only: auth is covered by AuthTests
            config.statementTimeout = .seconds(1)
        }) { server in
            let (db, client, port) = (server.database, server.http, server.port)

            let (s1, ok) = try await Self.post(client, port, #"{"statement":"INSERT INTO cars DOCUMENTS (:d)","args":{"d":{"_id":"a","n":1}}}"#)
            #expect(s1 == 200)
            #expect(ok["queryType"] == "insert")
            #expect(ok["mutatedDocumentIds"] == ["a"])
            #expect(ok["transactionId"] == 1)
            #expect(ok["totalWarningsCount"] == 0)

            let cases: [(String, Int)] = [
                (#"{"statement":"SELECT * FORM cars"}"#, 400),
                (#"not json"#, 400),
                (#"{"args":{}}"#, 400),
                (#"{"statement":"SELECT * FROM cars","args":[1]}"#, 400),
                (#"{"statement":"INSERT INTO cars DOCUMENTS ({_id: 'a'})"}"#, 409),
            ]
            for (body, status) in cases {
                let (code, v) = try await Self.post(client, port, body)
                #expect(code == status, "\(body)")
                #expect(v["queryType"] == "unknown")
                #expect(v["error"]?["description"]?.stringValue?.isEmpty == false)
            }
            let (code404, _) = try await Self.post(client, port, #"{"statement":"SELECT * FROM cars"}"#, headers: ["X-DITTO-TXN-ID": "1000000"])
            #expect(code404 == 404)
            let (code200, v200) = try await Self.post(client, port, #"{"statement":"SELECT * FROM cars"}"#, headers: ["X-DITTO-TXN-ID": "1"])
            #expect(code200 == 200)
            #expect(v200["items"] == [["_id": "a", "n": 1]])

            // A statement stuck behind a lock past statement_timeout gets 408, and the lock holder is unaffected.
            let holder = try await db.connect()
            _ = try await holder.query("BEGIN")
            _ = try await holder.query("SELECT * FROM documents FOR UPDATE")
            let (code408, v408) = try await Self.post(client, port, #"{"statement":"UPDATE cars SET n = 2 WHERE _id = 'a'"}"#)
            #expect(code408 == 408)
            #expect(v408["queryType"] == "unknown")
            _ = try await holder.query("ROLLBACK")
            await holder.close()
            let (after, _) = try await Self.post(client, port, #"{"statement":"UPDATE cars SET n = 2 WHERE _id = 'a'"}"#)
            #expect(after == 200)
        }
    }

    /// The database goes away while serving: 503 with Retry-After, no crash, then recovery by itself.
    @Test func databaseRestartGives503ThenRecovers() async throws {
        try await TestPostgres.withOwnCluster { cluster, dir, options in
            try await Self.outageScenario(cluster, dataDirectory: dir, options: options)
        }
    }

    static func outageScenario(_ cluster: LocalPostgres, dataDirectory dir: String, options: LocalPostgres.Options) async throws {
        var config = InProcessServer.configuration(cluster.configuration())
        config.insecureDevelopment = true  // outage behaviour only: auth is covered by AuthTests
        let service = try await BigPeerService.start(config)
        let client = try HTTPClient()
        let (s1, _) = try await Self.post(client, service.port, #"{"statement":"INSERT INTO t DOCUMENTS ({_id: 'x'})"}"#)
        #expect(s1 == 200)

        try await cluster.stopOffPool()
        let r = try await client.execute(HTTPClientRequest(method: .POST, url: "http://127.0.0.1:\(service.port)/api/v4/store/execute",
                                                           body: Array(#"{"statement":"SELECT * FROM t"}"#.utf8)))
        #expect(r.status.code == 503)
        #expect(r.headers["Retry-After"] != nil)
        let ready = try await client.get("http://127.0.0.1:\(service.port)/readyz")
        #expect(ready.status.code == 503)

        _ = try await TestPostgres.startCluster(dataDirectory: dir, options: options)
        #expect(try await eventually {
            let (code, v) = try await Self.post(client, service.port, #"{"statement":"SELECT * FROM t"}"#)
            return code == 200 && v["items"] == [["_id": "x"]]
        })
        await client.shutdown()
        await service.stop()
    }
}

extension ExecuteEndpointTests {
    /// A point read answered from the read cache (second request) is byte-identical to the one
    /// answered by PostgreSQL (first request), in JSON and in CBOR; and a write is read back at once.
    @Test func pointReadsFromTheCacheAnswerExactlyAsThoseFromPostgres() async throws {
        try await InProcessServer.with({ $0.insecureDevelopment = true }) { server in
            let (service, client) = (server.service, server.http)
            let url = "http://127.0.0.1:\(service.port)/api/v4/store/execute"
            func raw(_ body: String, accept: String = "application/json") async throws -> [UInt8] {
                let r = try await client.execute(HTTPClientRequest(method: .POST, url: url,
                    headers: ["Content-Type": "application/json", "Accept": accept], body: Array(body.utf8)))
                #expect(r.status.code == 200)
                return r.body
            }
            _ = try await raw(#"{"statement":"INSERT INTO cars DOCUMENTS (:d)","args":{"d":{"_id":"é\"1","n":1.5,"tags":["a",{"b":null}],"s":"\u0001"}}}"#)
            let read = #"{"statement":"SELECT * FROM cars WHERE _id = :id","args":{"id":"é\"1"}}"#
            let hitsBefore = service.store.readCache.statistics.hits
            let fromPostgres = try await raw(read), fromCache = try await raw(read)
            #expect(service.store.readCache.statistics.hits == hitsBefore + 1)
            #expect(fromCache == fromPostgres)
            #expect(try JSON.parse(fromCache)["items"] == [["_id": "é\"1", "n": 1.5, "tags": ["a", ["b": nil]], "s": "\u{1}"]])
            let cbor = try await raw(read, accept: "application/cbor")
            #expect(try CBORValueCodec.decode(cbor) == (try JSON.parse(fromPostgres)))

            _ = try await raw(#"{"statement":"UPDATE cars SET n = 2 WHERE _id = :id","args":{"id":"é\"1"}}"#)
            let after = try JSON.parse(try await raw(read))
            #expect(after["items"] == [["_id": "é\"1", "n": 2, "tags": ["a", ["b": nil]], "s": "\u{1}"]])
        }
    }
}
