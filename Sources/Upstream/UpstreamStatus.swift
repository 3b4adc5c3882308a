// What `GET /api/v4/upstream` shows of a replicator (docs/LOCAL-NODE.md, "Status").

import Store
import SyncProtocol

public struct UpstreamStatus: Sendable, Equatable {
    public enum State: String, Sendable {
        /// A session is up (welcome received).
        case connected
        /// Connecting, or about to retry after a session ended.
        case connecting
        /// The upstream refused the session (credentials, protocol version, policy): retried with
        /// backoff, but it will not work until something changes.
        case refused
        /// The upstream cannot be reached (connection attempts fail).
        case offline
        /// Another instance on this database replicates with this upstream (it holds the
        /// replication lock); this one takes over if that one stops (`UpstreamLease`).
        case standby
    }

    public var state: State = .connecting
    /// The upstream's sync URL, without user information.
    public var url: String
    public var lastError: String?
    /// Why this instance stands by (or stood by last; nil once it replicates).
    public var standbyReason: String?
    /// Seconds since the epoch.
    public var lastErrorAt: Double?
    /// The last time the upstream sent data or acknowledged an upload.
    public var lastExchangeAt: Double?
    /// The last checkpoint (or `synced`) merged here: everything the upstream had committed up to
    /// `downloadCheckpoint` that the subscriptions match was merged then. (An upstream with
    /// nothing new for the node sends none, so its age alone says nothing about lag.)
    public var lastCheckpointAt: Double?
    public var downloadCheckpoint: Int64?
    /// When the oldest entries received and not yet merged arrived (nil: none waiting).
    public var downloadWaitingSince: Double?
    public var upstreamSite: UInt64?
    public var session: String?
    public var sessions = 0
    /// Subscription keys upstream (query and arguments) and whether each has finished its initial sync.
    public var subscriptions: [String: Bool] = [:]
    public var subscriptionErrors: [String: String] = [:]
    /// Everything up to here that must go up has been acknowledged (and stored as such).
    public var uploadedThrough: ChangeLogPosition = ChangeLogPosition(txn: 0, seq: -1)
    /// Counters since this process started.
    public var uploadedChanges = 0
    public var downloadedEntries = 0
    public var rejectedUploads = 0
    /// Documents uploaded whole because the change log no longer reached back to the upload
    /// position (a first connection, or a new upstream database, after maintenance pruned it).
    public var documentPassUploads = 0
    /// Local changes not uploaded because their document's stored state does not decode (a
    /// corrupt row: logged as an error).
    public var skippedUploads = 0
    /// New credentials (a renewed JWT file) the upstream accepted within a session.
    public var credentialRefreshes = 0
    /// Uploads the upstream could not merge for lack of an earlier change (`deltaGap`), sent
    /// again as the document's full state.
    public var resentAsFullState = 0
    /// Documents listed in `known` by subscriptions that started from nothing (their state was
    /// here already: the upstream does not send it again when it holds the same).
    public var knownListed = 0
    /// Bytes of the `up` messages sent and of the `docs`/`changes` messages received (the CBOR
    /// messages, without WebSocket framing).
    public var uploadedBytes = 0
    public var downloadedBytes = 0
    public var lastRejection: String?

    public init(url: String) { self.url = url }
}
