import Auth
import BigPeerServer
import Glibc
import BigPeerTestSupport
import ServerTestSupport
@testable import SmallPeer
import Synchronization
import Testing
import Values

/// `SyncClient.Configuration.tokenProvider` against a real server and webhook (PROTOCOL.md §4.13):
/// the server's `renew` reaches the client before its login expires, the client asks the provider
/// and sends the fresh token with `auth`, and the session runs past the first login's expiry.
/// Without a provider the session ends at the expiry (4001). A `login-1` lasts 12 s, a
/// `login-long` 60 s: its notice comes 6 s before its end, room enough for the round trip through
/// client, server and webhook on a loaded machine (the 1.2 s of a 12 s login was not; 4 s of a
/// 40 s one was, so far).
@Suite struct TokenRenewalTests {
    static func withServer(_ body: (InProcessServer) async throws -> Void) async throws {
        try await WebhookTestServer.with({ _, request in
            guard case .object(let o) = request, case .string(let token)? = o["token"], token.hasPrefix("login-") else {
                return .json(["authenticated": false])
            }
            return .json(["authenticated": true, "userID": "tablet", "expirationSeconds": token == "login-1" ? 12 : token == "login-long" ? 60 : 3600,
                          "permissions": ["read": ["everything": true], "write": ["everything": true]],
                          "clientInfo": .object(["token": .string(token)])])
        }) { webhook in
            try await InProcessServer.with({ config in
                config.authWebhook = AuthWebhook.Configuration(providers: ["corp": webhook.url("/auth")])
            }) { server in try await body(server) }
        }
    }

    static func client(_ peer: SmallPeer, _ server: InProcessServer, login: String = "login-1",
                       provider: (@Sendable () async -> String?)?) throws -> SyncClient {
        var c = SyncClient.Configuration(url: "ws://127.0.0.1:\(server.port)", apiKey: nil)
        c.providerLogin = ("corp", login)
        c.tokenProvider = provider
        c.quietMillis = 200
        return try SyncClient(peer: peer, configuration: c)
    }

    @Test func theProvidersTokenCarriesTheSessionPastTheFirstLoginsExpiry() async throws {
        let dir = TempDirectory()
        defer { dir.cleanup() }
        try await Self.withServer { server in
            let peer = try openPeer(dir.path)
            _ = try peer.subscribe("SELECT * FROM cars")
            let asked = Atomic<Int>(0)
            let client = try Self.client(peer, server, login: "login-long", provider: { asked.add(1, ordering: .relaxed); return "login-2" })
            try await afterwards({ await client.stop() }) {
                try await client.waitUntilCaughtUp(timeout: .seconds(20))
                let start = ContinuousClock.now
                #expect(client.status.clientInfo == ["token": "login-long"])
                #expect(await eventually(within: .seconds(60)) { client.status.credentialRefreshes == 1 }, "\(client.status)")
                #expect(ContinuousClock.now - start < .seconds(60), "refreshed before the first login expired")
                #expect(client.status.expiryNotices == 1 && asked.load(ordering: .relaxed) == 1)
                #expect(client.status.clientInfo == ["token": "login-2"])
                // Past the first login's end: the same session still delivers.
                try await Task.sleep(until: start + .seconds(61))
                _ = try await server.execute("INSERT INTO cars DOCUMENTS ({'_id': 'after-expiry'})", key: try await server.newKey())
                #expect(try await eventually { try peer.execute("SELECT * FROM cars WHERE _id = 'after-expiry'").items.count == 1 })
                #expect(client.status.sessions == 1, "\(client.status.sessionEnds)")
            }
        }
    }

    @Test func withoutAProvider_theSessionEndsAtTheLoginsExpiry() async throws {
        let dir = TempDirectory()
        defer { dir.cleanup() }
        try await Self.withServer { server in
            let peer = try openPeer(dir.path)
            let client = try Self.client(peer, server, provider: nil)
            try await afterwards({ await client.stop() }) {
                try await client.waitUntilCaughtUp(timeout: .seconds(20))
                // The session ends at the expiry; the client connects again (the webhook grants login-1 anew).
                #expect(await eventually(within: .seconds(30)) { client.status.sessions >= 2 }, "\(client.status)")
                #expect(client.status.sessionEnds.first?.contains("credentials expired") == true, "\(client.status.sessionEnds)")
                #expect(client.status.expiryNotices == 0 && client.status.credentialRefreshes == 0)
            }
        }
    }

    /// `bigpeer peer --auth-provider corp --token-file F` logs in with the file's token (and reads
    /// the file again on `renew`, through the same `tokenProvider` as above).
    @Test func peerCommand_tokenFile_logsInWithTheFilesToken() async throws {
        let dir = TempDirectory()
        defer { dir.cleanup() }
        try await Self.withServer { server in
            _ = try await server.execute("INSERT INTO cars DOCUMENTS ({'_id': 'via-webhook'})", key: try await server.newKey())
            let tokenPath = dir.path + "/token"
            guard let f = fopen(tokenPath, "w") else { Issue.record("cannot write \(tokenPath)"); return }
            fputs("login-2\n", f)
            fclose(f)
            let url = "ws://127.0.0.1:\(server.port)"
            let ok = try await PeerCommandTests.run(["--data", dir.path + "/peer", "--url", url, "--auth-provider", "corp",
                                                     "--token-file", tokenPath, "--subscribe", "SELECT * FROM cars", "--sync-once"])
            #expect(ok.status == 0, "\(ok.err)")
            #expect(try PeerCommandTests.lines(ok.out).contains { $0["_id"] == "via-webhook" }, "\(ok.out)")
            let missing = try await PeerCommandTests.run(["--data", dir.path + "/peer", "--url", url, "--auth-provider", "corp",
                                                          "--token-file", dir.path + "/absent", "--sync-once"])
            #expect(missing.status != 0 && missing.err.contains("cannot read a token"), "\(missing.err)")
        }
    }
}
