import Testing
import Values
@testable import Auth

/// The cost of verifying an RS256 token with a cached 2048-bit key (#21's target: ≤ 30 µs of
/// server CPU). Prints its measurement and asserts nothing about time; what it checks is that
/// every verification in the loop succeeded. A release build: Benchmarks/AuthBench.
@Suite struct JWTVerificationCostTests {
    @Test func rs256WithCachedKey_printsMicrosecondsPerToken() throws {
        let set = try JOSEVectors.set(JOSEVectors.jwks)
        let rules = JWTClaimRules(issuer: "https://id.example", audience: "bigpeer", now: { JOSEVectors.now })
        let iterations = 2000
        var accepted = 0
        let clock = ContinuousClock()
        let elapsed = clock.measure {
            for _ in 0..<iterations {
                if case .success = JWSCompact.parse(JOSEVectors.rsa1Token, maxBytes: JWKSVerifier.maxTokenBytes).flatMap({ jws in
                    set.key(algorithm: jws.algorithm, keyID: jws.keyID).flatMap { key -> Result<(principal: Principal, refusedFrom: Int64), JWTError> in
                        key.verifies(jws.signingInput, signature: jws.signature) ? jws.claims().flatMap(rules.check) : .failure(.badSignature)
                    }
                }) { accepted += 1 }
            }
        }
        #expect(accepted == iterations)
        // The signature alone (OpenSSL), to tell it from the Swift around it.
        let jws = try JWSCompact.parse(JOSEVectors.rsa1Token, maxBytes: JWKSVerifier.maxTokenBytes).get()
        let key = try set.key(algorithm: .rs256, keyID: "rsa-1").get()
        var verified = 0
        let signatureOnly = clock.measure {
            for _ in 0..<iterations where key.verifies(jws.signingInput, signature: jws.signature) { verified += 1 }
        }
        #expect(verified == iterations)
        func perToken(_ d: Duration) -> Double { (Double(d.components.attoseconds) / 1e12 + Double(d.components.seconds) * 1e6) / Double(iterations) }
        print("RS256 (2048-bit, cached key), this build: \(Int(perToken(elapsed) * 10) / 10) µs/token in all, \(Int(perToken(signatureOnly) * 10) / 10) µs of it the signature")
    }
}
