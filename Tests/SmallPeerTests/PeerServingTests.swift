// Small peers syncing with each other, no server between them (docs/SMALLPEER.md "Serving other
// peers"): one serves (`ServedStreamLink` on a loopback TCP listener), the other is an ordinary
// `SyncClient` with a `tcp://` URL. Initial sync and live changes both ways, a chain A ← B ← C in
// which a change crosses B both ways and nothing comes back, a restart of the serving peer, and a
// checkpoint older than the serving peer's change log.
import BigPeerTestSupport
import CRDT
import Sockets
@testable import SmallPeer
import Sync
import Synchronization
import SyncProtocol
import Testing
import Values

@Suite struct PeerServingTests {
    static let all = "SELECT * FROM cars"

    static func ids(_ peer: SmallPeer) throws -> [Value] {
        try peer.execute("SELECT _id FROM cars ORDER BY _id").items.compactMap { $0["_id"] }
    }

    static func has(_ peer: SmallPeer, _ id: String) -> Bool { (try? ids(peer).contains(.string(id))) == true }

    /// The serving peer's log rows and head.
    static func log(_ peer: SmallPeer) -> (rows: Int, head: Int64) { peer.state.withLock { ($0.log.count, $0.log.head) } }

    /// Peers A, B and C (sites 0xA, 0xB, 0xC) in `dirs`.
    static func threePeers(_ dirs: [TempDirectory]) throws -> (SmallPeer, SmallPeer, SmallPeer) {
        (try openPeer(dirs[0].path, site: 0xA), try openPeer(dirs[1].path, site: 0xB), try openPeer(dirs[2].path, site: 0xC))
    }

    /// A peer's key in presence graphs (the site id's bytes: the sync client's default).
    static func key(_ site: UInt64) -> String { PresenceGraph.keyString(SyncClientCore.peerKey(site)) }

    /// `a` writes one document and serves `b`, which subscribes to everything and catches up:
    /// the listener, the client, and `b`'s checkpoint then.
    static func firstSync(_ a: SmallPeer, _ b: SmallPeer, inserting id: String) async throws -> (PeerListener, SyncClient, Int64) {
        _ = try a.execute("INSERT INTO cars DOCUMENTS ({'_id': :id, 'n': 0})", arguments: ["id": .string(id)])
        let listener = try await PeerListener.start(a)
        _ = try b.subscribe(Self.all)
        let client = try Self.client(b, listener)
        try await client.waitUntilCaughtUp(timeout: .seconds(30))
        return (listener, client, try #require(b.checkpoint(for: b.subscriptions[0])))
    }

    /// Stops the clients, then the listeners.
    static func stop(_ clients: [SyncClient], _ listeners: [PeerListener]) async {
        for c in clients { await c.stop() }
        for l in listeners { await l.stop() }
    }

    static func client(_ peer: SmallPeer, _ listener: PeerListener) throws -> SyncClient {
        var c = SyncClient.Configuration(url: "tcp://127.0.0.1:\(listener.port)", apiKey: nil)
        c.reconnectBase = .milliseconds(20)
        c.reconnectMax = .milliseconds(200)
        c.quietMillis = 200
        return try SyncClient(peer: peer, configuration: c)
    }

    /// A change made on `a` reaches `c` and one made on `c` reaches `a`, through `b`; then a
    /// marker from `a`, after everything else in every log: an echo of C's change would reach B
    /// (from A) or C (from B) before it. Each peer logged each change once: its own write, or the
    /// one merge that brought it.
    static func changesCrossTheMiddlePeer(_ a: SmallPeer, _ b: SmallPeer, _ c: SmallPeer) async throws {
        _ = try a.execute("INSERT INTO cars DOCUMENTS ({'_id': 'fromA', 'n': 1})")
        #expect(try await eventually(within: .seconds(30)) { Self.has(c, "fromA") }, "A's change reached C through B")
        _ = try c.execute("INSERT INTO cars DOCUMENTS ({'_id': 'fromC', 'n': 2})")
        #expect(try await eventually(within: .seconds(30)) { Self.has(a, "fromC") }, "C's change reached A through B")
        _ = try a.execute("INSERT INTO cars DOCUMENTS ({'_id': 'mark', 'n': 3})")
        #expect(try await eventually(within: .seconds(30)) { Self.has(c, "mark") })
        for peer in [a, b, c] { #expect(Self.log(peer).rows == 3) }
    }

    @Test func twoPeers_initialSyncAndLiveChangesBothWays_andNothingEchoes() async throws {
        let dirA = TempDirectory(), dirB = TempDirectory()
        defer { dirA.cleanup(); dirB.cleanup() }
        let a = try openPeer(dirA.path, site: 0xA), b = try openPeer(dirB.path, site: 0xB)
        _ = try a.execute("INSERT INTO cars DOCUMENTS ({'_id': 'a1', 'n': 1}), ({'_id': 'a2', 'n': 2})")
        _ = try b.execute("INSERT INTO cars DOCUMENTS ({'_id': 'b1', 'n': 3})")
        let listener = try await PeerListener.start(a)
        _ = try b.subscribe(Self.all)
        b.state.withLock { $0.log.keepsRows = true }  // as if b served too: what it logs is counted below
        let client = try Self.client(b, listener)
        try await client.waitUntilCaughtUp(timeout: .seconds(30))
        #expect(try Self.ids(b) == ["a1", "a2", "b1"])
        #expect(try await eventually(within: .seconds(30)) { Self.has(a, "b1") }, "b's write was uploaded to a")
        // The served session is a presence link of a's (not a BigPeer link), and b sees a through it.
        let keyA = Self.key(0xA), keyB = Self.key(0xB)
        #expect(try await eventually(within: .seconds(30)) { a.presenceGraph.peer(keyB)?.deviceName == "smallpeer" })
        #expect(!a.presenceGraph.localPeer.isConnectedToBigPeer)
        #expect(try await eventually(within: .seconds(30)) { b.presenceGraph.peer(keyA) != nil })

        _ = try a.execute("UPDATE cars SET n = 10 WHERE _id = 'a1'")
        #expect(try await eventually(within: .seconds(30)) { try b.execute("SELECT n FROM cars WHERE _id = 'a1'").items == [["n": 10]] })
        let received = client.status.receivedEntries
        let logB = Self.log(b)

        // b's own change reaches a, and a sends nothing back: a's next change is the one entry b
        // receives (an echo would come before it, a's log being read in order), and b logs only
        // its own insert and that change.
        _ = try b.execute("INSERT INTO cars DOCUMENTS ({'_id': 'b2', 'n': 4})")
        #expect(try await eventually(within: .seconds(30)) { Self.has(a, "b2") })
        _ = try a.execute("INSERT INTO cars DOCUMENTS ({'_id': 'a3', 'n': 5})")
        #expect(try await eventually(within: .seconds(30)) { Self.has(b, "a3") })
        #expect(client.status.receivedEntries == received + 1)
        #expect(Self.log(b).rows == logB.rows + 2)
        #expect(try await eventually(within: .seconds(30)) { b.pendingUploadCount == 0 })
        await Self.stop([client], [listener])
    }

    @Test func chain_aChangeCrossesTheMiddlePeerBothWays_andNothingLoops() async throws {
        let dirs = [TempDirectory(), TempDirectory(), TempDirectory()]
        defer { for d in dirs { d.cleanup() } }
        let (a, b, c) = try Self.threePeers(dirs)
        // A serves B, B serves C; B and C subscribe to what they are served.
        let servesB = try await PeerListener.start(a), servesC = try await PeerListener.start(b)
        _ = try b.subscribe(Self.all)
        _ = try c.subscribe(Self.all)
        c.state.withLock { $0.log.keepsRows = true }  // as if C served too: what it logs is counted below
        let bToA = try Self.client(b, servesB), cToB = try Self.client(c, servesC)
        try await bToA.waitUntilCaughtUp(timeout: .seconds(30))
        try await cToB.waitUntilCaughtUp(timeout: .seconds(30))

        try await Self.changesCrossTheMiddlePeer(a, b, c)
        #expect([bToA.status.receivedEntries, cToB.status.receivedEntries] == [2, 2], "A's two changes, once each; no change came back")
        // Presence crosses B too: A and C see each other two hops away.
        let keyA = Self.key(0xA), keyC = Self.key(0xC)
        #expect(try await eventually(within: .seconds(30)) { c.presenceGraph.peer(keyA) != nil && a.presenceGraph.peer(keyC) != nil })
        await Self.stop([cToB, bToA], [servesC, servesB])
    }

    @Test func aPeerThatOnlyServes_relaysPresenceBetweenItsPeers() async throws {
        let dirs = [TempDirectory(), TempDirectory(), TempDirectory()]
        defer { for d in dirs { d.cleanup() } }
        let (a, b, c) = try Self.threePeers(dirs)
        a.setDeviceName("galley-tablet")
        let listener = try await PeerListener.start(a)
        let bToA = try Self.client(b, listener), cToA = try Self.client(c, listener)
        // A has no sync client of its own (no timer ticks its gossip): what its served links
        // receive drives it, and it passes B's record on to C and C's to B.
        let keyA = Self.key(0xA), keyB = Self.key(0xB), keyC = Self.key(0xC)
        #expect(try await eventually(within: .seconds(30)) { b.presenceGraph.peer(keyC) != nil && c.presenceGraph.peer(keyB) != nil })
        // The name it set shows, though it never announced one in a `hello` of its own.
        #expect(try await eventually(within: .seconds(30)) { b.presenceGraph.peer(keyA)?.deviceName == "galley-tablet" })
        await Self.stop([bToA, cToA], [listener])
    }

    @Test func restartOfTheServingPeer_keepsPositionsMonotone_andTheClientCatchesUp() async throws {
        let dirA = TempDirectory(), dirB = TempDirectory()
        defer { dirA.cleanup(); dirB.cleanup() }
        let clock = ManualWallClock()
        var a = try openPeer(dirA.path, site: 0xA, clock: clock)
        let b = try openPeer(dirB.path, site: 0xB)
        var (listener, client, checkpoint) = try await Self.firstSync(a, b, inserting: "before")
        let headBefore = Self.log(a).head
        #expect(checkpoint == headBefore)

        await listener.stop()
        a.close()
        // The manual wall clock has not moved: only the clock the commit records persist keeps
        // the numbers growing.
        a = try openPeer(dirA.path, clock: clock)
        #expect(Self.log(a).head >= headBefore)
        _ = try a.execute("INSERT INTO cars DOCUMENTS ({'_id': 'after', 'n': 2})")
        #expect(Self.log(a).head > headBefore)
        listener = try await PeerListener.start(a)
        await client.stop()
        let again = try Self.client(b, listener)
        try await again.waitUntilCaughtUp(timeout: .seconds(30))
        #expect(try Self.ids(b) == ["after", "before"])
        #expect(try #require(b.checkpoint(for: b.subscriptions[0])) > checkpoint)
        await Self.stop([again], [listener])
    }

    @Test func checkpointOlderThanTheLog_resyncs() async throws {
        let dirA = TempDirectory(), dirB = TempDirectory()
        defer { dirA.cleanup(); dirB.cleanup() }
        var configuration = SmallPeer.Configuration()
        configuration.site = 0xA
        configuration.changeLogRows = 2
        let a = try SmallPeer(directory: dirA.path, configuration: configuration)
        let b = try openPeer(dirB.path, site: 0xB)
        let (listener, first, checkpoint) = try await Self.firstSync(a, b, inserting: "k0")
        await first.stop()

        for i in 1...5 { _ = try a.execute("INSERT INTO cars DOCUMENTS ({'_id': 'k\(i)', 'n': \(i)})") }
        #expect(Self.log(a).rows == 2, "the log keeps the newest commits")
        #expect(try await PeerSyncStorage(peer: a).changeLogReaches(back: checkpoint) == false)

        let second = try Self.client(b, listener)
        try await second.waitUntilCaughtUp(timeout: .seconds(30))
        #expect(try Self.ids(b) == (0...5).map { .string("k\($0)") })
        #expect(try #require(b.checkpoint(for: b.subscriptions[0])) == Self.log(a).head)
        await Self.stop([second], [listener])
    }

    @Test func aDeltaThePeerAlreadyHas_isNeitherStoredNorLogged() throws {
        let dir = TempDirectory()
        defer { dir.cleanup() }
        let a = try openPeer(dir.path, site: 0xA)
        a.state.withLock { $0.log.keepsRows = true }  // as when serving
        let doc = try CRDTFixtures.document("x")
        let upload = UploadEntry(document: DocumentRef(collection: "cars", id: "x"), delta: doc.delta(since: VersionVector()).encode())
        let first = try a.mergeUploads([upload], origin: 0xB)
        #expect(first.rejected.isEmpty && Self.log(a) == (1, first.txn))
        let second = try a.mergeUploads([upload], origin: 0xC)
        #expect(second.txn == first.txn && second.rejected.isEmpty)
        #expect(Self.log(a).rows == 1)
        #expect(a.pendingUploadCount == 1, "a served upload goes on to the peer's own server")
    }
}

/// A loopback TCP listener whose links `peer` serves (what `bigpeer peer --lan --listen` wires).
final class PeerListener: Sendable {
    let port: Int
    private let group: EventLoopGroup
    private let listener: LoopBound<TCPListener>
    private let links = Mutex<[Int: LoopBound<ServedStreamLink>]>([:])

    private init(port: Int, group: EventLoopGroup, listener: LoopBound<TCPListener>) {
        self.port = port
        self.group = group
        self.listener = listener
    }

    static func start(_ peer: SmallPeer) async throws -> PeerListener {
        let group = try EventLoopGroup(threads: 1)
        let loop = group.loops[0]
        let box = MutexBox<PeerListener?>(nil)
        let counter = Atomic<Int>(0)
        let listener = try await loop.submit { () throws -> LoopBound<TCPListener> in
            let l = try TCPListener(address: try SocketAddress(ip: "127.0.0.1", port: 0), loop: loop) { fd, remote in
                let number = counter.wrappingAdd(1, ordering: .relaxed).newValue
                guard let link = try? ServedStreamLink(fd: fd, remote: remote, loop: loop, tls: nil, peer: peer, onClose: {
                    box.withLock { $0 }?.links.withLock { _ = $0.removeValue(forKey: number) }
                }) else { return }
                box.withLock { $0 }?.links.withLock { $0[number] = LoopBound(link, loop: loop) }
                link.start()
            }
            return LoopBound(l, loop: loop)
        }
        let port = try await loop.submit { listener.value.localAddress.port }
        let result = PeerListener(port: port, group: group, listener: listener)
        box.withLock { $0 = result }
        return result
    }

    /// Closes the listener and every link (with `bye`), then stops the loop.
    func stop() async {
        let listener = self.listener
        let links = self.links.withLock { Array($0.values) }
        _ = try? await listener.loop.submit {
            listener.value.close()
            for link in links { link.value.close(code: SyncCloseCode.goingAway.rawValue, reason: "stopping") }
        }
        _ = await eventually(within: .seconds(10)) { self.links.withLock { $0.isEmpty } }
        group.shutdown()
    }
}
