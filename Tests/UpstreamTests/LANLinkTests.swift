import BigPeerTestSupport
import Foundation
import Glibc
import HTTP
import Postgres
import SmallPeer
import SyncProtocol
import Testing
import Values

/// LAN TCP peer links (`bigpeer serve --lan`, PROTOCOL.md §2 stream framing) with real processes:
/// a small peer syncs over `tcp://` exactly as over WebSocket, a node replicates with another
/// server over one, and broken frames end the link with `bye` and the right code.
@Suite(.serialized) struct LANLinkTests {
    static func lanArguments(_ port: Int) -> [String] { ["--lan", "--lan-host", "127.0.0.1", "--lan-port", String(port), "--no-lan-advertise"] }

    @Test func aSmallPeerSyncsOverATCPLink_bothWays() async throws {
        try await withDatabases(1) { urls, http, processes in
            let lanPort = try LocalPostgres.freeLoopbackPort()
            let node = try await Server.start(urls[0], extra: Self.lanArguments(lanPort), http: http, processes: processes)
            try await node.execute("INSERT INTO notes DOCUMENTS ({'_id': 'from-node', 'text': 'hello'})")
            let dir = NSTemporaryDirectory() + "lan-link-\(UUID().uuidString)"
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(atPath: dir) }
            let peer = try SmallPeer(directory: dir + "/peer")
            _ = try peer.subscribe("SELECT * FROM notes")
            let client = try SyncClient(peer: peer, configuration: SyncClient.Configuration(url: "tcp://127.0.0.1:\(lanPort)", apiKey: nil))
            func peerIDs() -> [String] {
                ((try? peer.execute("SELECT * FROM notes ORDER BY _id").items) ?? []).compactMap { $0["_id"]?.stringValue }
            }
            #expect(await eventually(within: .seconds(30)) { peerIDs() == ["from-node"] }, "the node's document reached the peer over TCP")
            _ = try peer.execute("INSERT INTO notes DOCUMENTS ({'_id': 'from-peer'})")
            #expect(await eventually(within: .seconds(30)) { (try? await node.count("notes")) == 2 }, "the peer's document reached the node")
            try await node.execute("UPDATE notes SET text = 'live' WHERE _id = 'from-node'")
            #expect(await eventually(within: .seconds(30)) {
                ((try? peer.execute("SELECT * FROM notes WHERE _id = 'from-node'").items) ?? []).first?["text"]?.stringValue == "live"
            }, "a live change arrived")
            await client.stop()
        }
    }

    /// Two servers on one ship: one is the other's upstream over a LAN TCP link.
    @Test func aNodeReplicatesWithAnotherServerOverATCPLink() async throws {
        try await withDatabases(2) { urls, http, processes in
            let lanPort = try LocalPostgres.freeLoopbackPort()
            let first = try await Server.start(urls[0], extra: Self.lanArguments(lanPort), http: http, processes: processes)
            let second = try await Server.start(urls[1], extra: ["--upstream", "tcp://127.0.0.1:\(lanPort)", "--upstream-subscribe", "SELECT * FROM crew",
                                                                 "--upstream-retry-max", "1"],
                                                http: http, processes: processes)
            try await first.execute("INSERT INTO crew DOCUMENTS ({'_id': 'a'})")
            try await second.execute("INSERT INTO crew DOCUMENTS ({'_id': 'b'})")
            #expect(await eventually(within: .seconds(30)) { await converged([first, second], "crew", minimum: 2) })
            let status = try await second.upstreamStatus()
            #expect(status["state"]?.stringValue == "connected" && status["url"]?.stringValue == "tcp://127.0.0.1:\(lanPort)", "\(status)")
        }
    }

    /// A zero length, a length above the limit, and a frame that is not a message: each ends the
    /// link with `bye` carrying the close code (a stream has no close frame), then EOF.
    @Test func brokenFramesEndTheLinkWithBye() async throws {
        try await withDatabases(1) { urls, http, processes in
            let lanPort = try LocalPostgres.freeLoopbackPort()
            _ = try await Server.start(urls[0], extra: Self.lanArguments(lanPort), http: http, processes: processes)
            for (bytes, code) in [([0, 0, 0, 0], SyncCloseCode.protocolViolation), ([0x7F, 0, 0, 0], .messageTooLarge),
                                  ([0, 0, 0, 3, 0x61, 0x62, 0x63], .protocolViolation)] as [([UInt8], SyncCloseCode)] {
                let fd = try RawSocket.connect(port: lanPort, receiveBuffer: 1 << 16)
                defer { close(fd) }
                try await RawSocket.write(fd, bytes)
                let received = try await RawSocket.readUntilEOF(fd, timeout: .seconds(10))
                var decoder = StreamFrameDecoder(maxMessageSize: 1 << 20)
                let messages = try decoder.feed(received)
                guard let last = messages.last, case .bye(let got, _)? = try? SyncMessageDecoder.decode(last) else {
                    Issue.record("no bye for \(bytes): \(received)")
                    continue
                }
                #expect(got == code.rawValue, "\(bytes)")
            }
        }
    }

    /// The connection policy applies to LAN links as to WebSockets, matched on the link type: a
    /// rule denying `AccessPoint` links to `guest-*` refuses one (4003, with the delay) and lets
    /// another name through.
    @Test func theConnectionPolicyAppliesToLANLinks() async throws {
        try await withDatabases(1) { urls, http, processes in
            let dir = NSTemporaryDirectory() + "lan-policy-\(UUID().uuidString)"
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(atPath: dir) }
            let policy = dir + "/policy.json"
            try Data("""
                {"version": 1, "default": "allow", "rules": [
                  {"name": "no guests on the LAN", "action": "deny", "deviceName": "guest-*", "link": "AccessPoint", "reason": "guests use the cloud", "retryAfterSeconds": 60}
                ]}
                """.utf8).write(to: URL(fileURLWithPath: policy))
            let lanPort = try LocalPostgres.freeLoopbackPort()
            _ = try await Server.start(urls[0], extra: Self.lanArguments(lanPort) + ["--peer-policy", policy], http: http, processes: processes)
            func handshake(_ name: String) async throws -> SyncMessage? {
                let fd = try RawSocket.connect(port: lanPort, receiveBuffer: 1 << 16)
                defer { close(fd) }
                let hello = SyncMessage.hello(Hello(site: UInt64.random(in: 1...UInt64.max), peerKey: [1, 2, 3], deviceName: name, credentials: nil,
                                                    credit: 1 << 20, maxMessageSize: 1 << 20))
                try await RawSocket.write(fd, StreamFraming.frame(hello.encode()))
                var decoder = StreamFrameDecoder(maxMessageSize: 1 << 20)
                while true {
                    switch try await DescriptorWait.receive(fd, upTo: 1 << 16, timeout: .seconds(10)) {
                    case .data(let bytes):
                        if let first = try decoder.feed(bytes).first { return try SyncMessageDecoder.decode(first) }
                    case .closed, .timedOut:
                        return nil
                    }
                }
            }
            guard case .refuse(let code, let reason)? = try await handshake("guest-7") else { Issue.record("no refuse"); return }
            #expect(code == SyncCloseCode.policy.rawValue && reason.contains("guests use the cloud") && reason.contains("retry after 60 s"), "\(reason)")
            guard case .welcome? = try await handshake("crew-1") else { Issue.record("crew-1 was not welcomed"); return }
        }
    }
}
