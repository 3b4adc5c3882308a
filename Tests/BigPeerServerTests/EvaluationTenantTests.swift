import Auth
@testable import BigPeerServer
@testable import DQL
@testable import HTTP
import Testing

/// Whom a REST request's off-loop work is queued for (`EvaluationTenant`): the credential it
/// names, else its client's address; and the routes run under it.
@Suite struct EvaluationTenantTests {
    static func request(_ headers: HTTPHeaders, from address: String? = "203.0.113.9:5000") -> HTTPRequest {
        var r = HTTPRequest(head: HTTPRequestHead(method: .POST, target: "/api/v4/store/execute", version: .http1_1,
                                                  headers: headers, keepAlive: true, expectsContinue: false))
        r.remoteAddress = address
        return r
    }

    @Test func theCredentialNamesTheTenant_elseTheAddress() throws {
        let key = try APIKeyToken.generate()
        #expect(EvaluationTenant.tenant(Self.request(["Authorization": "Bearer \(key.text)"])).name == key.id)
        let webhook = EvaluationTenant.tenant(Self.request(["Authorization": "Bearer opaque", "X-Auth-Provider": "corp"])).name
        #expect(webhook?.hasPrefix("webhook:corp:#") == true)
        #expect(EvaluationTenant.tenant(Self.request([:])).name == "address:203.0.113.9")
        #expect(EvaluationTenant.tenant(Self.request([:], from: "[2001:db8:1:2:3:4:5:6]:80")).name
                == EvaluationTenant.tenant(Self.request([:], from: "[2001:db8:1:2:ffff::1]:81")).name, "one IPv6 /64, one tenant")
        #expect(EvaluationTenant.tenant(Self.request([:], from: nil)).name == nil)
    }

    /// A tagged handler runs with its request's tenant; a sync (inline) one is left alone.
    @Test func aTaggedHandlerRunsUnderItsRequestsTenant() async throws {
        let key = try APIKeyToken.generate()
        let tagged = EvaluationTenant.tagging(.async { _ in
            .response(.json(Array((InMemoryEvaluation.tenant?.name ?? "none").utf8)))
        })
        guard case .async(let run) = tagged else { Issue.record("not async"); return }
        guard case .response(let response) = try await run(Self.request(["Authorization": "Bearer \(key.text)"])),
              case .bytes(let body) = response.body else { Issue.record("no response body"); return }
        #expect(String(decoding: body, as: UTF8.self) == key.id)
    }
}
