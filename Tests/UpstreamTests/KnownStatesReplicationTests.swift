import BigPeerTestSupport
import Foundation
import HTTP
import SmallPeer
import Testing
import Values

/// "Changing the subscriptions starts a new download checkpoint without re-sending what is held"
/// (issue #18): a subscription that starts from nothing lists in `known` what the node has, and
/// the cloud sends only the documents whose state differs (PROTOCOL.md §4.3).
@Suite(.serialized) struct KnownStatesReplicationTests {
    static let all = "SELECT * FROM things"
    static let kindA = "SELECT * FROM things WHERE kind = 'a'"

    static func int(_ value: Value?) -> Int64? { if case .int(let n)? = value { n } else { nil } }
    static func int(_ status: Value, _ key: String) -> Int64 { int(status[key]) ?? -1 }

    static func synced(_ node: Server, _ query: String) async -> Bool {
        guard let subs = (try? await node.upstreamStatus())?["subscriptions"]?.arrayValue else { return false }
        return subs.contains { $0["query"]?.stringValue == query && $0["synced"]?.boolValue == true }
    }

    /// Cloud-made documents, downloaded to the node; the node restarts with another subscription:
    /// only the one document changed on the cloud meanwhile is downloaded again.
    @Test func aNewSubscriptionOverHeldDocuments_downloadsOnlyWhatChanged() async throws {
        try await withDatabases(2) { urls, http, processes in
            let cloud = try await Server.start(urls[0], http: http, processes: processes)
            let pad = String(repeating: "p", count: 1000)
            for chunk in stride(from: 0, to: 200, by: 50) {
                let docs = (chunk..<chunk + 50).map { "({'_id': 't\($0)', 'kind': '\($0 % 2 == 0 ? "a" : "b")', 'pad': '\(pad)'})" }
                try await cloud.execute("INSERT INTO things DOCUMENTS \(docs.joined(separator: ", "))")
            }
            var node = try await Server.start(urls[1], upstreamPort: cloud.port, subscribe: [Self.all], http: http, processes: processes)
            #expect(await eventually(within: .seconds(60)) { await converged([cloud, node], "things", minimum: 200) })
            #expect(await eventually(within: .seconds(30)) { await Self.synced(node, Self.all) })
            await node.stop()
            try await cloud.execute("UPDATE things SET v = 2 WHERE _id = 't10'")

            node = try await Server.start(urls[1], upstreamPort: cloud.port, subscribe: [Self.kindA], port: node.port, http: http, processes: processes)
            #expect(await eventually(within: .seconds(60)) { await Self.synced(node, Self.kindA) })
            let status = try await node.upstreamStatus()
            #expect(Self.int(status, "knownListed") == 100, "the node listed the 100 kind-a documents it holds")
            #expect(Self.int(status, "downloadedEntries") == 1, "only t10 came again: \(status)")
            #expect(Self.int(status, "downloadedBytes") < 2000, "one document of about 1 KB: \(status)")
            let t10 = try await node.execute("SELECT * FROM things WHERE _id = 't10'")["items"]?.arrayValue?.first
            #expect(Self.int(t10?["v"]) == 2, "the changed document arrived")
            // Live changes follow as for any subscription (a held document gets deltas).
            try await cloud.execute("UPDATE things SET v = 3 WHERE _id = 't12'")
            #expect(await eventually(within: .seconds(30)) {
                Self.int((try? await node.execute("SELECT * FROM things WHERE _id = 't12'"))?["items"]?.arrayValue?.first?["v"]) == 3
            })
        }
    }

    /// Node-made documents, uploaded to the cloud; a small peer subscribes on the node, the node
    /// relays the subscription: the cloud sends back only the document it changed.
    @Test func aRelayedSubscription_overDocumentsMadeHere_downloadsOnlyWhatChanged() async throws {
        try await withDatabases(2) { urls, http, processes in
            let cloud = try await Server.start(urls[0], http: http, processes: processes)
            let node = try await Server.start(urls[1], upstreamPort: cloud.port, subscribe: ["SELECT * FROM messages"],
                                              extra: ["--upstream-relay-subscriptions"], http: http, processes: processes)
            let docs = (0..<60).map { "({'_id': 'n\($0)', 'kind': '\($0 % 2 == 0 ? "a" : "b")', 'pad': '\(String(repeating: "q", count: 500))'})" }
            try await node.execute("INSERT INTO things DOCUMENTS \(docs.joined(separator: ", "))")
            #expect(await eventually(within: .seconds(60)) { await converged([cloud, node], "things", minimum: 60) })
            try await cloud.execute("UPDATE things SET v = 2 WHERE _id = 'n4'")  // the node has no subscription on things

            let dir = NSTemporaryDirectory() + "known-states-\(UUID().uuidString)"
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(atPath: dir) }
            let peer = try SmallPeer(directory: dir + "/peer")
            _ = try peer.subscribe(Self.kindA)
            let client = try SyncClient(peer: peer, configuration: SyncClient.Configuration(url: node.syncURL, apiKey: nil))
            defer { Task { await client.stop() } }
            #expect(await eventually(within: .seconds(60)) { await Self.synced(node, Self.kindA) })
            let status = try await node.upstreamStatus()
            #expect(Self.int(status, "knownListed") == 30, "\(status)")
            #expect(Self.int(status, "downloadedEntries") == 1, "only n4 came back: \(status)")
            #expect(await eventually(within: .seconds(30)) {
                Self.int(((try? peer.execute("SELECT * FROM things WHERE _id = 'n4'").items) ?? []).first?["v"]) == 2
            }, "the change reached the small peer through the node")
            await client.stop()
        }
    }
}
