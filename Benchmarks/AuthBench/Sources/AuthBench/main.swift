// JWT verification micro-benchmark: a token checked against a cached key, as on every request
// (parse, key lookup, signature, claims). Each measurement runs several rounds and prints the median.
// The vectors are the ones in Tests/AuthTests/JOSEVectors.swift (keys made with Python's cryptography).
import Auth
import Foundation

let jwks = #"{"keys":[{"kty":"RSA","kid":"rsa-1","use":"sig","alg":"RS256","n":"o5yZpmfIJg9K9oxPVuvgQ3YvC3k1Addc82Wp6km8ofXKoHhBbsEPWHk_mG127VhN0eAgQGXgbiA01PAhtShI7W4oqbF6sX5YeWIO9VqVv_oafqEUDP5J4YWjN0IgW011AsrvMjKGddbHfjvRQIaBocG_SKVOw_AAwFI25PZ_A4n9d2fCRKhrOBtIY4L8Sz7DvdRxG3GuFgqfBE7AtBs9v51mC9Eo-e0MKSkXC_hUn4Z2uCN4PF-FGYNhfqtoD4JouSu66OTa1wj1yuxzsxnz1QYEZFqpunRMgeq7q-Z9hJ4i83VL6TFyTu3yJWckfXgPlkBZydnci6RXY1PKmiXoPQ","e":"AQAB"},{"kty":"EC","kid":"ec-1","crv":"P-256","x":"pg64DkAm5hgYGfXt-7FnjY8h-JNGQGEMV4NmK2yhB_M","y":"8AskzUj_UhT7kq_nt2zWZjTVFyuTTtQLfVxN6yUo7NY"},{"kty":"OKP","kid":"ed-1","crv":"Ed25519","x":"3eov-AsIC54jbkSObQpHa8z5OTM8-N0hqIcsvaunQDI"}]}"#
let tokens: [(String, String)] = [
    ("RS256 (RSA-2048)", #"eyJhbGciOiJSUzI1NiIsImtpZCI6InJzYS0xIiwidHlwIjoiSldUIn0.eyJzdWIiOiJ0YWJsZXQtNyIsImlzcyI6Imh0dHBzOi8vaWQuZXhhbXBsZSIsImF1ZCI6ImJpZ3BlZXIiLCJleHAiOjIwMDAwMDAwMDAsImlhdCI6MTcwMDAwMDAwMCwicmVhZCI6IioiLCJ3cml0ZSI6WyJvcmRlcnMiXX0.LJDICJqpMNDSvJMPWApLbZw9ykKfNWH9JferqJO9Q6xKzyNqVs-iEVegCX0qua3RGxrFhUFm9nAi3quuJA1_9zZvNFZHiZB5cZwet-0w4WKNCPQJtC9NkvQxk6iy425xiTPjhoyEBc36XoBBM-r7zB6XPAaQC5_9gQhuOa4_j3wOznKZ2hYzTRgn3qQDqh5U-9-74gcy-8hPYNXAHqWUlPBdzo5M7XXccgNWxfsXJ6K18iSlIsAIfxsgNP3MeltqHdPgxFFXpSmtGi2IoLkaDhy3otjUyd0J5mxg24Qf0Rfys1H-ikO8kftTmi3qhvzFNUy_MaWNuchTtnxbS_vJvA"#),
    ("ES256 (P-256)", #"eyJhbGciOiJFUzI1NiIsImtpZCI6ImVjLTEiLCJ0eXAiOiJKV1QifQ.eyJzdWIiOiJ0YWJsZXQtNyIsImlzcyI6Imh0dHBzOi8vaWQuZXhhbXBsZSIsImF1ZCI6ImJpZ3BlZXIiLCJleHAiOjIwMDAwMDAwMDAsImlhdCI6MTcwMDAwMDAwMCwicmVhZCI6IioiLCJ3cml0ZSI6WyJvcmRlcnMiXX0.zN766aPxRME-D4y2VAItA74HJ79kAA8w3OXjiP3tJG_lxgzUztyZc7qYwLVgjswBu5R5ViposGMg6UA_UQ7yjQ"#),
    ("EdDSA (Ed25519)", #"eyJhbGciOiJFZERTQSIsImtpZCI6ImVkLTEiLCJ0eXAiOiJKV1QifQ.eyJzdWIiOiJ0YWJsZXQtNyIsImlzcyI6Imh0dHBzOi8vaWQuZXhhbXBsZSIsImF1ZCI6ImJpZ3BlZXIiLCJleHAiOjIwMDAwMDAwMDAsImlhdCI6MTcwMDAwMDAwMCwicmVhZCI6IioiLCJ3cml0ZSI6WyJvcmRlcnMiXX0.aowrlj6hGKClaVDF1eG7hYk-rosaNI3O3Yj82_HmxUUmNC4cCCYeJ95PSITccmB1TgnKoHr7eLTrF6qHy82JDQ"#),
]

let path = NSTemporaryDirectory() + "authbench-\(getpid()).json"
try Data(jwks.utf8).write(to: URL(fileURLWithPath: path))
defer { try? FileManager.default.removeItem(atPath: path) }
let source = try JWKSSource(JWKSSource.Configuration(location: .file(path)))
try await source.load()
let verifier = JWKSVerifier(source: source, rules: JWTClaimRules(issuer: "https://id.example", audience: "bigpeer", now: { 1_800_000_000 }))

let clock = ContinuousClock()
// An argument picks the algorithms whose name contains it (e.g. `AuthBench RS256`, for a profile).
let only = CommandLine.arguments.dropFirst().first
for (name, token) in tokens where only.map(name.contains) ?? true {
    let iterations = 5000
    var rounds: [Double] = []
    for _ in 0..<7 {
        var accepted = 0
        let elapsed = clock.measure {
            for _ in 0..<iterations {
                if case .success = verifier.verifyCached(token) { accepted += 1 }
            }
        }
        guard accepted == iterations else {
            print("\(name): a verification failed")
            exit(1)
        }
        rounds.append((Double(elapsed.components.seconds) * 1e6 + Double(elapsed.components.attoseconds) / 1e12) / Double(iterations))
    }
    rounds.sort()
    print("\(name), cached key: \(Int(rounds[rounds.count / 2] * 10) / 10) µs/token (median of \(rounds.count) rounds of \(iterations))")
}

// The same tokens through `TokenVerifier`, as REST and sync verify them: after the first request
// a repeated token is a cache hit (SHA-256 of the token, a lookup, the expiry check). Measured off
// the main actor (top-level code is on it), as a request handler calls it: no executor hop per call.
enum CacheBench {
    nonisolated static func microsecondsPerToken(_ verifier: TokenVerifier, _ token: String, iterations: Int) async -> Double? {
        let clock = ContinuousClock()
        let start = clock.now
        for _ in 0..<iterations {
            guard case .success = await verifier.verify(token) else { return nil }
        }
        let elapsed = clock.now - start
        return (Double(elapsed.components.seconds) * 1e6 + Double(elapsed.components.attoseconds) / 1e12) / Double(iterations)
    }
}
for (label, tokenVerifier) in [("TokenVerifier, no cache", TokenVerifier(jwks: verifier, maxCachedTokens: 0)),
                                ("TokenVerifier, verified-token cache", TokenVerifier(jwks: verifier))] {
    for (name, token) in tokens where only.map(name.contains) ?? true {
        var rounds: [Double] = []
        for _ in 0..<7 {
            guard let round = await CacheBench.microsecondsPerToken(tokenVerifier, token, iterations: 5000) else {
                print("\(name): a verification failed")
                exit(1)
            }
            rounds.append(round)
        }
        rounds.sort()
        print("\(name), \(label): \((rounds[rounds.count / 2] * 100).rounded() / 100) µs/token (median of \(rounds.count) rounds of 5000)")
    }
}
