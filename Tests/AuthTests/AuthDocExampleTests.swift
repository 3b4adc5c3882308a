import Auth
import BigPeerServer
import BigPeerTestSupport
import ServerTestSupport
import Foundation
import HTTP
import Testing
import Values

/// docs/AUTH.md's JWKS example as written (the `openssl` and Python lines are taken from the page
/// and run), against a real server; and `bigpeer serve --jwks` refusing a file it cannot load.
@Suite struct AuthDocExampleTests {
    /// The shell lines of the "Example: a JWKS file and an RS256 token" block up to `bigpeer serve`.
    static func exampleScript() throws -> String {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let page = try String(contentsOf: root.appendingPathComponent("docs/AUTH.md"), encoding: .utf8)
        guard let section = page.range(of: "### Example: a JWKS file and an RS256 token"),
              let open = page.range(of: "```sh\n", range: section.upperBound..<page.endIndex),
              let serve = page.range(of: "\nbigpeer serve", range: open.upperBound..<page.endIndex) else {
            throw TestCommandError("docs/AUTH.md has no JWKS example")
        }
        return String(page[open.upperBound..<serve.lowerBound])
    }

    struct TestCommandError: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }

    @Test func theJWKSExampleOfTheDocs_mintsATokenTheServerAccepts() async throws {
        let dir = try TemporaryDirectory("auth-doc")
        let made = try await TestCommand.run("/bin/sh", ["-c", "set -e; cd \"$1\"; " + Self.exampleScript(), "sh", dir.path])
        #expect(made.status == 0, "\(made.err)")
        let token = try String(contentsOfFile: dir.path + "/token.jwt", encoding: .utf8)
        try await withServer({ config in
            config.jwks = JWKSSource.Configuration(location: .file(dir.path + "/jwks.json"))
            config.jwtRules = JWTClaimRules(issuer: "https://id.example", audience: "bigpeer")
        }) { s in
            let bearer = JWTEndToEndTests.bearer(token)
            let inserted = try await s.rest().execute("INSERT INTO orders DOCUMENTS ({_id: 'o1', site: 'A'})", headers: bearer)
            #expect(inserted.status == 200, "\(inserted.text)")
            let refused = try await s.rest().execute("INSERT INTO people DOCUMENTS ({_id: 'p1'})", headers: bearer)
            #expect(refused.status == 403, "\(refused.text)")
        }
    }

    @Test func serveWithAKeyFileItCannotLoad_exitsWithAnError() async throws {
        let exe = try ServerProcess.locateBinary()
        let dir = try TemporaryDirectory("auth-doc")
        let notJWKS = try dir.write("jwks.json", #"{"keys": 1}"#)
        for path in [dir.path + "/absent.json", notJWKS] {
            let r = try await TestCommand.run(exe, ["serve", "--port", "0", "--data-dir", dir.path + "/data", "--jwks", path])
            #expect(r.status == 1, "\(path): \(r.status) \(r.err)")
            #expect(r.err.contains("error: --jwks: "), "\(path): \(r.err)")
        }
    }
}
