import DQL
import Testing
@testable import Auth

@Suite struct APIKeyTokenTests {
    @Test func generatedKeysHaveThePrefixIdAndSecretAndParseBack() throws {
        let a = try APIKeyToken.generate(), b = try APIKeyToken.generate()
        #expect(a.text.hasPrefix("bpk_"))
        #expect(a.text.utf8.count == APIKeyToken.length)
        #expect(a.text.dropFirst(4).prefix(16) == Substring(a.id))
        #expect(a != b)
        #expect(a.id != b.id)
        let parsed = try #require(APIKeyToken(parsing: a.text))
        #expect(parsed == a)
        #expect(parsed.matches(sha256: a.sha256))
        #expect(!parsed.matches(sha256: b.sha256))
        #expect(!parsed.matches(sha256: Array(a.sha256.dropLast())))
        #expect(!parsed.matches(sha256: []))
    }

    @Test func hashIsSHA256OfTheKeyText() {
        // FIPS 180-2 test vector: SHA-256("abc").
        #expect(APIKeyToken.hex(APIKeyToken.sha256(Array("abc".utf8))) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    }

    @Test func malformedKeysAreRejected() throws {
        let good = try APIKeyToken.generate().text
        let bad = [
            "", "bpk_", String(good.dropLast()), good + "0", "xpk_" + good.dropFirst(4),
            good.uppercased(), String(good.prefix(20)) + "-" + good.dropFirst(21),
            String(good.dropLast()) + "g", "bpk_" + String(repeating: "0", count: 81),
        ]
        for b in bad { #expect(APIKeyToken(parsing: b) == nil, "\(b)") }
    }

    @Test func bearerHeaderParsingFollowsRFC6750() {
        #expect(Authenticator.bearerToken("Bearer abc") == "abc")
        #expect(Authenticator.bearerToken("bearer   abc  ") == "abc")
        #expect(Authenticator.bearerToken("BEARER abc") == "abc")
        #expect(Authenticator.bearerToken("Basic abc") == nil)
        #expect(Authenticator.bearerToken("Bearer") == nil)
        #expect(Authenticator.bearerToken("Bearer ") == nil)
        #expect(Authenticator.bearerToken("Bearerabc") == nil)
        #expect(Authenticator.bearerToken("") == nil)
        #expect(Authenticator.bearerToken("BeArEr abc\t \t") == "abc")
        #expect(Authenticator.bearerToken("Bearer  \t") == nil)
        #expect(Authenticator.bearerToken("Bearer\tabc") == nil)
        #expect(Authenticator.bearerToken("Bfarer abc") == nil)
        #expect(Authenticator.bearerToken("Bearér abc") == nil)
        #expect(Authenticator.bearerToken("Bearer a b") == "a b")
    }
}

@Suite struct AccessRequirementTests {
    func requirement(_ dql: String) throws -> AccessRequirement { AccessRequirement(try DQL.parse(dql)) }

    @Test func selectReadsItsCollection() throws {
        #expect(try requirement("SELECT * FROM cars WHERE x = 1") == AccessRequirement(reads: ["cars"]))
        #expect(try requirement("SELECT * FROM COLLECTION cars (p MAP)") == AccessRequirement(reads: ["cars"]))
    }

    @Test func writesWriteAndUpdatesAlsoRead() throws {
        #expect(try requirement("INSERT INTO cars DOCUMENTS ({'_id': 1})") == AccessRequirement(writes: ["cars"]))
        #expect(try requirement("UPDATE cars SET a = 1 WHERE b = 2") == AccessRequirement(reads: ["cars"], writes: ["cars"]))
        #expect(try requirement("DELETE FROM cars WHERE b = 2") == AccessRequirement(reads: ["cars"], writes: ["cars"]))
        #expect(try requirement("EVICT FROM cars WHERE b = 2") == AccessRequirement(reads: ["cars"], writes: ["cars"]))
    }

    @Test func serverWideStatementsNeedAll() throws {
        #expect(try requirement("ALTER SYSTEM SET DQL_STRICT_MODE = false") == AccessRequirement(writeAll: true))
        #expect(try requirement("CREATE INDEX i ON cars (color)") == AccessRequirement(writeAll: true))
        #expect(try requirement("DROP INDEX i") == AccessRequirement(writeAll: true))
        #expect(try requirement("SHOW ALL") == AccessRequirement(readAll: true))
        #expect(try requirement("EXPLAIN SELECT * FROM cars") == AccessRequirement(reads: ["cars"]))
        #expect(try requirement("EXPLAIN DELETE FROM cars") == AccessRequirement(reads: ["cars"]))
    }

    @Test func scopesCoverOrNameWhatIsMissing() throws {
        let update = try requirement("UPDATE cars SET a = 1")
        #expect(update.missing(read: .only(["cars"]), write: .only(["cars"])) == nil)
        #expect(update.missing(read: .all, write: .all) == nil)
        #expect(update.missing(read: .only(["cars"]), write: .none) == "this key cannot write collection cars")
        #expect(update.missing(read: .none, write: .only(["cars"])) == "this key cannot read collection cars")
        let alter = try requirement("ALTER SYSTEM RESET ALL")
        #expect(alter.missing(read: .all, write: .only(["cars"])) != nil)
        #expect(alter.missing(read: .none, write: .all) == nil)
        #expect(try requirement("SHOW ALL").missing(read: .only(["cars"]), write: .all) != nil)
    }
}
