@testable import Auth
import BigPeerServer
import BigPeerTestSupport
import CRDT
import DQL
import Postgres
import ServerTestSupport
import Sockets
import SyncProtocol
import TestRandomness
import Testing
import Values

/// Read rules on sync subscriptions (docs/AUTH.md, "Rules"; PROTOCOL.md §4.6), and the
/// differential check that REST, the legacy find and a subscription show the same documents.
@Suite struct ReadRulesSyncTests {
    static let secret = Array("0123456789abcdef0123456789abcdef".utf8)

    static func connect(_ port: Int, site: UInt64, _ credentials: SyncCredentials, capabilities: [String] = []) async throws -> SyncTestClient {
        let c = try await SyncTestClient(port: port, loop: TestLoops.group.next())
        c.send(.hello(Hello(site: site, peerKey: [7, 7], deviceName: "rules-\(site)", credentials: credentials, credit: 1 << 22, maxMessageSize: 1 << 22,
                            capabilities: capabilities)))
        let m = try await c.nextMessage()
        guard case .welcome = m else { throw SyncTestClientError("expected welcome, got \(m)") }
        return c
    }

    /// The ids of an initial sync of `query` (sorted as strings).
    static func initialSync(_ peer: SyncTestClient, id: UInt32, _ query: String) async throws -> [String] {
        peer.send(.subscribe(Subscribe(id: id, query: query)))
        let messages = try await peer.waitFor { m in
            if case .synced(id, _) = m { return true }
            if case .subscriptionError = m { return true }
            return false
        }
        return messages.flatMap { m -> [String] in
            guard case .documents(id, let entries) = m else { return [] }
            return entries.compactMap { Self.string($0.document.id) }
        }.sorted()
    }

    static func string(_ v: Value?) -> String? {
        guard case .string(let s)? = v else { return nil }
        return s
    }

    static func changed(_ messages: [SyncMessage], _ id: String) -> [ChangeEntry] {
        messages.flatMap { m -> [ChangeEntry] in
            guard case .changes(_, let entries) = m else { return [] }
            return entries.filter { $0.document.id == .string(id) }
        }
    }

    @Test func subscription_seesOnlyTheRule_aDocumentThatStopsMatchingLeaves_andWantCannotFetchHidden() async throws {
        try await ReadRulesEndToEndTests.withOrders(["orders: site = 'A'"]) { s, admin, key in
            let peer = try await Self.connect(s.port, site: 0xB1, .apiKey(key))
            #expect(try await Self.initialSync(peer, id: 1, "SELECT * FROM orders") == ["o1", "o3"])
            let adminRest = s.rest(key: admin)
            // o1 moves to site B: it leaves (its current state, PROTOCOL.md §4.6), then nothing more of it.
            _ = try await adminRest.executeOK("UPDATE orders SET site = 'B' WHERE _id = 'o1'")
            let leaving = Self.changed(try await peer.waitFor { !Self.changed([$0], "o1").isEmpty }, "o1")
            guard case .state? = leaving.last?.payload else { Issue.record("o1 did not leave with its state: \(leaving)"); return }
            // o2 moves to site A: it enters. A later change of o1 is not sent; o3's marks the point.
            _ = try await adminRest.executeOK("UPDATE orders SET site = 'A' WHERE _id = 'o2'")
            _ = try await adminRest.executeOK("UPDATE orders SET n = 10 WHERE _id = 'o1'")
            _ = try await adminRest.executeOK("UPDATE orders SET n = 30 WHERE _id = 'o3'")
            let after = try await peer.waitFor { !Self.changed([$0], "o3").isEmpty }
            #expect(!Self.changed(after, "o2").isEmpty)
            #expect(Self.changed(after, "o1").isEmpty, "a hidden document's change reached the peer: \(after)")
            // `want` of a hidden document (o4 has no site) answers nothing; o3 (visible) comes back.
            peer.send(.want([DocumentRef(collection: "orders", id: "o4"), DocumentRef(collection: "orders", id: "o3")]))
            let wanted = try await peer.waitFor { !Self.changed([$0], "o3").isEmpty }
            #expect(Self.changed(wanted, "o4").isEmpty, "want fetched a hidden document: \(wanted)")
            // A subscription whose own WHERE asks for site B still gets nothing of it.
            #expect(try await Self.initialSync(peer, id: 2, "SELECT * FROM orders WHERE site = 'B'") == [])
        }
    }

    /// A `want` of a document the rules hide gets exactly the answer of one that does not exist:
    /// both listed in one `gone` (PROTOCOL.md §4.7), byte for byte alike, so a peer cannot learn
    /// that a hidden document exists; a visible one comes back with its state.
    @Test func want_ofAHiddenDocument_looksLikeOneThatDoesNotExist() async throws {
        try await ReadRulesEndToEndTests.withOrders(["orders: site = 'A'"]) { s, _, key in
            let peer = try await Self.connect(s.port, site: 0xB5, .apiKey(key), capabilities: [SyncCapability.gone])
            #expect(try await Self.initialSync(peer, id: 1, "SELECT * FROM orders") == ["o1", "o3"])
            let hidden = DocumentRef(collection: "orders", id: "o4"), missing = DocumentRef(collection: "orders", id: "o-none")
            peer.send(.want([hidden, DocumentRef(collection: "orders", id: "o3")]))
            let first = try await peer.waitFor { if case .gone = $0 { true } else { false } }
            #expect(first.last == .gone([hidden]))
            let visible = try await peer.waitFor { !Self.changed([$0], "o3").isEmpty }
            peer.send(.want([missing]))
            let second = try await peer.waitFor { if case .gone = $0 { true } else { false } }
            #expect(second.last == .gone([missing]))
            // The same bytes but for the id: nothing tells the two apart.
            let a = SyncMessage.gone([hidden]).encode(), b = SyncMessage.gone([missing]).encode()
            #expect(a.count - "o4".utf8.count == b.count - "o-none".utf8.count)
            #expect(Self.changed(first + visible + second, "o4").isEmpty, "want fetched a hidden document")
        }
    }

    @Test func uploadOverAHiddenID_getsNoMergedStateBack() async throws {
        try await ReadRulesEndToEndTests.withOrders(["orders: site = 'A'"]) { s, admin, key in
            let peer = try await Self.connect(s.port, site: 0xB2, .apiKey(key))
            #expect(try await Self.initialSync(peer, id: 1, "SELECT * FROM orders") == ["o1", "o3"])
            // The peer writes a document with the id of site B's o2, which it cannot read.
            var replica = Replica(site: SiteID(0xB2))
            var doc = try Document(id: "o2")
            let before = doc.versionVector
            _ = try doc.upsert(["_id": "o2", "note": "mine"], replica: &replica)
            peer.send(.upload(seq: 1, entries: [UploadEntry(document: DocumentRef(collection: "orders", id: "o2"), delta: doc.delta(since: before).encode())]))
            let acked = try await peer.waitFor { if case .ack = $0 { true } else { false } }
            _ = try await s.rest(key: admin).executeOK("UPDATE orders SET n = 31 WHERE _id = 'o3'")
            let after = try await peer.waitFor { !Self.changed([$0], "o3").isEmpty }
            #expect(Self.changed(acked + after, "o2").isEmpty, "the merged state of a hidden document came back: \(acked + after)")
            let stored = try await s.rest(key: admin).execute("SELECT * FROM orders WHERE _id = 'o2'")
            #expect(ReadRulesEndToEndTests.item(stored, 0)?["site"] == "B")
        }
    }

    @Test func aForgedHave_doesNotReadAHiddenDocumentAsItLeaves() async throws {
        try await ReadRulesEndToEndTests.withOrders(["orders: site = 'A'"]) { s, admin, key in
            let first = try await Self.connect(s.port, site: 0xB3, .apiKey(key))
            first.send(.subscribe(Subscribe(id: 1, query: "SELECT * FROM orders")))
            let synced = try await first.waitFor { if case .synced = $0 { true } else { false } }
            guard case .synced(_, let cp)? = synced.last else { Issue.record("no synced"); return }
            first.send(.bye(code: 1000, reason: "done"))
            // Resumes claiming to hold o2 (site B, never sent to it) besides o1 (which it got).
            let peer = try await Self.connect(s.port, site: 0xB4, .apiKey(key))
            let have = [DocumentHash.of(DocumentRef(collection: "orders", id: "o1")), DocumentHash.of(DocumentRef(collection: "orders", id: "o2"))].sorted()
            peer.send(.subscribe(Subscribe(id: 1, query: "SELECT * FROM orders", checkpoint: cp, have: have)))
            _ = try await peer.waitFor { if case .synced = $0 { true } else { false } }
            let adminRest = s.rest(key: admin)
            // A change while o1 is visible delivers it: from then on it leaves like any held document.
            _ = try await adminRest.executeOK("UPDATE orders SET n = 7 WHERE _id = 'o1'")
            _ = try await peer.waitFor { !Self.changed([$0], "o1").isEmpty }
            _ = try await adminRest.executeOK("UPDATE orders SET n = 50 WHERE _id = 'o2'")
            _ = try await adminRest.executeOK("UPDATE orders SET site = 'B' WHERE _id = 'o1'")
            let after = try await peer.waitFor { !Self.changed([$0], "o1").isEmpty }
            #expect(Self.changed(after, "o2").isEmpty, "a forged have read a hidden document: \(after)")
            guard case .state? = Self.changed(after, "o1").last?.payload else { Issue.record("o1 did not leave with its state"); return }
        }
    }

    @Test func jwtPermissions_resolveClaims_andAMissingClaimShowsNothing() async throws {
        try await ReadRulesEndToEndTests.withOrders([], { $0.jwt = try? JWTVerifier(secret: Self.secret) }) { s, _, _ in
            let jwt = try JWTVerifier(secret: Self.secret)
            let permissions: Value = ["read": ["queriesByCollection": ["orders": ["site = :claims.site"]]]]
            let exp = Value.int(JWTVerifier.wallClockSeconds() + 3600)
            let siteB = jwt.sign(claims: ["sub": "tech-1", "exp": exp, "site": "B", "permissions": permissions])
            let peer = try await Self.connect(s.port, site: 0xC1, .jwt(siteB))
            #expect(try await Self.initialSync(peer, id: 1, "SELECT * FROM orders") == ["o2"])
            let noSite = jwt.sign(claims: ["sub": "tech-2", "exp": exp, "permissions": permissions])
            let other = try await Self.connect(s.port, site: 0xC2, .jwt(noSite))
            #expect(try await Self.initialSync(other, id: 1, "SELECT * FROM orders") == [])
            // Not in queriesByCollection: not readable at all.
            other.send(.subscribe(Subscribe(id: 2, query: "SELECT * FROM parts")))
            let refused = try await other.waitFor { if case .subscriptionError = $0 { true } else { false } }
            #expect(!refused.isEmpty)
        }
    }

    /// Random documents and random rules (seeded): the ids a caller sees through REST SELECT, the
    /// legacy find and a sync subscription are the same set, and equal an in-memory evaluation.
    @Test(arguments: [UInt64(21), 2103])
    func differential_restLegacyFindAndSyncAgreeWithMemory(seed: UInt64) async throws {
        var random = SeededRandom(seed: seed)
        let sites: [Value] = ["A", "B", "C", .null, 1, ["x": 1]]
        var documents: [Value] = []
        for i in 0..<40 {
            var d: [String: Value] = ["_id": .string("d\(i)")]
            if random.chance(85) { d["site"] = sites[random.below(sites.count)] }
            if random.chance(80) { d["n"] = random.chance(80) ? .int(Int64(random.below(8))) : .string("\(random.below(8))") }
            if random.chance(50) { d["ok"] = .bool(random.chance(50)) }
            documents.append(.object(d))
        }
        func atom() -> String {
            switch random.below(8) {
            case 0: return "site = '\(["A", "B", "C"][random.below(3)])'"
            case 1: return "n > \(random.below(8))"
            case 2: return "site IN ('A', 'C')"
            case 3: return "site IS MISSING"
            case 4: return "n BETWEEN 2 AND 5"
            case 5: return "ok = true"
            case 6: return "site IS NULL"
            default: return "n != 3"
            }
        }
        func condition(_ depth: Int) -> String {
            guard depth > 0, random.chance(60) else { return random.chance(20) ? "NOT (\(atom()))" : atom() }
            return "(\(condition(depth - 1)) \(random.chance(50) ? "AND" : "OR") \(condition(depth - 1)))"
        }
        try await withServer { s in
            let admin = try await s.newKey()
            var args: [String: Value] = [:]
            for (i, d) in documents.enumerated() { args["d\(i)"] = d }
            _ = try await s.rest(key: admin).executeOK("INSERT INTO things DOCUMENTS " + documents.indices.map { "(:d\($0))" }.joined(separator: ", "), args)
            let expires = PostgresTimestamp(microsecondsSince1970: APIKeyStore.now().microsecondsSince1970 + 3_600_000_000)
            for round in 0..<8 {
                let entries = (0..<(1 + random.below(2))).map { _ in "things: " + condition(2) }
                let rules = try entries.map { try DocumentRule.parse(entry: $0) }
                let key = try await s.keys.create(description: "r\(round)", expiresAt: expires, read: .none, write: .none, readRules: rules).1.text
                var memory = DocumentRules()
                for r in rules { memory.add(collection: r.collection, text: r.text, condition: try r.resolved(claims: [:])) }
                let expected = documents.filter { memory.allows($0, in: "things", nowMilliseconds: 0) }
                    .compactMap { Self.string($0["_id"]) }.sorted()

                func strings(_ ids: [Value]) -> [String] { ids.compactMap { Self.string($0) }.sorted() }
                let rest = strings(ReadRulesEndToEndTests.ids(try await s.rest(key: key).execute("SELECT * FROM things")))
                let legacy = strings(ReadRulesEndToEndTests.ids(try await s.post("/api/v4/store/find", ["collection": "things"], key: key), "documents"))
                let peer = try await Self.connect(s.port, site: 0xD000 + UInt64(round), .apiKey(key))
                let synced = try await Self.initialSync(peer, id: 1, "SELECT * FROM things")
                peer.send(.bye(code: 1000, reason: "done"))
                #expect(rest == expected, "seed \(seed) round \(round) \(entries): REST")
                #expect(legacy == expected, "seed \(seed) round \(round) \(entries): legacy find")
                #expect(synced == expected, "seed \(seed) round \(round) \(entries): sync")
            }
        }
    }
}
