@testable import HTTP
import Testing

/// `HTTPRequestHead.path`: the target without its query, for origin-form targets (the byte scan)
/// and absolute-form ones (RFC 9112 §3.2.2) alike.
@Suite struct HTTPRequestHeadPathTests {
    static func path(_ target: String) -> String {
        String(HTTPRequestHead(method: .GET, target: target, version: .http1_1, headers: [:], keepAlive: true, expectsContinue: false).path)
    }

    @Test func originForm_dropsTheQuery() {
        #expect(Self.path("/") == "/")
        #expect(Self.path("/healthz") == "/healthz")
        #expect(Self.path("/api/v4/store/execute?x=1&y=?") == "/api/v4/store/execute")
        #expect(Self.path("/?q") == "/")
        #expect(Self.path("/caf\u{E9}/\u{1F600}?n=\u{E9}") == "/caf\u{E9}/\u{1F600}")
        #expect(Self.path("/a" + String(repeating: "b", count: 40) + "?") == "/a" + String(repeating: "b", count: 40))
    }

    @Test func absoluteForm_dropsSchemeAuthorityAndQuery() {
        #expect(Self.path("http://host:8080/p/q?x=1") == "/p/q")
        #expect(Self.path("http://host?x=1") == "/")
        #expect(Self.path("http://host") == "/")
    }
}
