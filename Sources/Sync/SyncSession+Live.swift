// Live changes from the change log (PROTOCOL.md §4.6) and uploads (§4.8).
//
// Per change-log row, with H = "the peer holds the document", M = "a live subscription matches its
// current value":   H∧M → delta;  H∧¬M → delta, forget it (the change that makes it leave);
//                   ¬H∧M → full state, hold it;  ¬H∧¬M → nothing.
// The full state comes with the log entry (read once per instance by the change feed); only when it
// is missing (a ring entry without it) is it fetched for this session.
// Rows the peer itself uploaded are not echoed; they only update H (and fetch the full state if
// the document enters a subscription the peer did not hold it for).

import CRDT
import SyncProtocol
import Values

/// Documents a run of rows needs full states of (not in their entries): fetched before the run is sent.
struct FetchList {
    var refs: [DocumentRef] = []
    /// Sent whether or not they match (see `SyncSession.sendState`).
    var whateverMatch: Set<DocumentRef> = []
}

/// A log batch interrupted at transaction `txn` to fetch the full states of documents entering a
/// subscription; resumed when `.fetched` arrives.
struct SuspendedBatch: Sendable {
    var txn: Int64
    /// Where the interrupted run of the transaction's rows ends (the transaction's end, or a row
    /// inside it when the batch holds only part of it).
    var runEnd: ChangeLogPosition
    var built: [ChangeEntry]
    var remaining: ArraySlice<LogEntry>
    var end: ChangeLogPosition
    var sentChanges: Bool
    /// Of the documents fetched, those the peer must get whether or not they match (`sendState`):
    /// leaving, or its own upload merged into a history it lacks.
    var whateverMatch: Set<DocumentRef> = []
}

extension SyncSession {
    /// Where the session stands in the change log: after `cursor`, and inside the next
    /// transaction after `partialSeq` when set.
    var logPosition: ChangeLogPosition? {
        guard let cursor else { return nil }
        guard let partialSeq else { return .end(of: cursor) }
        return ChangeLogPosition(txn: cursor + 1, seq: partialSeq)
    }

    /// Moves the position forward to `p` (never back).
    mutating func advance(to p: ChangeLogPosition) {
        guard let current = logPosition, p > current else { return }
        if p.isTransactionEnd {
            cursor = p.txn
            partialSeq = nil
        } else {
            cursor = p.txn - 1
            partialSeq = p.seq
        }
    }

    mutating func logArrived(_ batch: LogBatch, now: UInt64, into out: inout [SyncSessionAction]) {
        // Rows of `batch.end.txn` were read: that transaction is committed even when the batch
        // holds only part of it (the feed's head may not have reached it yet).
        logHead = max(logHead, batch.end.txn)
        guard suspended == nil, let position = logPosition, batch.end > position, !isSyncing else { return }
        useBatchMatches(batch.liveMatches)
        let start = batch.entries.firstIndex { $0.position > position } ?? batch.entries.endIndex
        process(batch.entries[start...], end: batch.end, sentChanges: false, now: now, into: &out)
    }

    /// Handles runs of one transaction's rows in order until the batch ends, credit runs out, or
    /// full states are needed. A run is the whole (rest of a) transaction, or a part of it: where
    /// the batch ends inside it, or where the run's entries use up the credit left — credit is
    /// checked before every run, so a large transaction overshoots it by about one message at
    /// most, not by the rest of the transaction (PROTOCOL.md §6).
    mutating func process(_ entries: ArraySlice<LogEntry>, end: ChangeLogPosition, sentChanges: Bool, now: UInt64,
                          into out: inout [SyncSessionAction]) {
        var rest = entries
        var sent = sentChanges
        while let first = rest.first {
            let window = sendWindow
            if window <= 0 {
                // Not buffered: the rest is dropped and re-read from the position when credit
                // returns or the transport drains.
                return finishBatch(sent: sent, now: now, into: &out)
            }
            let txn = first.txn
            let txnEndIndex = rest.firstIndex { $0.txn != txn } ?? rest.endIndex
            var built: [ChangeEntry] = []
            var entering = FetchList()
            var bytes = 0
            var i = rest.startIndex
            while i < txnEndIndex {
                let count = built.count
                decide(rest[i], &built, &entering)
                i += 1
                // The payload and the collection dominate an entry (ChangeEntry.encodedSize).
                for e in built[count...] { bytes += e.payload.bytes.count + e.document.collection.utf8.count + 24 }
                if Int64(bytes) >= window { break }
            }
            let run = rest[rest.startIndex..<i]
            rest = rest[i...]
            // Complete when the run reached the transaction's last row: a later transaction follows
            // in the batch, or the batch ends past it.
            let reachedEnd = i == txnEndIndex && (txnEndIndex < entries.endIndex || end.completeThrough >= txn)
            let runEnd: ChangeLogPosition = reachedEnd ? .end(of: txn) : (run.last?.position ?? end)
            if !entering.refs.isEmpty {
                suspended = SuspendedBatch(txn: txn, runEnd: runEnd, built: built, remaining: rest, end: end, sentChanges: sent,
                                           whateverMatch: entering.whateverMatch)
                requestCounter += 1
                outstanding = .fetch(request: requestCounter, purpose: .entering)
                out.append(.fetchDocuments(request: requestCounter, entering.refs))
                return
            }
            sent = finishRun(txn, upTo: runEnd, built, now: now, into: &out) || sent
        }
        advance(to: end)
        finishBatch(sent: sent, now: now, into: &out)
    }

    mutating func resumeSuspended(with entering: [ChangeEntry], now: UInt64, into out: inout [SyncSessionAction]) {
        guard let s = suspended else { return }
        suspended = nil
        // Subscriptions may have changed while the full states were fetched.
        useBatchMatches(batchMatches)
        // The permissions may have narrowed while the full states were fetched.
        let built = (s.built + entering).filter { permissions.read.covers($0.document.collection) }
        let sent = finishRun(s.txn, upTo: s.runEnd, built, now: now, into: &out) || s.sentChanges
        process(s.remaining, end: s.end, sentChanges: sent, now: now, into: &out)
    }

    /// Sends one run of transaction `txn`'s entries; the position moves to `runEnd`. Returns
    /// whether anything was sent. Before the first `changes` of a transaction that is not complete
    /// yet, the checkpoint of everything before it goes out: `txn`s in `changes` and `checkpoint`
    /// never decrease (PROTOCOL.md §4.6), and no checkpoint may follow until the transaction ends.
    mutating func finishRun(_ txn: Int64, upTo runEnd: ChangeLogPosition, _ entries: [ChangeEntry], now: UInt64,
                            into out: inout [SyncSessionAction]) -> Bool {
        if !runEnd.isTransactionEnd, !entries.isEmpty, let cursor, cursor > lastCheckpointSent {
            sendCheckpoint(cursor, now: now, into: &out)
        }
        sendBatched(entries, into: &out) { .changes(txn: txn, entries: $0) }
        advance(to: runEnd)
        return !entries.isEmpty
    }

    /// After changes were sent the checkpoint follows at once; idle advances wait for `tick`.
    mutating func finishBatch(sent: Bool, now: UInt64, into out: inout [SyncSessionAction]) {
        if sent, let cursor, cursor > lastCheckpointSent { sendCheckpoint(cursor, now: now, into: &out) }
        checkpointAckedUploads(now: now, into: &out)
    }

    /// True when the peer's own upload is everything the server holds of the document: the logged
    /// delta starts every range at nothing (the server had none of it) and reaches exactly the
    /// state's version vector (nothing else has happened to it since). Then the document the
    /// peer created is not sent back to it. Decoding costs something, but only for documents a
    /// peer's upload makes enter its own subscriptions.
    static func uploadIsTheWholeDocument(_ e: LogEntry) -> Bool {
        guard let deltaBytes = e.delta, let stateBytes = e.state,
              let delta = try? Delta.decode(deltaBytes), delta.kind == .incremental, !delta.ranges.isEmpty,
              delta.ranges.values.allSatisfy({ $0.from == nil }),
              let state = try? Document.decode(stateBytes) else { return false }
        return state.versionVector == delta.upperBounds
    }

    /// A document the peer must now hold: its full state from the entry, else fetched.
    mutating func enter(_ e: LogEntry, _ hash: UInt64, _ built: inout [ChangeEntry], _ entering: inout FetchList) {
        heldByClaimOnly.remove(hash)
        if let state = e.state {
            built.append(ChangeEntry(document: e.document, kind: .upsert, payload: .state(state)))
            held.insert(hash)
        } else {
            entering.refs.append(e.document)
        }
    }

    /// The document's current full state goes to the peer whether or not it matches (it is held
    /// afterwards only if it matches): from the entry, else fetched.
    mutating func sendState(_ e: LogEntry, _ hash: UInt64, matches: Bool, _ built: inout [ChangeEntry], _ entering: inout FetchList) {
        if heldByClaimOnly.remove(hash) != nil, !matches, rulesHide(e.document, e.value) {
            held.remove(hash)  // only claimed in `have`, and hidden: forgotten, not sent
            return
        }
        if let state = e.state {
            built.append(ChangeEntry(document: e.document, kind: e.value == nil ? .delete : .upsert, payload: .state(state)))
            if matches { held.insert(hash) } else { held.remove(hash) }
        } else {
            held.remove(hash)
            entering.refs.append(e.document)
            entering.whateverMatch.insert(e.document)
        }
    }

    /// Per row: what the peer gets (PROTOCOL.md §4.6). `matches` uses the document's value when the
    /// row was read, which includes every later change of the document up to that read; so a row
    /// that does not match is not necessarily the change that made the document leave, and its
    /// delta alone would leave the peer with an intermediate version that nothing later corrects
    /// (issue #16 item 13: a peer kept a document the server had deleted, because the leaving
    /// "delta" was an earlier insert and the delete after it was skipped as no longer held). The
    /// peer therefore gets the current full state when a held document leaves.
    mutating func decide(_ e: LogEntry, _ built: inout [ChangeEntry], _ entering: inout FetchList) {
        if e.kind == .evict { return }  // the server dropped its copy; peers keep theirs
        let hash = DocumentHash.of(e.document)
        guard permissions.read.covers(e.document.collection) else {
            // Not readable any more (refreshed or re-checked credentials): not even the change
            // that would make it leave; the peer learned of the end with `sub_error`.
            held.remove(hash)
            heldByClaimOnly.remove(hash)
            return
        }
        let isHeld = held.contains(hash)
        let matches = matchesLive(e)
        if let origin = e.origin, origin == peer?.site {
            // The peer's own upload. If it held the document, it had every earlier change, so its
            // copy is the server's as of this row; if the document still matches, later rows send
            // it what follows. If it no longer matches, later changes (other peers' uploads in the
            // same group-committed transaction: seed 21, a delete right after the peer's own
            // update) may be what made it leave, and they would be skipped once it is not held:
            // the peer gets the current state. If it did not hold the document, it uploaded one
            // it created without the server's copy: unless the server had nothing else of it, the
            // merge brought in a history the peer lacks (a tombstone that keeps its INITIAL insert
            // deleted, other peers' fields), so it gets the merged state, matching or not.
            if isHeld {
                if !matches { sendState(e, hash, matches: false, &built, &entering) }
            } else if Self.uploadIsTheWholeDocument(e) {
                if matches { held.insert(hash) }
            } else if subscribesTo(e.document.collection), matches || !rulesHide(e.document, e.value) {
                // Not a way to read a hidden document by uploading over its id.
                sendState(e, hash, matches: matches, &built, &entering)
            }
            return
        }
        let kind: ChangeKind = e.kind == .delete ? .delete : .upsert
        switch (isHeld, matches) {
        case (true, true):
            heldByClaimOnly.remove(hash)  // visible now: from here on it leaves like any held document
            if let delta = e.delta {
                built.append(ChangeEntry(document: e.document, kind: kind, payload: .delta(delta)))
            } else {
                // A creation logs no delta (docs/STORAGE.md): its delta is its whole state, which
                // the document's current state contains. The peer held an older copy (one the
                // server had evicted): it gets the state, as it would have got the delta.
                enter(e, hash, &built, &entering)
            }
        case (true, false):
            sendState(e, hash, matches: false, &built, &entering)
        case (false, true):
            enter(e, hash, &built, &entering)
        case (false, false):
            break
        }
    }

    // MARK: - Uploads

    mutating func upload(_ seq: UInt64, _ entries: [UploadEntry], size: Int, now: UInt64, into out: inout [SyncSessionAction]) {
        guard uploadCredit > 0, let peer else {
            return close(.protocolViolation, "up sent without upload credit", into: &out)
        }
        uploadCredit -= Int64(size)
        // Entries for collections the peer may not write are rejected one by one (the rest still
        // commit): the peer learns exactly which changes the server will never hold.
        var permitted: [UploadEntry] = [], positions: [Int] = [], forbidden: [UploadRejection] = []
        for (i, e) in entries.enumerated() {
            if let problem = NameRules.problem(e.document.collection) {
                forbidden.append(UploadRejection(index: i, message: "collection name \(problem)"))
            } else if permissions.write.covers(e.document.collection) {
                permitted.append(e)
                positions.append(i)
            } else {
                forbidden.append(UploadRejection(index: i, message: "not permitted to write collection \(e.document.collection)"))
            }
        }
        uploads.append(PendingUpload(seq: seq, size: size, positions: positions, forbidden: forbidden))
        if permitted.isEmpty {
            // Nothing to commit: acknowledge at the newest transaction already known to be visible.
            return uploadCommitted(seq, max(cursor ?? 0, logHead), [], now: now, into: &out)
        }
        out.append(.applyUpload(seq: seq, origin: peer.site, entries: permitted, writeRules: permissions.writeRules))
    }

    /// Acks go out in the order the uploads arrived, each followed by the credit it used.
    mutating func uploadCommitted(_ seq: UInt64, _ txn: Int64, _ rejected: [UploadRejection], now: UInt64,
                                  into out: inout [SyncSessionAction]) {
        guard let i = uploads.firstIndex(where: { $0.seq == seq && $0.ack == nil }) else { return }
        // Store rejections index the permitted entries; map them back to the peer's indexes.
        let pending = uploads[i]
        let mapped = rejected.map { r in
            UploadRejection(index: r.index < pending.positions.count ? pending.positions[r.index] : r.index, message: r.message)
        }
        uploads[i].ack = .ack(seq: seq, txn: txn, rejected: (pending.forbidden + mapped).sorted { $0.index < $1.index })
        while let first = uploads.first, let ack = first.ack {
            uploads.removeFirst()
            if case .ack(_, let acked, _) = ack { ackedThrough = max(ackedThrough, acked) }
            send(ack, into: &out)
            uploadCredit += Int64(first.size)
            send(.credit(bytes: UInt64(first.size)), into: &out)
        }
        // Already past it (nothing new was uploaded, or the log was read before the ack): now.
        checkpointAckedUploads(now: now, into: &out)
    }

    /// The checkpoint a peer waits for after its acks (`ackedThrough`), once the position covers
    /// them and no transaction or initial sync is half done.
    mutating func checkpointAckedUploads(now: UInt64, into out: inout [SyncSessionAction]) {
        guard let cursor, ackedThrough > lastCheckpointSent, cursor >= ackedThrough, cursor > lastCheckpointSent,
              suspended == nil, partialSeq == nil, !isSyncing else { return }
        sendCheckpoint(cursor, now: now, into: &out)
    }
}

/// An upload received and not yet acknowledged (acks leave in arrival order).
struct PendingUpload {
    var seq: UInt64
    var size: Int
    /// Index in the peer's `up` of each entry passed to the store.
    var positions: [Int]
    /// Entries refused without reaching the store (no write permission).
    var forbidden: [UploadRejection]
    var ack: SyncMessage?
}
