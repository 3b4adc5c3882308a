import BigPeerServer
import BigPeerTestSupport
import CRDT
import LANDiscovery
import Postgres
import ServerTestSupport
import Store
import SyncProtocol
import Testing
import Values

/// Two nodes on one ship (`LANMesh`, docs/LOCAL-NODE.md): two in-process servers on two databases,
/// each told of the other as its mDNS browser would tell it (multicast is tested in network
/// namespaces by scripts/lan-discovery.sh): exactly one dials, documents written on either reach
/// the other, the link ends after the grace once the other stops advertising, and the row it held
/// is deleted after `forgetAfter`.
@Suite struct LANMeshTests {
    static func node(_ db: TestDatabase, name: String) async throws -> InProcessServer {
        try await InProcessServer.start(on: db) { config in
            config.insecureDevelopment = true
            var lan = LANConfiguration()
            lan.host = "127.0.0.1"
            lan.port = 0
            lan.advertise = false
            lan.syncGroup = 7
            lan.deviceName = name
            var mesh = LANMeshConfiguration()
            mesh.subscriptions = ["SELECT * FROM crew"]
            mesh.grace = .milliseconds(200)
            mesh.forgetAfter = .seconds(1)
            mesh.reconnectMax = .seconds(1)
            mesh.leaseRetryInterval = .milliseconds(300)
            lan.mesh = mesh
            config.lan = lan
        }
    }

    static func advertisement(_ node: InProcessServer, name: String) -> LANAdvertisement {
        LANAdvertisement(name: name, port: UInt16(node.service.lanPort ?? 0), protocolVersion: SyncProtocol.version,
                         peerKey: LANAdvertisement.siteKey(node.service.store.siteID.rawValue), syncGroup: 7, role: .node)
    }

    static func count(_ node: InProcessServer, _ collection: String) async -> Int64? {
        try? await node.rest().executeOK("SELECT count(*) AS n FROM \(collection)")["items"]?.arrayValue?.first?["n"]?.int64Value
    }

    static func discoveredRows(_ node: InProcessServer) async throws -> [String] {
        try await node.service.pool.query("SELECT upstream FROM bigpeer_upstream WHERE discovered_peer_key IS NOT NULL ORDER BY 1")
            .map { try $0.decode(0, as: String.self) }
    }

    /// Two nodes, `node-a` and `node-b`, on two databases of their own (also given to `body`),
    /// stopped after `body`.
    static func withTwoNodes(_ body: (InProcessServer, InProcessServer, TestDatabase, TestDatabase) async throws -> Void) async throws {
        try await TestPostgres.withDatabase { dbA in
            try await TestPostgres.withDatabase { dbB in
                let a = try await Self.node(dbA, name: "node-a")
                try await afterwards({ await a.stop() }) {
                    let b = try await Self.node(dbB, name: "node-b")
                    try await afterwards({ await b.stop() }) { try await body(a, b, dbA, dbB) }
                }
            }
        }
    }

    @Test func twoNodesLinkOnce_replicateBothWays_andForgetEachOtherAfterTheyPart() async throws {
        try await Self.withTwoNodes { a, b, _, _ in try await Self.linkAndPart(a, b) }
    }

    /// Two instances of the dialling node on one database: both see the other node, one dials it
    /// (it holds the link's replication lock), the other stands by and takes over when it stops.
    @Test func ofTwoInstancesOnOneDatabaseOnlyTheLockHolderDials() async throws {
        try await Self.withTwoNodes { a, b, dbA, dbB in
            let (adA, adB) = (Self.advertisement(a, name: "node-a"), Self.advertisement(b, name: "node-b"))
            let aDials = LANLinkRule.dials(adA.peerKey, adB.peerKey)
            let (dialler, acceptor, acceptorAd) = aDials ? (a, b, adB) : (b, a, adA)
            let second = try await Self.node(aDials ? dbA : dbB, name: aDials ? "node-a" : "node-b")
            try await afterwards({ await second.stop() }) {
                try await Self.onlyTheLockHolderDials([dialler, second], acceptor: acceptor, acceptorAd: acceptorAd)
            }
        }
    }

    static func onlyTheLockHolderDials(_ instances: [InProcessServer], acceptor: InProcessServer, acceptorAd: LANAdvertisement) async throws {
        for instance in instances { instance.service.mesh?.links.seen(acceptorAd, url: "tcp://127.0.0.1:\(acceptorAd.port)") }
        func states() async -> [String] {
            var out: [String] = []
            for instance in instances {
                let links = try? await instance.rest().get("/api/v4/upstream").body["lanLinks"]?.arrayValue
                out.append(links?.first?["state"]?.stringValue ?? "none")
            }
            return out
        }
        #expect(await eventually(within: .seconds(30)) { await states().sorted() == ["connected", "standby"] })
        #expect(acceptor.service.syncSessionCount == 1, "one link between the two databases")
        try await instances[0].rest().executeOK("INSERT INTO crew DOCUMENTS ({'_id': 'one'})")
        try await instances[1].rest().executeOK("INSERT INTO crew DOCUMENTS ({'_id': 'two'})")
        #expect(await eventually(within: .seconds(30)) { await count(acceptor, "crew") == 2 }, "writes on either instance go over the one link")
        // The holder's links end (as when it stops): its lock goes with them.
        let holder = await states()[0] == "connected" ? 0 : 1
        await instances[holder].service.mesh?.stop()
        let survivor = instances[1 - holder]
        #expect(await eventually(within: .seconds(30)) {
            let links = try? await survivor.rest().get("/api/v4/upstream").body["lanLinks"]?.arrayValue
            return links?.first?["state"]?.stringValue == "connected" && acceptor.service.syncSessionCount == 1
        }, "the standby took the link over")
    }

    static func linkAndPart(_ a: InProcessServer, _ b: InProcessServer) async throws {
        let (adA, adB) = (advertisement(a, name: "node-a"), advertisement(b, name: "node-b"))
        // Each hears the other, and itself (another instance of its own database would look so).
        for (node, other, own) in [(a, adB, adA), (b, adA, adB)] {
            let mesh = try #require(node.service.mesh)
            mesh.links.seen(own, url: "tcp://127.0.0.1:\(own.port)")
            mesh.links.seen(other, url: "tcp://127.0.0.1:\(other.port)")
        }
        let (dialler, acceptor) = LANLinkRule.dials(adA.peerKey, adB.peerKey) ? (a, b) : (b, a)
        let diallerMesh = try #require(dialler.service.mesh)
        #expect(await eventually(within: .seconds(30)) { diallerMesh.links.links.count == 1 && acceptor.service.syncSessionCount == 1 })
        #expect(acceptor.service.mesh?.links.links.isEmpty == true, "the node with the higher key only accepts")
        #expect(dialler.service.syncSessionCount == 0, "exactly one link: the acceptor dials nobody")

        try await a.rest().executeOK("INSERT INTO crew DOCUMENTS ({'_id': 'from-a'})")
        try await b.rest().executeOK("INSERT INTO crew DOCUMENTS ({'_id': 'from-b'})")
        #expect(await eventually(within: .seconds(30)) {
            let (onA, onB) = (await count(a, "crew"), await count(b, "crew"))
            return onA == 2 && onB == 2
        }, "both ways")

        let status = try await dialler.rest().get("/api/v4/upstream").body
        let links = status["lanLinks"]?.arrayValue ?? []
        #expect(links.count == 1 && links.first?["dials"]?.boolValue == true && links.first?["state"]?.stringValue == "connected", "\(status)")
        let accepting = try await acceptor.rest().get("/api/v4/upstream").body["lanLinks"]?.arrayValue ?? []
        #expect(accepting.count == 1 && accepting.first?["state"]?.stringValue == "accepting", "\(accepting)")
        let otherKey = LANAdvertisement.hex(dialler.port == a.port ? adB.peerKey : adA.peerKey)
        #expect(try await discoveredRows(dialler) == ["lan:\(otherKey)"])
        #expect(try await discoveredRows(acceptor).isEmpty)
        // Each shows the other in its presence graph, over a LAN TCP link.
        for (node, other) in [(dialler, acceptor), (acceptor, dialler)] {
            let otherName = other.port == a.port ? "node-a" : "node-b"
            #expect(await eventually(within: .seconds(30)) {
                let graph = try? await node.rest().get("/api/v4/presence").body
                let peer = graph?["remotePeers"]?.arrayValue?.first { $0["deviceName"]?.stringValue == otherName }
                return peer?["connections"]?.arrayValue?.first?["type"]?.stringValue == "AccessPoint"
            }, "\(otherName) in the presence of the other")
        }

        // The acceptor stops advertising: after the grace the link ends, after forgetAfter its row goes.
        diallerMesh.links.lost(name: dialler.port == a.port ? "node-b" : "node-a")
        #expect(await eventually(within: .seconds(30)) { diallerMesh.links.links.isEmpty && acceptor.service.syncSessionCount == 0 })
        #expect(await eventually(within: .seconds(30)) { (try? await discoveredRows(dialler))?.isEmpty == true }, "the row expired")
        let forgotten = try await dialler.rest().get("/api/v4/upstream").body["lanLinks"]?.arrayValue
        #expect(forgotten == [], "\(String(describing: forgotten))")
    }
}
