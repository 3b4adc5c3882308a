// Subscriptions: validation, initial sync by pages, resume from a checkpoint, `want`, and the
// scheduler (`pump`) that decides the session's next store read (PROTOCOL.md §4.3–§4.7).

import SyncProtocol
import DQL
import Values

extension SyncSession {
    static let maxPendingWants = 4000

    var isSyncing: Bool { subscriptions.values.contains { $0.phase != .live } }

    var peerMaxMessage: Int { Int(clamping: peer?.maxMessageSize ?? 65536) }

    /// Decides the next store read, if none is outstanding. Initial syncs run one at a time, in the
    /// order requested, and pause live delivery (the cursor stays; the log is read afterwards).
    mutating func pump(now: UInt64, into out: inout [SyncSessionAction]) {
        // Credit and room in the transport (`sendWindow`): a peer that stops reading stops the
        // session here, whatever credit it granted.
        guard suspended == nil, sendWindow > 0 else { return }
        if case .page? = outstanding { return readAhead(into: &out) }
        guard outstanding == nil else { return }
        if !pendingWants.isEmpty {
            let n = min(pendingWants.count, configuration.limits.maxWantDocuments)
            let refs = Array(pendingWants.prefix(n))
            pendingWants.removeFirst(n)
            requestCounter += 1
            outstanding = .fetch(request: requestCounter, purpose: .want(refs))
            out.append(.fetchDocuments(request: requestCounter, refs))
            return
        }
        // Only while some subscription is not live yet (`isSyncing`) is there a phase to act on
        // here (every branch that changes one returns); a live session skips the loop, which
        // copied every subscription on every step.
        if isSyncing {
            for id in order {
                guard var sub = subscriptions[id] else { continue }
                switch sub.phase {
                case .live, .checkingResume:
                    continue
                case .queued:
                    if let cp = sub.checkpoint {
                        sub.phase = .checkingResume
                        subscriptions[id] = sub
                        outstanding = .resume(id)
                        out.append(.checkResume(subscription: id, generation: sub.generation, checkpoint: cp))
                        return
                    }
                    sub.phase = .paging(after: nil)
                    subscriptions[id] = sub
                    requestPage(sub, after: nil, into: &out)
                    return
                case .paging(let after):
                    requestPage(sub, after: after, into: &out)
                    return
                }
            }
            return
        }
        if let position = logPosition, position.completeThrough < logHead, subscriptions.values.contains(where: { $0.phase == .live }) {
            outstanding = .log
            out.append(.readLog(after: position))
        }
    }

    mutating func requestPage(_ sub: Subscription, after: Value?, into out: inout [SyncSessionAction]) {
        outstanding = .page(sub.id)
        pageReads.append(PageRead(subscription: sub.id, generation: sub.generation, after: after, ahead: false))
        let budget = max(1, min(Int(clamping: sendWindow), peerMaxMessage - 4096))
        out.append(.readPage(subscription: sub.id, generation: sub.generation, query: QueryBox(value: sub.query),
                             after: after, limit: configuration.pageRows, maxBytes: budget))
    }

    /// Bytes a `docs` entry adds to its state, as estimated for a page not yet encoded: the keys,
    /// `upsert`, heads, the collection and a short id. Long ids make the estimate low; the page
    /// read ahead may then find no credit left when it arrives: it is dropped and read again
    /// (`pageArrived`), never sent without credit.
    static let estimatedEntryOverhead = 48

    /// Pipelining (performance-history.md, "Sync"): while the one page read in flight is decoded and sent,
    /// the database reads the following page, as soon as it is known where that starts and if the
    /// credit left after the page in flight still covers some of it. Never more than two reads.
    mutating func readAhead(into out: inout [SyncSessionAction]) {
        guard pageReads.count == 1, let first = pageReads.first, !first.stale, let boundary = first.boundary, !boundary.isLast, boundary.nextAfter != nil,
              let sub = subscriptions[first.subscription], sub.generation == first.generation, case .paging = sub.phase else { return }
        let perRow = Int64(Self.estimatedEntryOverhead + sub.query.collection.utf8.count)
        let room = sendWindow - Int64(boundary.stateBytes) - Int64(boundary.rows) * perRow
        guard room > 0 else { return }
        pageReads.append(PageRead(subscription: sub.id, generation: sub.generation, after: boundary.nextAfter, ahead: true))
        pagesReadAhead += 1
        out.append(.readPage(subscription: sub.id, generation: sub.generation, query: QueryBox(value: sub.query),
                             after: boundary.nextAfter, limit: configuration.pageRows,
                             maxBytes: max(1, min(Int(clamping: room), peerMaxMessage - 4096))))
    }

    // MARK: - sub / unsub

    mutating func subscribe(_ s: Subscribe, now: UInt64, into out: inout [SyncSessionAction]) {
        guard subscriptions[s.id] == nil else {
            return send(.subscriptionError(id: s.id, message: "subscription \(s.id) already exists"), into: &out)
        }
        guard subscriptions.count < configuration.limits.maxSubscriptions else {
            return send(.subscriptionError(id: s.id, message: "at most \(configuration.limits.maxSubscriptions) subscriptions per session"), into: &out)
        }
        if s.known != nil, s.checkpoint != nil {
            return send(.subscriptionError(id: s.id, message: "known is for a subscription without cp (a resume lists have)"), into: &out)
        }
        let listed = (s.have?.count ?? 0) + (s.known?.count ?? 0)
        if listed > 0 {
            let pending = subscriptions.values.reduce(0) { $0 + $1.have.count + $1.known.count }
            let limit = configuration.maxTrackedDocuments
            guard held.count + pending + listed <= limit else {
                let message = s.have == nil
                    ? "known refused: the session would track more than \(limit) documents (held, have and known); subscribe without known"
                    : "resume refused: the session would track more than \(limit) documents (held, have and known); subscribe without cp"
                return send(.subscriptionError(id: s.id, message: message), into: &out)
            }
        }
        let query: SubscriptionQuery
        do {
            query = try Self.validate(s.query, arguments: s.arguments, now: now, rules: permissions.readRules)
        } catch {
            return send(.subscriptionError(id: s.id, message: "\(error)"), into: &out)
        }
        guard permissions.read.covers(query.collection) else {
            return send(.subscriptionError(id: s.id, message: "not permitted to read collection \(query.collection)"), into: &out)
        }
        generations += 1
        subscriptions[s.id] = Subscription(id: s.id, generation: generations, query: query, checkpoint: s.checkpoint,
                                           have: s.have ?? [], known: s.known ?? [], phase: .queued)
        order.append(s.id)
        subscriptionSetVersion += 1
    }

    /// A subscription query must be `SELECT * FROM collection [WHERE ...]` (PROTOCOL.md §4.3).
    /// The peer's read rule for the collection is ANDed into the statement and the query that
    /// matches live changes: pages, resumes and live changes all see only what the rule shows.
    static func validate(_ text: String, arguments: [String: Value], now: UInt64, rules: DocumentRules = .none) throws -> SubscriptionQuery {
        guard case .select(let parsed) = try DQL.parse(text) else {
            throw SubscriptionQueryError("a subscription must be a SELECT")
        }
        guard parsed.projections == [.all], !parsed.distinct, parsed.groupBy.isEmpty, parsed.having == nil, parsed.orderBy.isEmpty,
              parsed.limit == nil, parsed.offset == nil else {
            throw SubscriptionQueryError("a subscription must be SELECT * FROM collection [WHERE condition] (no DISTINCT, GROUP BY, HAVING, ORDER BY, LIMIT or OFFSET)")
        }
        let s = rules.restricting(parsed)
        let query = try SelectQuery(s, context: EvaluationContext(arguments: arguments, nowMilliseconds: Int64(clamping: now)))
        return SubscriptionQuery(text: text, collection: s.from.name, statement: s, arguments: arguments, query: query)
    }

    mutating func unsubscribe(_ id: UInt32) {
        if subscriptions.removeValue(forKey: id) != nil { subscriptionSetVersion += 1 }
        order.removeAll { $0 == id }
        // An outstanding page or resume check for it is ignored on arrival (generation check); its
        // entry in `pageReads` stays until then, so reads stay matched to their answers.
    }

    // MARK: - Initial sync

    mutating func pageArrived(_ id: UInt32, _ generation: UInt64, _ page: DocumentPage, into out: inout [SyncSessionAction]) {
        // Pages arrive in the order they were asked for: this answers the oldest read (anything
        // else is not an answer to a read of this session and is ignored).
        guard let read = pageReads.first, read.subscription == id, read.generation == generation else { return }
        pageReads.removeFirst()
        if pageReads.isEmpty, case .page? = outstanding { outstanding = nil }
        guard var sub = subscriptions[id], sub.generation == generation, !read.stale,
              sub.phase == .paging(after: read.after) else {
            // Unsubscribed meanwhile, stale, or not where the subscription stands: dropped, and so
            // is any read ahead behind it (it started after this page).
            for i in pageReads.indices { pageReads[i].stale = true }
            return
        }
        if read.ahead, sendWindow <= 0 {
            // Read ahead, and the peer (or its socket) has not made room since: not buffered;
            // read again from the same place once credit returns or the transport drains. A
            // read ahead behind it started after this page: stale.
            for i in pageReads.indices { pageReads[i].stale = true }
            pagesDroppedWithoutCredit += 1
            return
        }
        // The first page's snapshot: everything committed up to it is in every page (later pages are newer).
        if cursor == nil { cursor = page.txn }
        var entries: [ChangeEntry] = []
        entries.reserveCapacity(page.rows.count)
        for row in page.rows {
            let ref = DocumentRef(collection: sub.query.collection, id: row.id)
            let hash = DocumentHash.of(ref)
            held.insert(hash)
            heldByClaimOnly.remove(hash)
            if sub.peerKnows(hash, row.state) {
                statesAlreadyKnown += 1
                continue
            }
            entries.append(ChangeEntry(document: ref, kind: .upsert, payload: .state(row.state)))
        }
        sendBatched(entries, into: &out) { .documents(subscription: id, entries: $0) }
        if page.isLast {
            sub.phase = .live
            sub.known = []
            subscriptions[id] = sub
            send(.synced(subscription: id, checkpoint: cursor ?? page.txn), into: &out)
        } else {
            sub.phase = .paging(after: page.nextAfter ?? page.rows.last?.id)
            subscriptions[id] = sub
        }
    }

    mutating func resumeChecked(_ id: UInt32, _ generation: UInt64, _ reachable: Bool, into out: inout [SyncSessionAction]) {
        if outstanding == .resume(id) { outstanding = nil }
        guard var sub = subscriptions[id], sub.generation == generation, sub.phase == .checkingResume,
              let cp = sub.checkpoint else { return }
        if !permissions.readRules.isEmpty { heldByClaimOnly.formUnion(sub.have.filter { !held.contains($0) }) }
        held.formUnion(sub.have)
        sub.have = []
        if reachable {
            // Lowering the cursor re-delivers (cp, cursor] to the other subscriptions: harmless, merge
            // is idempotent. A transaction the session is inside is then re-read from its start.
            if cp <= cursor ?? cp {
                cursor = cp
                partialSeq = nil
            }
            sub.phase = .live
            subscriptions[id] = sub
            send(.synced(subscription: id, checkpoint: cp), into: &out)
        } else {
            sub.phase = .paging(after: nil)  // full resync (PROTOCOL.md §4.5)
            subscriptions[id] = sub
        }
    }

    /// Sends entries in as many messages as the peer's maximum message size needs.
    mutating func sendBatched(_ entries: [ChangeEntry], into out: inout [SyncSessionAction],
                              _ make: ([ChangeEntry]) -> SyncMessage) {
        sendBatched(entries, size: \.encodedSize, into: &out, make)
    }

    /// Sends items in as many messages as the peer's maximum message size needs; one alone too
    /// large for it is skipped (counted in `skippedOversized`).
    mutating func sendBatched<Item>(_ items: [Item], size encodedSize: (Item) -> Int, into out: inout [SyncSessionAction],
                                    _ make: ([Item]) -> SyncMessage) {
        let limit = peerMaxMessage - 64  // room for the message's own keys and heads
        var batch: [Item] = []
        var size = 0
        for e in items {
            let n = encodedSize(e)
            if n > limit { skippedOversized += 1; continue }
            if size + n > limit, !batch.isEmpty {
                send(make(batch), capacity: size + 64, into: &out)
                batch = []
                size = 0
            }
            batch.append(e)
            size += n
        }
        if !batch.isEmpty { send(make(batch), capacity: size + 64, into: &out) }
    }

    // MARK: - want

    mutating func want(_ refs: [DocumentRef], into out: inout [SyncSessionAction]) {
        guard pendingWants.count + refs.count <= Self.maxPendingWants else {
            return close(.protocolViolation, "more than \(Self.maxPendingWants) documents wanted at once", into: &out)
        }
        pendingWants.append(contentsOf: refs)
    }

    /// The subscriptions the session accepted and holds now, in the order they were requested
    /// (those refused with `sub_error` never count).
    public var acceptedQueries: [SubscriptionQuery] { order.compactMap { subscriptions[$0]?.query } }

    /// The live subscriptions, for matching a batch before it arrives (`LiveMatches`): made once
    /// per change of `subscriptions` (every batch of every session asks for it).
    var liveQueries: LiveQueries {
        mutating get {
            if let cached = liveQueriesCache { return cached }
            var live = LiveQueries()
            for sub in subscriptions.values where sub.phase == .live {
                live.byCollection[sub.query.collection, default: []].append(sub.query.query)
                live.identity[sub.id] = sub.generation
            }
            liveQueriesCache = live
            return live
        }
    }

    /// Takes a batch's live matches if they were worked out for the subscriptions live now.
    mutating func useBatchMatches(_ matches: LiveMatches?) {
        guard let matches else { batchMatches = nil; return }
        batchMatches = matches.identity == liveQueries.identity ? matches : nil
    }

    /// True if a live subscription matches the row's value: from the batch's matches when it has
    /// them (`useBatchMatches`), else checked here.
    func matchesLive(_ entry: LogEntry) -> Bool {
        if let known = batchMatches { return known.matching.contains(entry.position) }
        return matchesLive(entry.document, entry.value)
    }

    /// True if a live subscription on the document's collection matches `value` (this runs inside
    /// the session's step: each check within its per-document budget).
    func matchesLive(_ ref: DocumentRef, _ value: Value?) -> Bool {
        guard let value else { return false }
        let live = subscriptions.values.lazy.filter { $0.phase == .live && $0.query.collection == ref.collection }
        return LiveMatches.firstMatch(value, live.map(\.query.query)).matches
    }

    /// True if the peer's read rules hide this document (a deleted one too, when its collection has a rule).
    func rulesHide(_ ref: DocumentRef, _ value: Value?) -> Bool {
        guard permissions.readRules.condition(for: ref.collection) != nil else { return false }
        guard let value else { return true }
        return !permissions.readRules.allows(value, in: ref.collection, nowMilliseconds: Int64(clamping: lastReceived))
    }

    /// True if a live subscription reads `collection` (the session may read it: checked at `sub`).
    func subscribesTo(_ collection: String) -> Bool {
        subscriptions.values.contains { $0.phase == .live && $0.query.collection == collection }
    }

    mutating func fetched(_ request: UInt64, _ docs: [FetchedDocument], now: UInt64, into out: inout [SyncSessionAction]) {
        guard case .fetch(request, let purpose) = outstanding else { return }
        outstanding = nil
        // Sent whatever they match: what the peer asked for with `want` (it holds a copy that a
        // delta did not apply to: a tombstone or a document that left must reach it too, or it
        // diverges and, waiting for the answer, never catches up), and what `sendState` fetched.
        let whateverMatch = suspended?.whateverMatch ?? []
        let wanted: Bool
        if case .want = purpose { wanted = true } else { wanted = false }
        var entries: [(entry: ChangeEntry, matches: Bool)] = []
        var hidden: Set<DocumentRef> = []
        for d in docs {
            let matches = matchesLive(d.document, d.value)
            // A `want` names any document: one the peer's rules hide is not sent (leaving ones are, §4.6).
            if !matches, wanted, subscribesTo(d.document.collection), rulesHide(d.document, d.value) {
                hidden.insert(d.document)
                continue
            }
            guard matches || (wanted && subscribesTo(d.document.collection))
                    || (whateverMatch.contains(d.document) && subscribesTo(d.document.collection)) else { continue }
            entries.append((ChangeEntry(document: d.document, kind: d.value == nil ? .delete : .upsert, payload: .state(d.state)), matches))
        }
        switch purpose {
        case .want(let asked):
            sendGone(asked, found: docs, hidden: hidden, into: &out)
            // Only what the window takes now (credit, and room in the transport); the rest is
            // asked for again later, not held: a `want` of many large documents cannot fill the
            // queue past the window by more than one document.
            var window = sendWindow
            var fits: [ChangeEntry] = [], later: [DocumentRef] = []
            for (e, matches) in entries {
                if window > 0 {
                    fits.append(e)
                    window -= Int64(e.encodedSize)
                    noteHeld(e.document, matches)
                } else {
                    later.append(e.document)
                }
            }
            pendingWants.insert(contentsOf: later, at: 0)
            // Inside a transaction read in pieces, `changes` of it may have gone out: never a lower txn.
            let txn = (cursor ?? 0) + (partialSeq == nil ? 0 : 1)
            sendBatched(fits, into: &out) { .changes(txn: txn, entries: $0) }
        case .entering:
            for (e, matches) in entries { noteHeld(e.document, matches) }
            resumeSuspended(with: entries.map(\.entry), now: now, into: &out)
        }
    }

    /// `gone` for the documents of a `want` in a collection a live subscription reads that the
    /// read did not return (the server has no row) or that the peer's rules hide: one answer
    /// for both, so a hidden document looks exactly like a missing one. The peer stops waiting
    /// for them and may evict its copy; they are no longer held, so one that appears (or becomes
    /// visible) later comes in full. Only to a peer with the `gone` capability: an older peer
    /// gets no answer for them, as before (PROTOCOL.md §4.7).
    private mutating func sendGone(_ asked: [DocumentRef], found: [FetchedDocument], hidden: Set<DocumentRef>,
                                   into out: inout [SyncSessionAction]) {
        guard peer?.capabilities.contains(SyncCapability.gone) == true else { return }
        let present = Set(found.lazy.map(\.document)).subtracting(hidden)
        var seen: Set<DocumentRef> = []
        var gone: [DocumentRef] = []
        for ref in asked where !present.contains(ref) && subscribesTo(ref.collection) && seen.insert(ref).inserted {
            let hash = DocumentHash.of(ref)
            held.remove(hash)
            heldByClaimOnly.remove(hash)
            gone.append(ref)
        }
        // In messages the peer accepts (a `want` may name ids up to the server's own message
        // size), of at most the protocol's 1000 documents (this server's limit may be higher).
        let most = SyncLimits.default.maxWantDocuments
        for start in stride(from: 0, to: gone.count, by: most) {
            sendBatched(Array(gone[start..<min(gone.count, start + most)]), size: \.encodedSize, into: &out) { .gone($0) }
        }
    }

    /// A document sent in full is held from now on if it matches, and no longer held if not.
    private mutating func noteHeld(_ document: DocumentRef, _ matches: Bool) {
        let hash = DocumentHash.of(document)
        heldByClaimOnly.remove(hash)
        if matches { held.insert(hash) } else { held.remove(hash) }
    }
}

/// A page read in flight: for which subscription (and generation), from where, and, once the
/// store said so, where it ends.
struct PageRead: Equatable {
    var subscription: UInt32
    var generation: UInt64
    var after: Value?
    /// Requested by `readAhead` while an earlier page was still on its way.
    var ahead: Bool
    var boundary: PageBoundary? = nil
    /// Its answer will be dropped: it started after a page that was dropped. No read is made
    /// while one is stale, so every answer still meets its own read.
    var stale = false
}

/// Why a subscription query was refused (sent in `sub_error`).
struct SubscriptionQueryError: Error, CustomStringConvertible {
    var description: String
    init(_ d: String) { description = d }
}

extension SyncSession.Subscription {
    /// True if the peer listed this document in `known` with exactly this state (PROTOCOL.md
    /// §4.3): it has every change the state holds, so the state is not sent and the document is
    /// held from now on, as if it had been. The digest is computed only for listed documents.
    func peerKnows(_ hash: UInt64, _ state: [UInt8]) -> Bool {
        guard !known.isEmpty else { return false }
        var low = 0, high = known.count
        while low < high {
            let mid = (low + high) / 2
            if known[mid].document < hash { low = mid + 1 } else { high = mid }
        }
        guard low < known.count, known[low].document == hash else { return false }
        return known[low].state == StateDigest.of(state)
    }
}
