// How a local node replicates with its upstream (docs/LOCAL-NODE.md): `bigpeer serve --upstream
// URL --upstream-key KEY|--upstream-jwt-file F [--upstream-subscribe Q]... [--upstream-relay-subscriptions]`.

import SyncProtocol

public struct UpstreamConfiguration: Sendable {
    public enum Credentials: Sendable, Equatable {
        /// A BigPeer API key of the upstream.
        case apiKey(String)
        /// A file holding a JWT for the upstream. Read again at every connection, when the
        /// upstream sends `renew` (the token expires soon), when its modification time changes,
        /// and every `credentialsRereadInterval`: a new token in the file reaches a running
        /// session with `auth` (PROTOCOL.md §4.13), so the token can be renewed without a restart.
        case jwtFile(String)
    }

    /// `ws://host:port/api/v4/sync` or `wss://...`.
    public var url: String
    public var credentials: Credentials?
    /// DQL `SELECT * FROM c [WHERE ...]` queries subscribed upstream for the whole run.
    public var subscriptions: [String] = []
    /// Also subscribe upstream with the union of the local peers' subscriptions.
    public var relaySubscriptions = false
    public var reconnectBase: Duration = .milliseconds(250)
    public var reconnectMax: Duration = .seconds(30)
    /// CA file for `wss://` in addition to the system's.
    public var additionalCAFile: String?
    /// One `up`: documents and delta bytes (the server takes 10 000 documents per message).
    public var uploadBatchDocuments = 1000
    public var uploadBatchBytes = 1 << 20
    /// `up`s waiting for their `ack` at once.
    public var uploadsInFlight = 4
    /// Change-log rows read per upload backlog read (and their byte bound).
    public var backlogReadRows = 2000
    public var backlogReadBytes = 4 << 20
    /// Downloaded entries merged per transaction (at most; fewer when fewer have arrived).
    public var downloadBatchDocuments = 2000
    /// Download credit granted to the upstream (`hello.credit`): the bytes it may have in flight
    /// toward this node, hence what the download queue holds at most (plus one message).
    public var downloadCredit: UInt64 = 4 << 20
    public var credentialsRereadInterval: Duration = .seconds(30)
    /// After the last local peer's subscription goes, how long its relayed upstream subscription
    /// stays (a peer reconnecting does not make the node unsubscribe and re-sync).
    public var relayLinger: Duration = .seconds(30)
    /// With several instances on one database (`UpstreamLease`): how often a standby instance
    /// tries to take the replication lock, and how often the holder checks it still holds it.
    public var leaseRetryInterval: Duration = .seconds(5)
    public var leaseProbeInterval: Duration = .seconds(2)
    /// The upstream's row in `bigpeer_upstream` and the name of its replication lock; nil: the
    /// URL without user information. A node found on the LAN is named by its peer key instead
    /// (`lan:<pk>`), since its address changes and its key does not.
    public var storageKey: String?
    /// The name this node gives upstream (`hello.name`).
    public var deviceName = "bigpeer-local-node"

    public init(url: String, credentials: Credentials?) {
        self.url = url
        self.credentials = credentials
    }

    /// The URL without user information (what the status shows and the database row is named
    /// by): `ws://user:secret@host/...` must not leak a secret into logs or responses.
    public var displayURL: String { Self.withoutUserInfo(url) }

    /// What the upstream's stored state and lease are named by.
    public var rowKey: String { storageKey ?? displayURL }

    static func withoutUserInfo(_ url: String) -> String {
        let chars = Array(url)
        var i = 0
        while i + 2 < chars.count, !(chars[i] == ":" && chars[i + 1] == "/" && chars[i + 2] == "/") { i += 1 }
        guard i + 2 < chars.count else { return url }
        let authority = i + 3
        var end = authority
        while end < chars.count, !["/", "?", "#"].contains(chars[end]) { end += 1 }
        guard let at = chars[authority..<end].lastIndex(of: "@") else { return url }
        return String(chars[..<authority]) + String(chars[(at + 1)...])
    }
}
