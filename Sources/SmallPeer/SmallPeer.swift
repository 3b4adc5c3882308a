// SmallPeer: a Swift client of BigPeer with a local store on the same CRDT engine and DQL as the
// server, persisted in a directory (docs/SMALLPEER.md), store observers, and a sync client
// (SyncClient.swift) that replicates with a BigPeer server over WebSocket (docs/PROTOCOL.md).
//
// Threading: every method may be called from any thread. State lives behind one `Mutex`; a write
// is planned, appended to the log and fsynced, then installed, all under that lock, so two writes
// never interleave and a write that returned is on disk. Observer handlers run after the lock is
// released, in commit order, on the thread that made the change (a caller of `execute`, or the
// sync client's event-loop thread): they must not block for long.

import CRDT
import DQL
import Synchronization
import SyncPeer
import SyncProtocol
import Values

public final class SmallPeer: Sendable {
    public struct Configuration: Sendable {
        /// `DQL_STRICT_MODE` for this peer's statements (the server's default is on).
        public var strictMode = true
        /// Wall-clock milliseconds for the hybrid logical clock (tests inject one).
        public var wallClock: @Sendable () -> UInt64 = Replica.systemMillis
        /// `_id`s for INSERTs without one: 128 random bits as 32 hex digits, like the server's.
        public var generateID: @Sendable () -> Value = SmallPeer.randomID
        /// Site id for a new directory (nil: random). An existing directory keeps its own.
        public var site: UInt64?
        /// Bounds of the in-memory change log the sync sessions this peer serves read
        /// (PeerChangeLog.swift): a peer whose checkpoint is older syncs its subscriptions again.
        public var changeLogRows = 4096
        public var changeLogBytes = 8 << 20

        public init() {}
    }

    public let directory: String
    public let siteID: SiteID
    let configuration: Configuration
    let state: Mutex<PeerState>
    /// Presence: this peer's record and the graph its sync links bring (PeerPresence.swift).
    let presence: PeerPresence

    /// Opens the peer stored in `directory` (created if absent). Fails with `.storage(.locked)` if
    /// another process has it open.
    public init(directory: String, configuration: Configuration = Configuration()) throws(SmallPeerError) {
        let storage: PeerStorage
        let commits: [Commit]
        do {
            (storage, commits) = try PeerStorage.open(directory) {
                if let s = configuration.site, s != 0 { return s }
                var site: UInt64 = 0
                var g = SystemRandomNumberGenerator()
                while site == 0 { site = g.next() }  // site 0 is refused by servers (PROTOCOL.md §4.2)
                return site
            }
        } catch {
            throw .storage(error)
        }
        var store = LocalStore(site: SiteID(storage.header.site), wallClock: configuration.wallClock)
        for c in commits {
            do { try store.replay(c) } catch { throw .storage(.corrupt(path: storage.logPath, reason: "a logged change does not apply: \(error)")) }
        }
        self.directory = directory
        self.siteID = SiteID(storage.header.site)
        self.configuration = configuration
        self.presence = PeerPresence(peerKey: SyncClientCore.peerKey(storage.header.site), deviceName: "smallpeer")
        let log = PeerChangeLog(head: Int64(clamping: store.replica.clock.last.rawValue),
                                maxRows: configuration.changeLogRows, maxBytes: configuration.changeLogBytes)
        self.state = Mutex(PeerState(store: store, storage: storage, log: log))
    }

    /// Releases the directory (its lock) and stops delivering to observers (presence ones too). Later calls fail with `.closed`.
    public func close() {
        state.withLock { s in
            s.storage = nil
            s.observers = [:]
            s.syncListeners = [:]
            s.headListeners = [:]
        }
        presence.removeObservers()
    }

    /// Bytes of a torn log tail cut off when the directory was opened (0 after a clean shutdown).
    public var recoveredTornBytes: Int { state.withLock { $0.storage?.truncatedBytesAtOpen ?? 0 } }

    // MARK: - DQL

    /// Runs one DQL statement on the local store. A write returns only once it is durable.
    public func execute(_ text: String, arguments: [String: Value] = [:]) throws(SmallPeerError) -> QueryResult {
        let statement: Statement
        do { statement = try DQL.parse(text) } catch { throw .syntax(error) }
        return try execute(statement, arguments: arguments)
    }

    public func execute(_ statement: Statement, arguments: [String: Value] = [:]) throws(SmallPeerError) -> QueryResult {
        let context = EvaluationContext(arguments: arguments, nowMilliseconds: Int64(clamping: configuration.wallClock()),
                                        strictMode: configuration.strictMode)
        switch statement {
        case .select(let s):
            return try state.withLock { s0 throws(SmallPeerError) in
                guard s0.storage != nil else { throw .closed }
                return try s0.store.select(s, context: context)
            }
        case .system(.show(let name)):
            guard name == nil || name?.uppercased() == SystemSetting.strictMode.rawValue else { throw .invalid("unknown setting \(name ?? "")") }
            return QueryResult(queryType: "show", items: [.object(["name": .string(SystemSetting.strictMode.rawValue),
                                                                   "value": .bool(configuration.strictMode)])])
        case .insert, .update, .delete, .evict:
            let generateID = configuration.generateID
            let result = try state.withLock { s throws(SmallPeerError) -> QueryResult in
                guard s.storage != nil else { throw .closed }
                let planned = try s.store.plan(statement, context: context, generateID: generateID)
                if !planned.commit.isEmpty || !planned.documents.isEmpty {
                    try s.commit(planned.commit, documents: planned.documents, replica: planned.replica, isLocal: true)
                }
                return planned.result
            }
            deliverObserverEvents()
            announceLogHead()
            notifySync()
            return result
        case .system, .createIndex, .dropIndex, .explain:
            throw .unsupported("\(statement.queryType) runs on the server, not on a small peer")
        }
    }

    /// A fresh random 128-bit `_id` as 32 lowercase hex digits.
    public static let randomID: @Sendable () -> Value = {
        var g = SystemRandomNumberGenerator()
        func hex(_ v: UInt64) -> String {
            let s = String(v, radix: 16)
            return String(repeating: "0", count: 16 - s.count) + s
        }
        return .string(hex(g.next()) + hex(g.next()))
    }

    /// Tells the sync clients (if any) that there is something new to upload or subscribe.
    func notifySync() {
        let listeners = state.withLock { Array($0.syncListeners.values) }
        for listener in listeners { listener() }
    }
}

/// Everything behind the peer's lock.
struct PeerState {
    var store: LocalStore
    var storage: PeerStorage?
    var observers: [UInt64: ObserverEntry] = [:]
    var nextObserverID: UInt64 = 1
    /// Observer events waiting to be delivered, in commit order, and whether a thread is delivering.
    var deliveries: [(handler: @Sendable (ObserverEvent) -> Void, event: ObserverEvent)] = []
    var delivering = false
    /// Sync subscriptions, in the order they were added.
    var subscriptions: [SyncSubscription] = []
    /// The sync clients' local-change notifications, by token.
    var syncListeners: [UInt64: @Sendable () -> Void] = [:]
    var nextSyncListener: UInt64 = 0
    /// The documents recent commits changed, for the sync sessions this peer serves.
    var log: PeerChangeLog
    /// Called with each new `log.head` (sessions served), and the last head they were told.
    var headListeners: [UInt64: @Sendable (Int64) -> Void] = [:]
    var nextHeadListener: UInt64 = 0
    var announcedHead: Int64

    init(store: LocalStore, storage: PeerStorage, log: PeerChangeLog) {
        self.store = store
        self.storage = storage
        self.log = log
        self.announcedHead = log.head
    }

    /// Persists `commit`, then installs it; on a storage error nothing changes. Queues events for
    /// the observers of the collections it touched (`isLocal`: a statement run on this peer, not
    /// sync), and logs the documents it changed (`origin`: the site they came from, nil for a local
    /// write) for the sessions this peer serves.
    mutating func commit(_ commit: Commit, documents: [(ref: DocumentRef, document: Document?)], replica: Replica? = nil,
                         origin: UInt64? = nil, isLocal: Bool = false) throws(SmallPeerError) {
        guard let storage else { throw .closed }
        var commit = commit, replica = replica
        let logged = commit.documents.contains { if case .evict = $0.op { false } else { true } }
        if logged, origin != nil || Int64(clamping: commit.clock) <= log.head {
            // Each logged commit's clock is its transaction number: above the previous one's, and
            // for another peer's change a tick of this peer's own, not the clock it adopted from
            // that change (the number that peer may have logged it under).
            var r = replica ?? store.replica
            commit.clock = r.clock.tick(wallMillis: r.wallClock()).rawValue
            replica = r
        }
        do { try storage.append(commit) } catch { throw .storage(error) }
        if logged {
            log.append(txn: Int64(clamping: commit.clock), log.keepsRows ? PeerChangeLog.rows(commit, documents, origin: origin) : [])
        }
        for (ref, doc) in documents { store.install(ref, doc) }
        if let replica { store.replica = replica }
        store.finish(commit)
        if storage.wantsCompaction {
            // A failed compaction leaves the log as it was (or refuses later writes if it stopped
            // half-way, see PeerStorage.compact); the commit above is durable either way.
            try? storage.compact(store.snapshotCommits())
        }
        let touched = Set(documents.map(\.ref.collection))
        if !touched.isEmpty { queueObserverEvents(for: touched, isLocal: isLocal) }
    }
}
