import Foundation
import Testing
import Values
@testable import DQL

/// `SYNC CONTEXT (PEERS [WHERE ...]) SELECT ...` (docs/DQL.md, "SYNC CONTEXT").
@Suite struct SyncContextTests {
    @Test func documentedExamples_parseAndRoundTrip() throws {
        let blocks = DocumentationTests.text.components(separatedBy: "```dql-sync\n").dropFirst().map { $0.components(separatedBy: "\n```")[0] }
        #expect(blocks.count == 2)
        for block in blocks {
            let s = try DQL.parseSyncContext(block)
            #expect(try DQL.parseSyncContext(Printer.print(s)) == s, "\(block)")
        }
    }

    @Test func clause_parsesToTheConditionAndTheSelect() throws {
        let s = try DQL.parseSyncContext("sync context (peers where peerKey = :pk and os = 'Linux') SELECT _id FROM cars LIMIT 3;")
        #expect(s.peers == .binary(.and, .binary(.equal, .path(Path("peerKey")), .parameter("pk")),
                                   .binary(.equal, .path(Path("os")), .literal("Linux"))))
        #expect(s.select == (try { if case .select(let q) = try DQL.parse("SELECT _id FROM cars LIMIT 3") { q } else { nil } }()))
        #expect(try DQL.parseSyncContext("SYNC CONTEXT (PEERS) SELECT * FROM c").peers == nil)
        #expect(Printer.print(try DQL.parseSyncContext("SYNC CONTEXT (PEERS) SELECT * FROM c")) == "SYNC CONTEXT (PEERS) SELECT * FROM c")
    }

    @Test func malformedClauses_areSyntaxErrors() {
        for (text, expected) in [
            ("SYNC CONTEXT PEERS SELECT * FROM c", "'('"),
            ("SYNC CONTEXT (PEERS WHERE) SELECT * FROM c", "an expression"),
            ("SYNC CONTEXT (PEERS WHERE a = 1 SELECT * FROM c", "')'"),
            ("SYNC CONTEXT (PEERS WHERE a = 1) DELETE FROM c", "SELECT (only a SELECT runs on peers)"),
            ("SYNC CONTEXT (PEERS) SELECT * FROM c WHERE", "an expression"),
            ("SYNC (PEERS) SELECT * FROM c", "CONTEXT"),
            ("SELECT * FROM c", "SYNC"),
        ] {
            #expect(throws: DQLSyntaxError.self, "\(text)") { try DQL.parseSyncContext(text) }
            do { _ = try DQL.parseSyncContext(text) } catch {
                #expect(error.expected.hasPrefix(expected), "\(text): \(error)")
            }
        }
    }

    @Test func storeStatements_refuseSyncContext_sayingWhere() {
        do {
            _ = try DQL.parse("SYNC CONTEXT (PEERS) SELECT * FROM c")
            Issue.record("parsed")
        } catch {
            #expect(error.expected.contains("/api/v4/sync/remote_execute"))
        }
        #expect(throws: Never.self) { try DQL.parse("SELECT sync, context, peers FROM c WHERE peers = 1") }
    }
}
