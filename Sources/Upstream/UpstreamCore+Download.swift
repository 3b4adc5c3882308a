// Downloads: what the upstream sends (`docs`, `changes`) and the checkpoints after it are merged
// into the store strictly in the order received, through the same group-commit path as every
// write (`mergeDeltas`, origin: the upstream's site id, so its changes are never uploaded back),
// each batch of entries with the checkpoints received among them in one transaction. Credit goes
// back to the upstream only after that commit, so what waits here is bounded by the credit granted
// (`hello.credit`) plus one message, whatever the upstream has to send.

import CRDT
import Logging
import Sockets
import Store
import SyncPeer
import SyncProtocol

/// Something received that the store must take, in order.
enum Inbound {
    /// Entries of one `docs` / `changes` message, its size (credit to grant back once merged) and
    /// the session it came on (a later session does not get credit for an earlier one's bytes).
    case entries([ChangeEntry], bytes: Int, generation: Int, receivedAt: Double)
    /// Checkpoints: everything received before them is merged in the same transaction or earlier.
    case checkpoints([String: Int64])
}

extension UpstreamCore {
    func enqueue(_ item: Inbound) {
        inbound.append(item)
        noteDownloadQueue()
        pumpDownloads()
    }

    /// The status's download lag: since when the oldest received entries wait to be merged.
    func noteDownloadQueue() {
        var oldest: Double?
        for case .entries(_, _, _, let at) in inbound { oldest = at; break }
        if merging, let at = mergingSince { oldest = at }
        status.update { $0.downloadWaitingSince = oldest }
    }

    /// Merges the next batch from the queue (one at a time).
    func pumpDownloads() {
        guard !merging, !inbound.isEmpty, let origin = upstreamSite else { return }
        var items: [MergeItem] = []
        var refs: [DocumentRef] = []
        var unreadable: [DocumentRef] = []
        var checkpoints: [String: Int64] = [:]
        var taken = 0
        take: while taken < inbound.count {
            switch inbound[taken] {
            case .entries(let entries, _, _, _):
                if !items.isEmpty && items.count + entries.count > configuration.downloadBatchDocuments { break take }
                for e in entries {
                    if let item = Self.mergeItem(e) {
                        items.append(item)
                        refs.append(e.document)
                    } else {
                        unreadable.append(e.document)
                    }
                }
            case .checkpoints(let cps):
                checkpoints.merge(cps) { _, new in new }
            }
            taken += 1
        }
        let batch = Array(inbound[..<taken])
        inbound.removeFirst(taken)
        merging = true
        mergingSince = batch.lazy.compactMap { if case .entries(_, _, _, let at) = $0 { at } else { nil } }.first
        let store = self.store
        // While documents are wanted (a delta did not apply), no checkpoint is stored: it would
        // cover changes not held here. The one after the wanted documents arrive covers them.
        // (The store also leaves them out when a delta of this batch does not apply.)
        if !wantedRefs.isEmpty || !unreadable.isEmpty { checkpoints = [:] }
        let saved = checkpoints.isEmpty ? nil : DownloadCheckpoints(upstream: upstreamKey,
                                                                    checkpoints: Dictionary(uniqueKeysWithValues: checkpoints.map { (Self.storageKey($0.key), $0.value) }))
        let merge = items
        run({ () async throws(StoreError) in try await store.mergeDeltas(merge, origin: origin, checkpoints: saved) }) { core, result in
            core.merging = false
            core.mergingSince = nil
            defer { core.noteDownloadQueue() }
            switch result {
            case .success(let (_, rejected)):
                core.storeFailures = 0
                let stored = saved != nil && !rejected.contains { $0.message == DocumentStore.deltaGapRejection }
                core.merged(batch, refs: refs, unreadable: unreadable, rejected: rejected, checkpoints: stored ? checkpoints : [:])
                core.pumpDownloads()
            case .failure(let error):
                // The database is down or restarting: keep the batch first in line and try again.
                // Nothing was acknowledged for it, and the upstream waits for the credit.
                core.inbound.insert(contentsOf: batch, at: 0)
                core.logger.warning("cannot merge downloads yet; retrying", metadata: ["error": "\(error)"])
                core.status.update { $0.lastError = "local store: \(error)"; $0.lastErrorAt = Self.epochSeconds() }
                core.retryLater { $0.pumpDownloads() }
            }
        }
    }

    /// An entry as a delta to merge: a `delta` as is; a `state` as its delta since nothing (the
    /// merge skips what is already held). Nil when the state does not decode or names another
    /// document: asked for again with `want`.
    static func mergeItem(_ e: ChangeEntry) -> MergeItem? {
        switch e.payload {
        case .delta(let bytes):
            return MergeItem(collection: e.document.collection, id: e.document.id, delta: bytes)
        case .state(let bytes):
            guard let doc = try? Document.decode(bytes), doc.id == e.document.id else { return nil }
            return MergeItem(collection: e.document.collection, id: e.document.id, delta: doc.delta(since: VersionVector()).encode())
        }
    }

    private func merged(_ batch: [Inbound], refs: [DocumentRef], unreadable: [DocumentRef], rejected: [(index: Int, message: String)],
                        checkpoints: [String: Int64]) {
        // A delta that does not follow what is held here (an earlier change never arrived):
        // ask for the full state, as a small peer does (PROTOCOL.md §4.6).
        var wanted = unreadable
        var refused = 0
        var notMerged = Set<Int>()
        for r in rejected where r.index < refs.count {
            notMerged.insert(r.index)
            if r.message == DocumentStore.deltaGapRejection {
                wanted.append(refs[r.index])
            } else {
                refused += 1
                logger.warning("a download was not merged", metadata: ["document": "\(refs[r.index].collection) \(refs[r.index].id)", "error": "\(r.message)"])
            }
        }
        for (i, ref) in refs.enumerated() where !notMerged.contains(i) { wantedRefs.remove(ref) }
        wantedRefs.formUnion(wanted)
        let now = Self.epochSeconds()
        status.update { st in
            st.downloadedEntries += refs.count - refused
            st.lastExchangeAt = now
            if let newest = checkpoints.values.max() {
                st.downloadCheckpoint = max(st.downloadCheckpoint ?? newest, newest)
                st.lastCheckpointAt = now
                for key in checkpoints.keys where st.subscriptions[key] != nil { st.subscriptions[key] = true }
            }
        }
        // Credit back for each message merged, on the session it came on; the wants with the last.
        var grants: [Int] = []
        for case .entries(_, let bytes, let generation, _) in batch where generation == self.generation { grants.append(bytes) }
        guard var s = session, !grants.isEmpty else { return }
        var actions: [Session.Action] = []
        for (i, bytes) in grants.enumerated() {
            actions += s.applied(bytes: bytes, wanted: i == grants.count - 1 ? wanted : [])
        }
        session = s
        perform(actions)
    }

    /// Runs `body` again after a second (a store call failed).
    /// The delay doubles with each failure in a row (1 s up to 32 s): a database down for hours
    /// is asked a few times a minute, not every second. Any store call that succeeds resets it.
    func retryLater(_ body: @escaping (UpstreamCore) -> Void) {
        guard !stopped else { return }
        storeFailures += 1
        let delay = Duration.seconds(1 << min(storeFailures - 1, 5))
        _ = loop.scheduleTimer(after: delay) { [weak self] in
            guard let self, !self.stopped else { return }
            body(self)
        }
    }
}
