// A seeded simulation: 10 SmallPeers and REST clients edit the same documents (registers, map keys,
// counters, deletes, re-inserts) while mostly offline, sync in random order, the server restarts
// half-way; at the end every peer and the server hold the same values.
import BigPeerServer
import BigPeerTestSupport
@testable import SmallPeer
import TestRandomness
import Testing
import Values

@Suite("SmallPeer convergence simulation", .serialized)
struct ConvergenceSimulationTests {
    static let peers = 10
    static let rounds = 4
    static let ids = (0..<8).map { "d\($0)" }

    /// One random statement with its arguments.
    static func randomOperation(_ rng: inout SeededRandom) -> (String, [String: Value]) {
        let id = Value.string(ids[rng.below(ids.count)])
        let key = "k\(rng.below(4))"
        let v = Value.int(Int64(rng.below(1000)))
        switch rng.below(7) {
        case 0, 1:
            return ("INSERT INTO COLLECTION sim (m MAP) DOCUMENTS (:d) ON ID CONFLICT DO UPDATE",
                    ["d": .object(["_id": id, "r": v, "m": .object([key: v])])])
        case 2: return ("UPDATE sim SET r = :v WHERE _id = :id", ["id": id, "v": v])
        case 3: return ("UPDATE COLLECTION sim (m MAP) SET m.\(key) = :v WHERE _id = :id", ["id": id, "v": v])
        case 4: return ("UPDATE COLLECTION sim (c COUNTER) APPLY c INCREMENT BY :n WHERE _id = :id", ["id": id, "n": .int(Int64(rng.below(5) + 1))])
        case 5: return ("DELETE FROM sim WHERE _id = :id", ["id": id])
        default: return ("UPDATE COLLECTION sim (m MAP) UNSET m.\(key) WHERE _id = :id", ["id": id])
        }
    }

    @Test func tenPeers_randomOfflineEdits_serverRestart_converge() async throws {
        let dirs = (0..<Self.peers).map { TempDirectory("sim\($0)") }
        defer { dirs.forEach { $0.cleanup() } }
        var rng = SeededRandom(seed: 0x51A1)
        try await TestPostgres.withDatabase { db in
            var server = try await TestServer.start(db)
            let port = server.port
            do {
                let peers = try dirs.map { try openPeer($0.path) }
                for p in peers { _ = try p.subscribe("SELECT * FROM sim") }
                for round in 0..<Self.rounds {
                    for p in peers where rng.below(3) != 0 {
                        for _ in 0...rng.below(4) {
                            let (q, args) = Self.randomOperation(&rng)
                            _ = try p.execute(q, arguments: args)
                        }
                    }
                    for _ in 0..<rng.below(3) {
                        let (q, args) = Self.randomOperation(&rng)
                        try await server.execute(q, args)
                    }
                    for p in peers where rng.below(2) == 0 { try await server.syncOnce(p) }
                    if round == Self.rounds / 2 {
                        await server.stop()
                        server = try await TestServer.start(db, port: port, key: server.key)
                    }
                }
                // Everyone syncs twice: the first pass uploads, the second brings everyone else's.
                for _ in 0..<2 { for p in peers { try await server.syncOnce(p) } }
                let rest = try await server.items("SELECT * FROM sim ORDER BY _id")
                #expect(!rest.isEmpty)
                for (i, p) in peers.enumerated() {
                    #expect(try p.execute("SELECT * FROM sim ORDER BY _id").items == rest, "peer \(i) differs from the server")
                    #expect(p.pendingUploadCount == 0, "peer \(i) has unacknowledged uploads")
                }
                for p in peers { p.close() }
            } catch {
                await server.stop()
                throw error
            }
            await server.stop()
        }
    }
}
