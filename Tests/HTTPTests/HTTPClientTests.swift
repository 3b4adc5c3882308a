import Foundation
import HTTP
import Testing

@Suite struct HTTPClientTests {
    @Test func keepAliveReusesOneConnectionForSequentialRequests() async throws {
        try await withServer { server, port in
            let client = try HTTPClient()
            // A name goes through getaddrinfo (off the loops); numeric hosts never do.
            #expect(try await client.get("http://localhost:\(port)/healthz").text == "ok")
            for i in 0..<5 {
                let r = try await client.get("http://127.0.0.1:\(port)/items/\(i)")
                #expect(r.status.code == 200)
                #expect(r.text == "item \(i)")
            }
            #expect(server.connectionCount == 2)  // one per origin: localhost and 127.0.0.1
            await client.shutdown()
        }
    }

    @Test func postBodyChunkedResponseAndNoRedirectFollowing() async throws {
        try await withServer { _, port in
            let client = try HTTPClient()
            let echo = try await client.execute(HTTPClientRequest(method: .POST, url: "http://127.0.0.1:\(port)/echo", body: Array("payload".utf8)))
            #expect(echo.text == "payload")
            let stream = try await client.get("http://127.0.0.1:\(port)/stream?n=2")
            #expect(stream.headers["Transfer-Encoding"] == "chunked")
            #expect(stream.text == "data: 0\n\ndata: 1\n\n")
            let redirect = try await client.get("http://127.0.0.1:\(port)/redirect")
            #expect(redirect.status.code == 302)
            #expect(redirect.headers["Location"] == "/healthz")
            await client.shutdown()
        }
    }

    @Test func timeoutsAndRefusedConnectionsAreTypedErrors() async throws {
        try await withServer { _, port in
            var config = HTTPClient.Configuration()
            config.requestTimeout = .milliseconds(30)
            let client = try HTTPClient(configuration: config)
            await #expect(throws: HTTPClientError.self) { try await client.get("http://127.0.0.1:\(port)/slow") }
            do {
                _ = try await client.get("http://127.0.0.1:\(port)/slow")
                Issue.record("expected a timeout")
            } catch {
                guard case .timedOut? = error as? HTTPClientError else { Issue.record("got \(error)"); return }
            }
            await client.shutdown()
        }
        let client = try HTTPClient()
        do {
            _ = try await client.get("http://127.0.0.1:1/")
            Issue.record("expected connection refused")
        } catch {
            guard case .connectFailed = error else { Issue.record("got \(error)"); return }
        }
        await #expect(throws: HTTPClientError.self) { try await client.get("ftp://x/") }
        await client.shutdown()
    }

    @Test func retriesOnceWhenTheServerClosedAnIdleConnection() async throws {
        try await withServer({ $0.timeouts.idle = .milliseconds(100) }) { _, port in
            let client = try HTTPClient()
            #expect(try await client.get("http://127.0.0.1:\(port)/healthz").text == "ok")
            try await Task.sleep(for: .milliseconds(400))  // the server closes the idle connection
            #expect(try await client.get("http://127.0.0.1:\(port)/healthz").text == "ok")
            await client.shutdown()
        }
    }

    @Test func httpsVerifiesTheChainAndTheHostName() async throws {
        let cert = try await TestCertificate.make()
        let other = try await TestCertificate.make(names: "DNS:other.example")
        defer {
            try? FileManager.default.removeItem(atPath: cert.directory)
            try? FileManager.default.removeItem(atPath: other.directory)
        }
        try await withServer({ $0.tls = .init(certificatePath: cert.certPath, privateKeyPath: cert.keyPath) }) { server, port in
            var trusting = HTTPClient.Configuration()
            trusting.additionalCAFile = cert.certPath
            let client = try HTTPClient(configuration: trusting)
            #expect(try await client.get("https://localhost:\(port)/healthz").text == "ok")
            #expect(try await client.get("https://localhost:\(port)/items/1").text == "item 1")
            #expect(server.connectionCount == 1)
            await client.shutdown()

            let untrusting = try HTTPClient()
            do {
                _ = try await untrusting.get("https://localhost:\(port)/healthz")
                Issue.record("an unknown CA must fail")
            } catch {
                guard case .tls(let why)? = error as? HTTPClientError else { Issue.record("got \(error)"); return }
                #expect(why.contains("certificate verify failed"))
            }
            await untrusting.shutdown()
        }
        // A certificate for another name, signed by a CA we trust: the host check refuses it.
        try await withServer({ $0.tls = .init(certificatePath: other.certPath, privateKeyPath: other.keyPath) }) { _, port in
            var trusting = HTTPClient.Configuration()
            trusting.additionalCAFile = other.certPath
            let client = try HTTPClient(configuration: trusting)
            do {
                _ = try await client.get("https://localhost:\(port)/healthz")
                Issue.record("a name mismatch must fail")
            } catch {
                guard case .tls? = error as? HTTPClientError else { Issue.record("got \(error)"); return }
            }
            await client.shutdown()
        }
    }
}
