import BigPeerTestSupport
import Foundation
import Glibc
import HTTP
import Testing

/// A self-signed certificate for `localhost`/127.0.0.1, made with `openssl req` in a temp folder.
struct TestCertificate {
    let directory: String
    var certPath: String { directory + "/cert.pem" }
    var keyPath: String { directory + "/key.pem" }

    static func make(names: String = "DNS:localhost,IP:127.0.0.1") async throws -> TestCertificate {
        let dir = NSTemporaryDirectory() + "bigpeer-tls-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let r = try await runProcess("/usr/bin/openssl", [
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", dir + "/key.pem", "-out", dir + "/cert.pem", "-days", "1", "-subj", "/CN=localhost",
            "-addext", "subjectAltName=" + names,
        ])
        guard r.status == 0 else { throw HTTPError(.internalServerError, "openssl req failed: \(r.err)") }
        return TestCertificate(directory: dir)
    }
}

@Suite struct ExternalClientTests {
    @Test func curlReusesTheConnectionAcrossRequests() async throws {
        try await withServer { _, port in
            let r = try await runProcess("/usr/bin/curl", ["-sv", "--http1.1", "http://127.0.0.1:\(port)/healthz", "http://127.0.0.1:\(port)/items/2"])
            #expect(r.status == 0)
            #expect(r.out == "okitem 2")
            #expect(r.err.contains("Re-using existing connection"))
        }
    }

    @Test func curlChunkedUploadAnd100Continue() async throws {
        try await withServer { _, port in
            let payload = [UInt8](repeating: UInt8(ascii: "z"), count: 3000)
            let chunked = try await runProcess("/usr/bin/curl", ["-sv", "--http1.1", "-H", "Transfer-Encoding: chunked", "--data-binary", "@-",
                                                            "http://127.0.0.1:\(port)/echo"], stdin: payload)
            #expect(chunked.status == 0)
            #expect(chunked.out == String(repeating: "z", count: 3000))
            #expect(chunked.err.contains("Transfer-Encoding: chunked"))
            let cont = try await runProcess("/usr/bin/curl", ["-sv", "--http1.1", "-H", "Expect: 100-continue", "--data-binary", "@-",
                                                         "http://127.0.0.1:\(port)/echo"], stdin: payload)
            #expect(cont.out.count == 3000)
            #expect(cont.err.contains("HTTP/1.1 100 Continue"))
        }
    }

    @Test func pythonHTTPClientKeepAliveAndChunkedBody() async throws {
        try await withServer { _, port in
            let script = """
            import http.client
            c = http.client.HTTPConnection("127.0.0.1", \(port), timeout=5)
            out = []
            for path in ["/healthz", "/items/abc%20d", "/nope"]:
                c.request("GET", path)
                r = c.getresponse()
                out.append(f"{r.status}:{r.read().decode()}")
            c.request("POST", "/echo", body=iter([b"ab", b"cd"]), encode_chunked=True)
            r = c.getresponse()
            out.append(f"{r.status}:{r.read().decode()}")
            c.request("HEAD", "/healthz")
            r = c.getresponse()
            out.append(f"{r.status}:{r.getheader('Content-Length')}:{len(r.read())}")
            print("|".join(out))
            """
            let r = try await runProcess("/usr/bin/env", ["python3", "-c", script])
            #expect(r.status == 0, "\(r.err)")
            let parts = r.out.trimmingCharacters(in: .whitespacesAndNewlines).split(separator: "|").map(String.init)
            #expect(parts.count == 5)
            #expect(parts.first == "200:ok")
            #expect(parts.dropFirst().first == "200:item abc d")
            #expect(parts.dropFirst(2).first?.hasPrefix("404:{\"error\"") == true)
            #expect(parts.dropFirst(3).first == "200:abcd")
            #expect(parts.last == "200:2:0")
        }
    }

    @Test func httpsWithCurlAndOpenSSLClient() async throws {
        let cert = try await TestCertificate.make()
        defer { try? FileManager.default.removeItem(atPath: cert.directory) }
        try await withServer({ $0.tls = .init(certificatePath: cert.certPath, privateKeyPath: cert.keyPath) }) { _, port in
            let ok = try await runProcess("/usr/bin/curl", ["-sv", "--http1.1", "--cacert", cert.certPath,
                                                       "https://localhost:\(port)/healthz", "https://localhost:\(port)/items/9"])
            #expect(ok.status == 0, "\(ok.err)")
            #expect(ok.out == "okitem 9")
            #expect(ok.err.contains("ALPN: server accepted http/1.1"))
            #expect(ok.err.contains("Re-using existing connection"))
            // Without the CA the chain does not verify (curl exit 60).
            let untrusted = try await runProcess("/usr/bin/curl", ["-s", "https://localhost:\(port)/healthz"])
            #expect(untrusted.status == 60)
            // TLS 1.1 is refused.
            let old = try await runProcess("/usr/bin/curl", ["-s", "--cacert", cert.certPath, "--tls-max", "1.1", "https://localhost:\(port)/healthz"])
            #expect(old.status != 0)

            let s = try await runProcess("/usr/bin/openssl", ["s_client", "-connect", "127.0.0.1:\(port)", "-servername", "localhost",
                                                         "-alpn", "http/1.1", "-CAfile", cert.certPath, "-ign_eof"],
                                   stdin: Array("GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".utf8))
            #expect(s.out.contains("ALPN protocol: http/1.1"))
            #expect(s.out.contains("Verify return code: 0 (ok)"))
            #expect(s.out.contains("HTTP/1.1 200 OK"))
        }
    }

    @Test func tlsHandshakeTimeoutAndPlaintextOnTheTLSPort() async throws {
        let cert = try await TestCertificate.make()
        defer { try? FileManager.default.removeItem(atPath: cert.directory) }
        try await withServer({
            $0.tls = .init(certificatePath: cert.certPath, privateKeyPath: cert.keyPath)
            // Short enough to tell from the 10 s default, long enough for curl's handshake on a
            // loaded machine (300 ms was not, with two suites running).
            $0.timeouts.tlsHandshake = .seconds(2)
        }) { server, port in
            let silent = try RawClient(port: port)
            let start = Date()
            #expect(await silent.isClosedByPeer())
            #expect(Date().timeIntervalSince(start) < 8)  // the 2 s timeout, not the 10 s default; room for a loaded suite
            let plain = try RawClient(port: port)
            await plain.send("GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
            #expect(await plain.isClosedByPeer())
            let ok = try await runProcess("/usr/bin/curl", ["-s", "--cacert", cert.certPath, "https://localhost:\(port)/healthz"])
            #expect(ok.out == "ok")
            #expect(await eventually { server.connectionCount == 0 })
        }
    }
}
