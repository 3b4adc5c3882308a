// Sync: the replication protocol between peers and BigPeer (docs/PROTOCOL.md).
// This file: the protocol's messages as Swift values. Encoding: SyncMessageEncoder.swift;
// decoding and validation: SyncMessageDecoder.swift.

import Values

/// The protocol version this code speaks (PROTOCOL.md §4.1).
public enum SyncProtocol {
    public static let version: UInt64 = 1
    /// The WebSocket subprotocol name (PROTOCOL.md §2).
    public static let webSocketSubprotocol = "bigpeer-sync.v1"
}

/// A document named by collection and `_id` (a text `Value` or an object).
public struct DocumentRef: Hashable, Sendable {
    public var collection: String
    public var id: Value

    public init(collection: String, id: Value) {
        self.collection = collection
        self.id = id
    }

    /// As PostgreSQL compares the row's key: names byte-exact (Values/ExactText.swift), ids as
    /// jsonb does (`DocumentIdentity`: `{k: 1}` and `{k: 1.0}` are one document, docs/STORAGE.md,
    /// "documents").
    public static func == (a: DocumentRef, b: DocumentRef) -> Bool {
        a.collection.utf8Equals(b.collection) && DocumentIdentity(a.id) == DocumentIdentity(b.id)
    }
    public func hash(into hasher: inout Hasher) {
        hasher.combine(collection)  // byte-equal names hash alike
        hasher.combine(DocumentIdentity(id))
    }
}

/// Whether a document exists after a change (`delete`: it is a tombstone now).
public enum ChangeKind: String, Sendable, Equatable {
    case upsert
    case delete
}

/// What an entry carries: an incremental CRDT delta, or a complete CRDT document state.
public enum EntryPayload: Sendable, Equatable {
    case delta([UInt8])
    case state([UInt8])

    public var bytes: [UInt8] {
        switch self {
        case .delta(let b), .state(let b): b
        }
    }
}

/// One document in `docs` / `changes` (PROTOCOL.md §3 `entry`).
public struct ChangeEntry: Sendable, Equatable {
    public var document: DocumentRef
    public var kind: ChangeKind
    public var payload: EntryPayload

    public init(document: DocumentRef, kind: ChangeKind, payload: EntryPayload) {
        self.document = document
        self.kind = kind
        self.payload = payload
    }
}

/// One document in `up`.
public struct UploadEntry: Sendable, Equatable {
    public var document: DocumentRef
    public var delta: [UInt8]

    public init(document: DocumentRef, delta: [UInt8]) {
        self.document = document
        self.delta = delta
    }
}

/// An `up` entry the server did not apply (`ack.rejected`).
public struct UploadRejection: Sendable, Equatable {
    public var index: Int
    public var message: String

    public init(index: Int, message: String) {
        self.index = index
        self.message = message
    }

    /// The message of a delta that does not follow the version the receiver holds: the sender
    /// must send the full state (PROTOCOL.md §4.8).
    public static let deltaGapMessage = "delta does not follow the stored version: send the full state"

    /// Whether `message` refuses the entry for its permissions (a collection the credentials may
    /// not write, a document outside their write rules): sending it again, or as the full state,
    /// is refused the same way (PROTOCOL.md §4.8: such a `msg` begins with "not permitted").
    public static func isPermissionRefusal(_ message: String) -> Bool { message.hasPrefix("not permitted") }
}

public enum SyncCredentials: Sendable, Equatable {
    case apiKey(String)
    case jwt(String)
    /// A token for the server's authentication webhook of `provider` (PROTOCOL.md §4.1.1).
    case provider(String, token: String)
}

public struct Hello: Sendable, Equatable {
    public var version: UInt64
    public var site: UInt64
    public var peerKey: [UInt8]
    public var deviceName: String
    public var metadata: [String: Value]
    public var credentials: SyncCredentials?
    /// Initial download credit (bytes) the server may send.
    public var credit: UInt64
    /// The largest message the peer accepts.
    public var maxMessageSize: UInt64
    /// Optional messages the peer understands (`SyncCapability`; PROTOCOL.md §4.1): the server
    /// sends such a message only to a peer that lists it.
    public var capabilities: [String]
    /// Resume an earlier session on this link (PROTOCOL.md §4.16) instead of starting one.
    public var resume: ResumeRequest?

    public init(version: UInt64 = SyncProtocol.version, site: UInt64, peerKey: [UInt8], deviceName: String,
                metadata: [String: Value] = [:], credentials: SyncCredentials?, credit: UInt64, maxMessageSize: UInt64,
                capabilities: [String] = [], resume: ResumeRequest? = nil) {
        self.version = version
        self.site = site
        self.peerKey = peerKey
        self.deviceName = deviceName
        self.metadata = metadata
        self.credentials = credentials
        self.credit = credit
        self.maxMessageSize = maxMessageSize
        self.capabilities = capabilities
        self.resume = resume
    }
}

/// `hello.resume`: the session to resume and how many of its numbered messages the peer has
/// received (PROTOCOL.md §4.16).
public struct ResumeRequest: Sendable, Equatable {
    public var token: [UInt8]
    public var received: UInt64
    public init(token: [UInt8], received: UInt64) {
        self.token = token
        self.received = received
    }
}

public struct Welcome: Sendable, Equatable {
    public var version: UInt64
    public var site: UInt64
    public var sessionID: String
    public var heartbeatMillis: UInt64
    public var maxMessageSize: UInt64
    /// Initial upload credit (bytes) the peer may send.
    public var credit: UInt64
    /// The token that resumes this session on another link (`tok`; only for a peer that listed
    /// the `resume` capability, PROTOCOL.md §4.16).
    public var resumeToken: [UInt8]?
    /// Set only when this welcome resumes the session `hello.resume` named (`rx`): how many of
    /// the peer's numbered messages the server has received; the peer re-sends those after it.
    public var resumedReceived: UInt64?
    /// The session's credentials: how long they stay valid, the login's `clientInfo` (`ttl`, `info`).
    public var credentials: CredentialStatus

    public init(version: UInt64 = SyncProtocol.version, site: UInt64, sessionID: String, heartbeatMillis: UInt64,
                maxMessageSize: UInt64, credit: UInt64, resumeToken: [UInt8]? = nil, resumedReceived: UInt64? = nil,
                credentials: CredentialStatus = CredentialStatus()) {
        self.version = version
        self.site = site
        self.sessionID = sessionID
        self.heartbeatMillis = heartbeatMillis
        self.maxMessageSize = maxMessageSize
        self.credit = credit
        self.resumeToken = resumeToken
        self.resumedReceived = resumedReceived
        self.credentials = credentials
    }
}

/// What `welcome` and `auth_ok` tell the peer about the credentials the session runs on
/// (PROTOCOL.md §4.13).
public struct CredentialStatus: Sendable, Equatable {
    /// Milliseconds they stay valid from this message (`ttl`); nil: they do not expire.
    public var validForMillis: UInt64?
    /// The authentication webhook's `clientInfo` for this login (`info`); nil: none.
    public var clientInfo: Value?

    public init(validForMillis: UInt64? = nil, clientInfo: Value? = nil) {
        self.validForMillis = validForMillis
        self.clientInfo = clientInfo
    }
}

public struct Subscribe: Sendable, Equatable {
    public var id: UInt32
    public var query: String
    public var arguments: [String: Value]
    /// Resume from this checkpoint (transaction number).
    public var checkpoint: Int64?
    /// Resume: hashes (`DocumentHash`) of the documents the peer holds in the collection, ascending.
    public var have: [UInt64]?
    /// Without `checkpoint`: documents the peer has, with the digest of the state it has,
    /// ascending by document hash; the initial sync skips those whose state is the same.
    public var known: [KnownState]?

    public init(id: UInt32, query: String, arguments: [String: Value] = [:], checkpoint: Int64? = nil, have: [UInt64]? = nil,
                known: [KnownState]? = nil) {
        self.id = id
        self.query = query
        self.arguments = arguments
        self.checkpoint = checkpoint
        self.have = have
        self.known = known
    }
}

/// Every message of protocol version 1 (PROTOCOL.md §4). The `"t"` key on the wire is in comments.
public enum SyncMessage: Sendable, Equatable {
    case hello(Hello)                                             // "hello"
    case welcome(Welcome)                                         // "welcome"
    case refuse(code: UInt16, reason: String)                     // "refuse"
    case subscribe(Subscribe)                                     // "sub"
    case unsubscribe(id: UInt32)                                  // "unsub"
    case subscriptionError(id: UInt32, message: String)           // "sub_error"
    case documents(subscription: UInt32, entries: [ChangeEntry])  // "docs"
    case synced(subscription: UInt32, checkpoint: Int64)          // "synced"
    case changes(txn: Int64, entries: [ChangeEntry])              // "changes"
    case checkpoint(txn: Int64)                                   // "checkpoint"
    case upload(seq: UInt64, entries: [UploadEntry])              // "up"
    case ack(seq: UInt64, txn: Int64, rejected: [UploadRejection]) // "ack"
    case want([DocumentRef])                                      // "want"
    /// The answer to `want` for documents the server has no row for, or the peer may not read
    /// (only to peers with the `gone` capability, PROTOCOL.md §4.7): they will not come.
    case gone([DocumentRef])                                      // "gone"
    case credit(bytes: UInt64)                                    // "credit"
    case ping(UInt64)                                             // "ping"
    case pong(UInt64)                                             // "pong"
    case bye(code: UInt16, reason: String)                        // "bye"
    /// The peer replaces its credentials mid-session (a fresh token before the old one expires).
    case refreshAuth(SyncCredentials)                             // "auth"
    /// The server accepted `auth`: the new credentials' permissions and expiry apply from now.
    case authRefreshed(CredentialStatus)                          // "auth_ok"
    /// The session's credentials expire in this many milliseconds: send `auth` with fresh ones
    /// (only to peers with the `renew` capability, PROTOCOL.md §4.13).
    case credentialsExpiring(inMillis: UInt64)                    // "renew"
    /// Presence records forwarded by gossip (PROTOCOL.md §4.14); control traffic, both directions.
    case presence([PresenceRecord])                               // "presence"
    /// The server asks the peer to run a SELECT on its local store (PROTOCOL.md §4.15).
    case query(RemoteQuery)                                       // "query"
    /// The peer's answer to `query`.
    case result(RemoteQueryResult)                                // "result"
    /// How many numbered messages of a resumable session the sender has received (PROTOCOL.md §4.16).
    case received(UInt64)                                         // "rack"

    /// The `"t"` value on the wire.
    public var typeName: String {
        switch self {
        case .hello: "hello"
        case .welcome: "welcome"
        case .refuse: "refuse"
        case .subscribe: "sub"
        case .unsubscribe: "unsub"
        case .subscriptionError: "sub_error"
        case .documents: "docs"
        case .synced: "synced"
        case .changes: "changes"
        case .checkpoint: "checkpoint"
        case .upload: "up"
        case .ack: "ack"
        case .want: "want"
        case .gone: "gone"
        case .credit: "credit"
        case .ping: "ping"
        case .pong: "pong"
        case .bye: "bye"
        case .refreshAuth: "auth"
        case .authRefreshed: "auth_ok"
        case .credentialsExpiring: "renew"
        case .presence: "presence"
        case .query: "query"
        case .result: "result"
        case .received: "rack"
        }
    }

    /// Counted by a resumable session and re-sent after a resume (PROTOCOL.md §4.16): every
    /// message after the handshake except `bye` and `rack` itself.
    public var isNumbered: Bool {
        switch self {
        case .hello, .welcome, .refuse, .bye, .received: false
        default: true
        }
    }

    /// Data messages consume flow-control credit (PROTOCOL.md §6); control messages never wait.
    public var consumesCredit: Bool {
        switch self {
        case .documents, .changes, .upload: true
        default: false
        }
    }
}

/// Close codes (PROTOCOL.md §7). WebSocket close frames and `bye`/`refuse` carry the raw value.
public enum SyncCloseCode: UInt16, Sendable {
    case normal = 1000
    case goingAway = 1001
    case internalError = 1011
    case tryAgainLater = 1013
    /// Missing or invalid credentials at `hello`, or, during a session, credentials that expired,
    /// were revoked, or were refused by `auth`.
    case unauthorized = 4001
    case unsupportedVersion = 4002
    case policy = 4003
    case protocolViolation = 4004
    case timeout = 4008
    case messageTooLarge = 4009
    /// `bye` from a peer leaving this link for another: a resumable session goes on (PROTOCOL.md §4.16).
    case linkLeft = 4010
}
