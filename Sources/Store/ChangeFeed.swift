// The per-instance change feed, owned by the store (`DocumentStore.changeFeed`): the one place
// a commit's effects are announced. Every write transaction of this instance hands it one
// `Committed` value after COMMIT, before any client is answered; every other instance's commit
// reaches it through the change log. It is the only writer of the point-read cache
// (`DocumentReadCache`): it switches the cache on and off and applies every change to it.
//
// For sync sessions (PROTOCOL.md §10) it is one reader of the change log shared by every session
// of this instance. It follows `bigpeer_changes` notifications, reads the new change-log rows once
// (with each document's current value), keeps the most recent ones in a bounded ring, and tells
// its listeners the newest transaction number. Sessions then read from the ring; a session that
// fell behind the ring reads the database directly. NOTIFY is not durable: after `.reconnected`
// (database restart) the feed simply catches up from the change log.
//
// Every read is bounded in rows and bytes (`readChangeLog`), so a transaction of
// 100,000 changes is read in pieces, never as one result:
//
//   position ──────────────► where the next read starts; may lie inside a transaction
//   head     ──────────────► the newest transaction read to its last row: the only number
//                            listeners (sessions) and the read cache are told
//   ring     ──────────────► every row of the transactions after `ringFrom`, up to `position`
//                            (rows of a transaction past `head` wait there until it completes,
//                            and are never served before; a transaction that does not fit is
//                            dropped whole and `ringFrom` moves past it)
//
// With no session listening, nobody needs the rows' values: the feed only skims which documents
// changed (`skimChangeLog`) for the read cache, or skips its own commits altogether (`OwnCommits`).
//
// Locks: `state` is taken with no other lock held; under it only the read cache's lock is taken
// (a leaf). Listeners are called with no lock held (docs/ARCHITECTURE.md, "Lock order").

import Postgres
import SyncProtocol
import Synchronization
import Values

public final class ChangeFeed: Sendable {
    struct State {
        /// Every row after the end of transaction `ringFrom` up to `position`, in order.
        var ring: [ChangeLogRow] = []
        var ringBytes = 0
        var ringFrom: Int64 = 0
        /// The newest transaction every row of which has been read.
        var head: Int64 = 0
        /// Where the next read starts: at the end of `head`, or inside transaction `head + 1`.
        var position = ChangeLogPosition.end(of: 0)
        var listeners: [UInt64: @Sendable (Int64) -> Void] = [:]
        /// Listeners that only want the head (`addHeadListener`): they do not make the feed read
        /// values, nor keep it from skipping this instance's own commits.
        var headListeners: [UInt64: @Sendable (Int64) -> Void] = [:]
        /// A head reached by skipping own commits, still to be told to the head listeners.
        var headToAnnounce: Int64?
        var nextListener: UInt64 = 0
        /// The newest transaction number a notification announced.
        var notified: Int64 = 0
        /// A change-log read must happen before any skip (set by `refresh()`, cleared as a read starts).
        var readRequired = false
        var refreshing = false
        var refreshAgain = false
        /// A read may still wait once for this instance's settling commits (`skipOwnCommits`);
        /// cleared by that wait, set again by the next skip or read.
        var mayDefer = true
        /// The transactions this instance committed and the commits still settling.
        var own = OwnCommits()
        /// Change-log reads (and skims) started, for diagnostics and tests.
        var reads = 0
        var retryScheduled = false
    }

    /// The feed's bounds: its ring, and the size of its reads and of the batches sessions get.
    public struct Limits: Sendable {
        public var maxRingEntries = 8192
        public var maxRingBytes = 32 << 20
        /// Bounds of one change-log read: rows and bytes (with values, for the ring and sessions)
        /// and rows (skimming keys only, while no session listens).
        public var readRows = ChangeFeed.changeLogPageRows
        public var readBytes = ChangeFeed.changeLogPageBytes
        public var skimRows = 10 * ChangeFeed.changeLogPageRows
        /// Rows per batch a session gets (from the ring or the database).
        public var sessionRows = ChangeFeed.changeLogPageRows

        public init(maxRingEntries: Int = 8192, maxRingBytes: Int = 32 << 20,
                    readRows: Int = ChangeFeed.changeLogPageRows, readBytes: Int = ChangeFeed.changeLogPageBytes,
                    skimRows: Int = 10 * ChangeFeed.changeLogPageRows, sessionRows: Int = ChangeFeed.changeLogPageRows) {
            self.maxRingEntries = maxRingEntries
            self.maxRingBytes = maxRingBytes
            self.readRows = max(1, readRows)
            self.readBytes = max(1, readBytes)
            self.skimRows = max(1, skimRows)
            self.sessionRows = max(1, sessionRows)
        }
    }

    let pool: PostgresPool
    /// The store's point-read cache; this feed is the only one that changes what it holds valid.
    let readCache: DocumentReadCache
    let maxRingEntries: Int
    let maxRingBytes: Int
    let state = Mutex(State())

    /// The NOTIFY channel every write transaction signals with its number (docs/STORAGE.md).
    public static let channel = "bigpeer_changes"
    /// After a failed catch-up (database unreachable), the next attempt runs this much later even
    /// if no notification or reconnect arrives (a NOTIFY may have been sent on a connection that
    /// still worked while this instance's reads failed).
    public static let retryDelay: Duration = .seconds(1)
    /// Transactions per change-log read.
    static let readTransactions: Int64 = 1000
    let readRows: Int
    /// The most bytes one read returns (a session asks for about its peer's credit, at most this).
    public let readBytes: Int
    let skimRows: Int
    let sessionRows: Int

    init(pool: PostgresPool, readCache: DocumentReadCache, limits: Limits) {
        self.pool = pool
        self.readCache = readCache
        self.maxRingEntries = limits.maxRingEntries
        self.maxRingBytes = limits.maxRingBytes
        self.readRows = max(1, limits.readRows)
        self.readBytes = max(1, limits.readBytes)
        self.skimRows = max(1, limits.skimRows)
        self.sessionRows = max(1, limits.sessionRows)
    }

    /// Starts following the change log from the current newest transaction, and lets the store
    /// cache point reads from then on (this feed keeps the cache told of every change).
    public func start() async throws {
        let n = try await DocumentStore.currentTransaction(pool)
        state.withLock { s in
            s.head = max(s.head, n)
            s.ringFrom = max(s.ringFrom, n)
            s.position = max(s.position, .end(of: n))
        }
        readCache.enable(through: n)
    }

    /// Consumes a listener's events until it stops: every notification or reconnect triggers a
    /// catch-up. While the listener is down, changes of other instances go unnoticed, so the
    /// store's read cache is dropped and switched off until the catch-up after the reconnect.
    public func follow(_ listener: PostgresListener) async {
        for await event in listener.events {
            switch event {
            case .disconnected:
                readCache.disable()
            case .reconnected:
                await refresh()
                readCache.enable(through: head)
            case .notification(let note):
                if let n = Int64(note.payload) { noteNotified(n) }
                await refresh(readRequired: false)
            }
        }
    }

    public var head: Int64 { state.withLock { $0.head } }

    /// The newest transaction a notification announced: `notifiedHead - head` is how far the
    /// feed is behind what the database has told it (`bigpeer_change_feed_lag_transactions`).
    public var notifiedHead: Int64 { state.withLock { max($0.notified, $0.head) } }

    /// Change-log reads this feed has started (skims included; skipped own commits are not reads).
    public var reads: Int { state.withLock { $0.reads } }

    /// A notification announced transaction `n` (its payload, docs/STORAGE.md).
    func noteNotified(_ n: Int64) { state.withLock { $0.notified = max($0.notified, n) } }

    /// Registers a callback for every new head; returns a token for `removeListener`.
    public func addListener(_ onHead: @escaping @Sendable (Int64) -> Void) -> UInt64 {
        state.withLock { s in
            s.nextListener += 1
            s.listeners[s.nextListener] = onHead
            return s.nextListener
        }
    }

    /// Registers a callback for every new head that needs no rows (the upstream replicator learns
    /// there is something to upload, and reads it itself): unlike `addListener` it does not make
    /// the feed read every commit with its values. Same tokens as `addListener`.
    public func addHeadListener(_ onHead: @escaping @Sendable (Int64) -> Void) -> UInt64 {
        state.withLock { s in
            s.nextListener += 1
            s.headListeners[s.nextListener] = onHead
            return s.nextListener
        }
    }

    public func removeListener(_ token: UInt64) {
        state.withLock { s in
            s.listeners.removeValue(forKey: token)
            s.headListeners.removeValue(forKey: token)
        }
    }

    /// Tells the head listeners a head reached by skipping own commits (outside the lock).
    func announceSkippedHead() {
        let (listeners, head) = state.withLock { s -> ([@Sendable (Int64) -> Void], Int64?) in
            defer { s.headToAnnounce = nil }
            return (Array(s.headListeners.values), s.headToAnnounce)
        }
        if let head { for l in listeners { l(head) } }
    }

    /// Reads everything new since `head` into the ring (one refresh at a time; concurrent calls coalesce).
    public func refresh() async { await refresh(readRequired: true) }

    /// `readRequired: false` (a notification): transactions this instance committed itself may be
    /// skipped instead of read (`skipOwnCommits`). A reconnect, a retry or an explicit refresh
    /// must read: commits may have gone unnotified.
    func refresh(readRequired: Bool) async {
        let start = state.withLock { s -> Bool in
            if readRequired { s.readRequired = true }
            if s.refreshing { s.refreshAgain = true; return false }
            s.refreshing = true
            return true
        }
        guard start else { return }
        while true {
            do {
                while true {
                    let outcome = skipOwnCommits()
                    announceSkippedHead()  // a head reached by skipping own commits
                    guard outcome == .mustRead else { break }
                    // This read sees every commit made before it starts: a required read is done.
                    let (from, full) = state.withLock { s in
                        s.readRequired = false
                        s.mayDefer = true
                        s.reads += 1
                        return (s.position, !s.listeners.isEmpty)
                    }
                    let page = full
                        ? try await readChangeLog(after: from, maxTransactions: Self.readTransactions, maxRows: readRows, maxBytes: readBytes)
                        : try await skimChangeLog(after: from, maxRows: skimRows)
                    applyToReadCache(page, after: from)
                    if page.end <= from { forgetUnreadNotifications(); break }
                    let (listeners, newHead) = state.withLock { s -> ([@Sendable (Int64) -> Void], Int64?) in
                        if full {
                            for r in page.rows { append(r, to: &s) }
                        } else {
                            // Skimmed rows have no values: the ring restarts empty after them. A
                            // session that registered meanwhile reads older rows from the database,
                            // as for any position before the ring.
                            s.ring = []
                            s.ringBytes = 0
                            s.ringFrom = max(s.ringFrom, page.end.txn)
                        }
                        s.position = page.end
                        // Only a transaction read to its last row counts (`head`, listeners).
                        let h = page.end.completeThrough
                        guard h > s.head else { return ([], nil) }
                        s.head = h
                        return (Array(s.listeners.values) + Array(s.headListeners.values), h)
                    }
                    if let newHead { for l in listeners { l(newHead) } }
                    // Caught up with the newest commit this read saw. Later commits notify, and a
                    // notification during this refresh makes it run once more (`refreshAgain`),
                    // so no second, empty read is needed to find out.
                    if !page.more { forgetUnreadNotifications(); break }
                }
            } catch {
                scheduleRetry()
            }
            let again = state.withLock { s -> Bool in
                if s.refreshAgain { s.refreshAgain = false; return true }
                s.refreshing = false
                return false
            }
            if !again { return }
        }
    }

    /// After a read that caught up with the log: a notified number beyond what it found is not a
    /// commit. Any role of the database may NOTIFY this channel with any payload, and one forged
    /// number kept would make every later range look unrecorded (`skipOwnCommits` then reads every
    /// own commit back). A real commit notified meanwhile is not lost: its notification arrived
    /// during this refresh, which therefore runs once more (`refreshAgain`) and reads it.
    private func forgetUnreadNotifications() {
        state.withLock { s in s.notified = min(s.notified, s.head) }
    }

    /// With no session listening, advances over notified transactions that this instance
    /// committed itself without reading them back (their changes reached the read cache at
    /// commit: `committed`). The ring then restarts empty
    /// at the new head — nobody is reading it, and a session that connects later and needs older
    /// rows reads them from the database, as for any position before the ring. Checked and applied
    /// under the state lock, so a session registering at the same moment either sees the ring
    /// intact (and the feed reads) or the new head with the empty ring.
    ///
    /// `.deferred`: the range is not all recorded, but a commit of this instance is settling —
    /// the notification usually outruns the writer's record of its own commit. The feed then
    /// does not read now; `ownCommitsSettled` tries again once that commit is recorded (or
    /// failed), and reads if the range still is not all its own. Only once per read or skip
    /// (`mayDefer`), so another instance's commit reaches this instance at most one own commit
    /// later than it would have.
    private func skipOwnCommits() -> OwnCommitsOutcome {
        state.withLock { s in skipOwnCommits(&s, mayDefer: s.mayDefer) }
    }

    func skipOwnCommits(_ s: inout State, mayDefer: Bool) -> OwnCommitsOutcome {
        guard !s.readRequired, s.listeners.isEmpty, s.notified > s.head else { return .mustRead }
        let outcome = s.own.outcome(after: s.head, through: s.notified, mayDefer: mayDefer)
        switch outcome {
        case .applied:
            // Their changes reached the cache at commit (`committed`): only its position moves.
            readCache.applyChangeLog([], after: s.head, through: s.notified)
            s.ring = []
            s.ringBytes = 0
            s.head = s.notified
            s.ringFrom = s.notified
            s.position = .end(of: s.notified)
            s.mayDefer = true
            s.headToAnnounce = s.head
        case .deferred:
            s.mayDefer = false
        case .mustRead:
            break
        }
        return outcome
    }

    /// One delayed catch-up at a time; notifications and reconnects still trigger their own.
    private func scheduleRetry() {
        let schedule = state.withLock { s -> Bool in
            if s.retryScheduled { return false }
            s.retryScheduled = true
            return true
        }
        guard schedule else { return }
        Task { [weak self] in
            try? await Task.sleep(for: Self.retryDelay)
            guard let self else { return }
            self.state.withLock { $0.retryScheduled = false }
            await self.refresh()
        }
    }

    private func append(_ e: ChangeLogRow, to s: inout State) {
        // A transaction whose first rows the ring dropped (below) is not in it at all.
        guard e.txn > s.ringFrom else { return }
        s.ring.append(e)
        s.ringBytes += Self.size(e)
        // Drop whole transactions from the front until within bounds — possibly the one being
        // read, when it alone exceeds them: its remaining rows are then not kept either.
        while s.ring.count > maxRingEntries || s.ringBytes > maxRingBytes, let first = s.ring.first {
            let txn = first.txn
            let n = s.ring.firstIndex { $0.txn != txn } ?? s.ring.endIndex
            for r in s.ring[0..<n] { s.ringBytes -= Self.size(r) }
            s.ring.removeFirst(n)
            s.ringFrom = txn
        }
    }

    /// The index of the first entry after `position` (the ring is in (txn, seq) order).
    static func firstIndex(in ring: [ChangeLogRow], after position: ChangeLogPosition) -> Int {
        var lo = 0, hi = ring.count
        while lo < hi {
            let mid = (lo + hi) / 2
            if ring[mid].position > position { hi = mid } else { lo = mid + 1 }
        }
        return lo
    }

    static func size(_ e: ChangeLogRow) -> Int {
        64 + (e.delta?.count ?? 0) + (e.state?.count ?? 0) + (e.value.map { JSON.serializedCount($0) } ?? 0)
    }

    /// The change log after `after` from the ring, without waiting; nil when the ring does not
    /// reach back that far (then `read` goes to the database). Sessions call this right after a
    /// new head, so a commit reaches every up-to-date session without a task or a query per
    /// session. At most `maxRows` rows (`sessionRows` by default), of transactions up to `head`.
    public func cachedRead(after: ChangeLogPosition, maxTransactions: Int64 = 100, maxRows: Int? = nil, maxBytes: Int? = nil) -> ChangeLogPage? {
        let maxRows = max(1, maxRows ?? sessionRows)
        let maxBytes = max(1, maxBytes ?? readBytes)
        return state.withLock { s -> ChangeLogPage? in
            // Nothing newer here yet (a session may know a newer head from its own reads before
            // this feed caught up): the database read makes progress; an empty answer would spin.
            guard after.completeThrough >= s.ringFrom, s.head > after.completeThrough else { return nil }
            // The ring is in (txn, seq) order: binary searches keep a read O(log ring + batch),
            // which matters because every session reads after every commit.
            let start = Self.firstIndex(in: s.ring, after: after)
            let upper = min(s.head, after.completeThrough &+ max(1, maxTransactions))
            let end = Self.firstIndex(in: s.ring, after: .end(of: upper))
            // Rows up to the bounds (the first always), counted by their payloads as the store's
            // read counts them.
            var cut = start, bytes = 0
            while cut < end, cut - start < maxRows, bytes < maxBytes || cut == start {
                bytes += 64 + (s.ring[cut].delta?.count ?? 0) + (s.ring[cut].state?.count ?? 0)
                cut += 1
            }
            guard cut < end else {
                return ChangeLogPage(rows: Array(s.ring[start..<end]), end: max(after, .end(of: upper)), more: upper < s.head)
            }
            // Cut inside: the last transaction is complete iff the next row starts another.
            let last = s.ring[cut - 1]
            let endsTransaction = s.ring[cut].txn != last.txn
            return ChangeLogPage(rows: Array(s.ring[start..<cut]), end: endsTransaction ? .end(of: last.txn) : last.position, more: true)
        }
    }

    /// The change log after `after`: from the ring when it reaches back that far, else from the
    /// database, in the same bounded batches.
    /// `maxBytes` (default: the feed's `readBytes`): a session passes about the credit its peer
    /// has left, so a peer that grants little is not read a megabyte for every 64 KiB it takes.
    public func read(after: ChangeLogPosition, maxTransactions: Int64 = 100, maxBytes: Int? = nil) async throws(StoreError) -> ChangeLogPage {
        if let cached = cachedRead(after: after, maxTransactions: maxTransactions, maxBytes: maxBytes) { return cached }
        return try await readChangeLog(after: after, maxTransactions: maxTransactions, maxRows: sessionRows,
                                       maxBytes: max(1, maxBytes ?? readBytes))
    }
}
