// The inputs and actions of the server-side session state machine (SyncSession.swift).
// The session does no I/O: a driver feeds it inputs (bytes received, results of the store
// requests it asked for, clock ticks) and carries out the actions it returns.

import SyncProtocol
import DQL
import Values

/// A subscription's query, validated: a plain `SELECT *` over one collection with a WHERE clause.
public struct SubscriptionQuery: Sendable {
    /// The query as the peer sent it (with `arguments`, what names the subscription).
    public var text: String
    public var collection: String
    public var statement: SelectStatement
    public var arguments: [String: Value]
    /// Evaluates the WHERE clause against a materialized document (with `_id`).
    public var query: SelectQuery
}

/// One change-log row as the shared reader delivers it: the row plus the document's current value.
public struct LogEntry: Sendable, Equatable {
    public enum Kind: String, Sendable { case upsert, delete, evict }
    public var txn: Int64
    /// The row's place in its transaction (change_log.seq).
    public var seq: Int32
    public var document: DocumentRef
    public var kind: Kind
    /// The CRDT delta of the change (nil for evict).
    public var delta: [UInt8]?
    /// The document's materialized value when the reader read the row (nil: deleted or gone).
    public var value: Value?
    /// Site id of the peer whose upload made this change (nil: REST or server-side writes).
    public var origin: UInt64?
    /// The document's full state when the reader read the row (nil: deleted, gone, or not read).
    /// Read once per instance, so a document entering the subscriptions of many sessions costs
    /// no database read per session (it may be newer than `txn`: merging it is still correct).
    public var state: [UInt8]?

    public init(txn: Int64, seq: Int32 = 0, document: DocumentRef, kind: Kind, delta: [UInt8]?, value: Value?, origin: UInt64? = nil, state: [UInt8]? = nil) {
        self.txn = txn
        self.seq = seq
        self.document = document
        self.kind = kind
        self.delta = delta
        self.value = value
        self.origin = origin
        self.state = state
    }

    public var position: ChangeLogPosition { ChangeLogPosition(txn: txn, seq: seq) }
}

/// Every change-log row after a read's start up to `end`, in (txn, seq) order (PROTOCOL.md §4.6;
/// docs/STORAGE.md on why none is skipped). `end` may lie inside a transaction (a large one is read
/// in bounded pieces): only transactions up to `through` are complete here.
public struct LogBatch: Sendable, Equatable {
    public var entries: [LogEntry]
    public var end: ChangeLogPosition
    /// Which rows match the session's live subscriptions, when the driver worked it out before
    /// delivering the batch (`LiveMatches`); nil: the session checks each row itself.
    var liveMatches: LiveMatches? = nil
    /// The newest transaction whose rows are all here (or were before the read's start).
    public var through: Int64 { end.completeThrough }

    public init(entries: [LogEntry], end: ChangeLogPosition) {
        self.entries = entries
        self.end = end
    }

    /// A batch that ends with transaction `through`.
    public init(entries: [LogEntry], through: Int64) {
        self.init(entries: entries, end: .end(of: through))
    }
}

/// A page of initial sync: live documents matching the subscription with `id` above the request's
/// `after`, in id order, read at transaction `txn`.
public struct DocumentPage: Sendable, Equatable {
    public struct Row: Sendable, Equatable {
        public var id: Value
        public var state: [UInt8]
        public init(id: Value, state: [UInt8]) {
            self.id = id
            self.state = state
        }
    }
    public var rows: [Row]
    public var txn: Int64
    /// No rows remain after these.
    public var isLast: Bool
    /// Where the next page starts (the last id the store looked at, which may be past the last row
    /// returned when the rest of the page did not match); nil: after the last row.
    public var nextAfter: Value?

    public init(rows: [Row], txn: Int64, isLast: Bool, nextAfter: Value? = nil) {
        self.rows = rows
        self.txn = txn
        self.isLast = isLast
        self.nextAfter = nextAfter
    }
}

/// Where a requested page ends, known as soon as the database answered and before its states are
/// decoded: with it the session may ask for the following page while this one is decoded and sent.
public struct PageBoundary: Sendable, Equatable {
    /// Where the following page starts (as `DocumentPage.nextAfter`).
    public var nextAfter: Value?
    /// No rows remain after this page.
    public var isLast: Bool
    /// Rows the store read and their states' total size (the page's share of the credit).
    public var rows: Int
    public var stateBytes: Int

    public init(nextAfter: Value?, isLast: Bool, rows: Int, stateBytes: Int) {
        self.nextAfter = nextAfter
        self.isLast = isLast
        self.rows = rows
        self.stateBytes = stateBytes
    }
}

/// A document read for `fetchDocuments` (full state, for `want` and for documents entering a subscription).
public struct FetchedDocument: Sendable, Equatable {
    public var document: DocumentRef
    public var state: [UInt8]
    public var value: Value?
    public init(document: DocumentRef, state: [UInt8], value: Value?) {
        self.document = document
        self.state = state
        self.value = value
    }
}

public enum AuthDecision: Sendable, Equatable {
    /// The peer may sync, within these permissions.
    case accept(SyncPermissions)
    case refuse(code: SyncCloseCode, reason: String)
}

/// What an authenticated peer may do: subscribe to collections it may read, upload changes to
/// collections it may write (PROTOCOL.md §7). Checked by the session on every `sub` and `up`.
public struct SyncPermissions: Sendable, Equatable {
    public enum Scope: Sendable, Equatable {
        case all
        case only(Set<String>)

        public func covers(_ collection: String) -> Bool {
            switch self {
            case .all: return true
            case .only(let names):
                // Byte-exact, as PostgreSQL compares: "\u{212A}ate" must not pass for "Kate".
                guard let i = names.firstIndex(of: collection) else { return false }
                return names[i].utf8Equals(collection)
            }
        }
    }
    public var read: Scope
    public var write: Scope
    /// Who the peer is, for logs (an API key id, `jwt:<sub>`, or nil in insecure development mode).
    public var principal: String?
    /// How long, from the decision, the credentials stay valid (a JWT's `exp`, an API key's
    /// expiry); the session closes with 4001 when it passes. nil: no expiry.
    public var validForMillis: UInt64?
    /// Which documents of the readable collections the peer may see (docs/AUTH.md, "Rules"):
    /// ANDed into every subscription's query, so a document that stops matching them leaves.
    public var readRules: DocumentRules
    /// Which documents of the writable collections the peer may change: an upload entry whose
    /// document does not match them before and after it is rejected (docs/AUTH.md, "Write rules").
    public var writeRules: DocumentRules
    /// What the login's authentication webhook said to hand back to the peer (`clientInfo`):
    /// sent in `welcome` and `auth_ok` (`info`). nil: nothing.
    public var clientInfo: Value?
    /// The webhook's `identityServiceMetadata`: what presence shows as the peer's `idmeta`,
    /// whatever the peer's own record says. nil: the credentials came by no webhook.
    public var identityMetadata: [String: Value]?

    public init(read: Scope, write: Scope, principal: String? = nil, validForMillis: UInt64? = nil, readRules: DocumentRules = .none,
                writeRules: DocumentRules = .none, clientInfo: Value? = nil, identityMetadata: [String: Value]? = nil) {
        self.read = read
        self.write = write
        self.principal = principal
        self.validForMillis = validForMillis
        self.readRules = readRules
        self.writeRules = writeRules
        self.clientInfo = clientInfo
        self.identityMetadata = identityMetadata
    }

    public static let everything = SyncPermissions(read: .all, write: .all)
}

public enum SyncSessionInput: Sendable {
    /// One protocol message as received from the transport.
    case received([UInt8])
    case authenticated(AuthDecision)
    /// The answer to `readPage`. A driver delivers the pages of one subscription in the order it
    /// was asked for them (a page that arrives out of that order is dropped and read again).
    case page(subscription: UInt32, generation: UInt64, DocumentPage)
    /// Optional, before the `.page` of the same read: where that page ends (lets the session read ahead).
    case pageBoundary(subscription: UInt32, generation: UInt64, PageBoundary)
    /// Answer to `checkResume`: whether the change log still reaches back to the checkpoint.
    case resumeChecked(subscription: UInt32, generation: UInt64, reachable: Bool)
    case log(LogBatch)
    case fetched(request: UInt64, [FetchedDocument])
    case uploadCommitted(seq: UInt64, txn: Int64, rejected: [UploadRejection])
    /// A store request failed (database unavailable, ...): the session closes with `code`.
    case storeFailed(code: SyncCloseCode, reason: String)
    /// The newest committed transaction number known to the instance (from NOTIFY or a read).
    case logHead(Int64)
    /// Time passes (the driver calls this at `nextDeadline` or whenever convenient).
    case tick
    /// The link went away: the session ends without sending anything, unless it is resumable
    /// (PROTOCOL.md §4.16): then it waits, detached, for the peer to resume it on another link.
    case transportClosed
    /// The peer's `hello.resume` named no session this instance can resume: start a new one.
    case resumeNotFound
    /// The transport's queue fell below the low-water mark: a session that stopped producing
    /// because of it (`isWaitingForTransport`) may go on (the queued bytes come with every step).
    case transportDrained
    /// Answer to `reauthenticate` (the peer's `auth`): accepted credentials replace the session's
    /// permissions and expiry (`auth_ok`), a refusal closes the session with its code.
    case reauthenticated(AuthDecision, epoch: UInt64)
    /// A periodic re-check of the session's current credentials (revocation, scope change), made
    /// for credential `epoch`: a refusal closes the session with 4001, an acceptance replaces the
    /// permissions. Ignored when the credentials changed since (`credentialEpoch`).
    case credentialsChecked(AuthDecision, epoch: UInt64)
    /// Send these presence records (PROTOCOL.md §4.14) if the session is ready; dropped otherwise.
    case sendPresence([PresenceRecord])
    /// Ask the peer to run this query (PROTOCOL.md §4.15). Answered exactly once with
    /// `.queryAnswered`: the peer's result, or an error (not ready, no `query` capability, too many
    /// outstanding, timed out, session closed).
    case sendQuery(RemoteQuery)
}

public enum SyncSessionAction: Sendable, Equatable {
    /// Send this encoded message (`message` is what it encodes, for logging and tests).
    case send([UInt8], SyncMessage)
    /// Send again a numbered message the peer did not receive before its link changed (PROTOCOL.md §4.16).
    case resend([UInt8])
    /// The peer asks to resume an earlier session (credentials and policy accepted on this link):
    /// hand this link to that session, or answer `.resumeNotFound`.
    case resume(ResumeRequest, site: UInt64)
    /// Check the credentials and connection policy; answer with `.authenticated`.
    case authenticate(Hello)
    /// Check credentials the peer sent with `auth`; answer with `.reauthenticated` for `epoch`
    /// (the session's `credentialEpoch` once they are accepted).
    case reauthenticate(SyncCredentials, epoch: UInt64)
    /// Read the next page of a subscription's initial sync: at most `limit` rows whose states add up
    /// to at most `maxBytes` (but always at least one row); answer with `.page`, and if possible
    /// first with `.pageBoundary`. At most two page reads are outstanding (one read ahead).
    case readPage(subscription: UInt32, generation: UInt64, query: QueryBox, after: Value?, limit: Int, maxBytes: Int)
    /// Does the change log reach back to `checkpoint`? Answer with `.resumeChecked`.
    case checkResume(subscription: UInt32, generation: UInt64, checkpoint: Int64)
    /// Read the change log after `after` (the shared reader's ring or the database; a bounded
    /// number of rows, possibly ending inside a transaction); answer with `.log`.
    case readLog(after: ChangeLogPosition)
    /// Read these documents' full states and values; answer with `.fetched`.
    case fetchDocuments(request: UInt64, [DocumentRef])
    /// Merge these deltas in one transaction with `origin` as the change-log origin; answer with
    /// `.uploadCommitted` after COMMIT.
    case applyUpload(seq: UInt64, origin: UInt64, entries: [UploadEntry], writeRules: DocumentRules = .none)
    /// Close the transport with this code (WebSocket: close frame; TCP/BLE: `bye`, then close).
    case close(code: UInt16, reason: String)
    /// The peer sent presence records: hand them to the instance's presence gossip.
    case presenceReceived([PresenceRecord])
    /// The answer to a `.sendQuery` (the peer's, or the session's error for it).
    case queryAnswered(RemoteQueryResult)
}

/// Wraps a `SubscriptionQuery` so actions stay `Equatable` (compared by collection and statement).
public struct QueryBox: Sendable, Equatable {
    public var value: SubscriptionQuery
    public static func == (a: QueryBox, b: QueryBox) -> Bool {
        a.value.collection == b.value.collection && a.value.statement == b.value.statement && a.value.arguments == b.value.arguments
    }
}
