// Uploads: every change committed here that did not come from the upstream goes up in commit
// order, in `up`s sized by `uploadBatchDocuments` / `uploadBatchBytes`, at most `uploadsInFlight`
// at once and only while the upstream's credit lasts (the session's `canUpload`). The backlog is
// read from the change log in bounded pages as the queue empties, so a week of local writes costs
// one page of memory, not a week. The upload position moves when acks come and is stored
// (`UploadPipeline` says where it is).

import CRDT
import Logging
import Sockets
import Store
import SyncPeer
import SyncProtocol

extension UpstreamCore {
    /// A commit here moved the change feed's head: there may be something to upload.
    func localCommitted() {
        uploads.mayHaveMore = true
        if reading { committedDuringRead = true }
        pumpUploads()
    }

    /// Sends what may go now, reading the backlog when the queue runs dry.
    func pumpUploads() {
        guard uploads.started, !preparing, let site = upstreamSite else { return }
        while let s = session, s.canUpload {
            if uploads.queue.isEmpty {
                if reading { return }
                if documentPass != nil { readDocuments() } else if uploads.mayHaveMore { readBacklog(excluding: site) }
                return
            }
            let seq = nextSeq
            nextSeq += 1
            let batch = uploads.take(seq: seq, maxDocuments: configuration.uploadBatchDocuments, maxBytes: configuration.uploadBatchBytes)
            if batch.contains(where: \.needsFullState) {
                prepare(batch, seq: seq)
                return
            }
            send(batch, seq: seq)
        }
    }

    private func send(_ batch: [UpstreamUpload], seq: UInt64) {
        guard var s = session else { return uploads.putBack(seq: seq, batch) }
        let actions = s.upload(batch, seq: seq)
        session = s
        // Refused by the session (no credit, or a subscription not synced yet after a `prepare`
        // that waited for the store): back to the queue, sent when it may be.
        if actions.isEmpty { return uploads.putBack(seq: seq, batch) }
        let bytes = actions.reduce(0) { n, a in if case .send(let b) = a { n + b.count } else { n } }
        status.update { $0.uploadedBytes += bytes }
        perform(actions)
    }

    /// Replaces the deltas of documents the upstream could not merge (`deltaGap`) with their
    /// current full states, then sends the batch.
    private func prepare(_ batch: [UpstreamUpload], seq: UInt64) {
        preparing = true
        let refs = batch.filter(\.needsFullState).map { (collection: $0.ref.collection, id: $0.ref.id) }
        let store = self.store, generation = self.generation
        run({ () async throws(StoreError) in try await store.fetchDocuments(refs) }) { core, result in
            core.preparing = false
            guard core.generation == generation, core.uploads.started else { return }
            switch result {
            case .success(let documents):
                var states: [DocumentRef: [UInt8]] = [:]
                for d in documents { states[DocumentRef(collection: d.collection, id: d.id)] = d.state }
                var ready: [UpstreamUpload] = []
                for var u in batch {
                    if u.needsFullState {
                        // Gone here since (evicted or reaped): nothing left to send for it.
                        guard let state = states[u.ref], let full = try? Document.decode(state) else { continue }
                        u.delta = full.delta(since: VersionVector()).encode()
                        u.isFullState = true
                        u.needsFullState = false
                    }
                    ready.append(u)
                }
                if ready.isEmpty {
                    core.uploads.acknowledged(seq: seq, retry: [])
                    core.savePosition()
                } else {
                    core.send(ready, seq: seq)
                }
                core.pumpUploads()
            case .failure(let error):
                core.uploads.putBack(seq: seq, batch)
                core.localFailure("cannot read documents to re-send: \(error)")
            }
        }
    }

    private func readBacklog(excluding site: Int64) {
        reading = true
        committedDuringRead = false
        let after = uploads.readEnd
        let store = self.store, rows = configuration.backlogReadRows, bytes = configuration.backlogReadBytes
        run({ () async throws(StoreError) in
            try await store.readUploadBacklog(after: after, excludingOrigin: site, maxRows: rows, maxBytes: bytes)
        }) { core, result in
            core.reading = false
            // A session that ended meanwhile moved `readEnd` back: this read is stale.
            guard core.uploads.started, core.uploads.readEnd == after else { return core.pumpUploads() }
            switch result {
            case .success(let (rows, end)):
                core.storeFailures = 0
                let uploads = rows.compactMap(Self.upload)
                if uploads.count < rows.count {
                    core.status.update { $0.skippedUploads += rows.count - uploads.count }
                    core.logger.error("local changes whose document state does not decode were not uploaded", metadata: ["count": "\(rows.count - uploads.count)"])
                }
                core.uploads.read(uploads, end: end)
                // The read's snapshot may have missed a commit that came meanwhile.
                if core.committedDuringRead { core.uploads.mayHaveMore = true }
                core.savePosition()
                core.pumpUploads()
                core.subscribeWhenDrained()
            case .failure(let error):
                core.logger.warning("cannot read the upload backlog yet; retrying", metadata: ["error": "\(error)"])
                core.status.update { $0.lastError = "local store: \(error)"; $0.lastErrorAt = Self.epochSeconds() }
                core.retryLater { $0.pumpUploads() }
            }
        }
    }

    /// A change-log row as an upload: its delta, or for a creation (which logs none) the
    /// document's state as a delta since nothing.
    static func upload(_ row: UploadRow) -> UpstreamUpload? {
        let ref = DocumentRef(collection: row.collection, id: row.id)
        if let delta = row.delta { return UpstreamUpload(ref: ref, delta: delta, position: row.position, isFullState: false) }
        guard let state = row.state, let doc = try? Document.decode(state) else { return nil }
        return UpstreamUpload(ref: ref, delta: doc.delta(since: VersionVector()).encode(), position: row.position, isFullState: true)
    }

    /// The upstream committed an `up` (or rejected some of its entries).
    func acknowledged(_ sent: [UpstreamUpload], rejected: [UploadRejection]) {
        guard let seq = sent.first?.seq else { return }
        var retry: [UpstreamUpload] = []
        var refused: [String] = []
        for r in rejected where r.index >= 0 && r.index < sent.count {
            var u = sent[r.index]
            if r.message == DocumentStore.deltaGapRejection && !u.isFullState {
                u.needsFullState = true
                retry.append(u)
            } else {
                refused.append("\(u.ref.collection) \(u.ref.id): \(r.message)")
            }
        }
        for why in refused { logger.warning("the upstream refused an upload", metadata: ["error": "\(why)"]) }
        let now = Self.epochSeconds()
        status.update { st in
            st.uploadedChanges += sent.count - retry.count - refused.count
            st.rejectedUploads += refused.count
            st.resentAsFullState += retry.count
            if let last = refused.last { st.lastRejection = last }
            st.lastExchangeAt = now
        }
        uploads.acknowledged(seq: seq, retry: retry)
        savePosition()
        subscribeWhenDrained()
    }

    /// Stores the upload position when it moved (one write at a time; the newest wins).
    func savePosition() {
        guard !savingPosition, uploads.acknowledged > savedPosition else { return }
        savingPosition = true
        let position = uploads.acknowledged
        let store = self.store, key = upstreamKey, site = upstreamSite
        run({ () async throws(StoreError) in try await store.saveUploadPosition(key, position, site: site) }) { core, result in
            core.savingPosition = false
            // Acknowledged by another upstream database than the one now behind the URL: the
            // store ignored it (the row was reset for the new one), and so does this process.
            guard core.upstreamSite == site else { return core.savePosition() }
            switch result {
            case .success:
                core.savedPosition = max(core.savedPosition, position)
                core.status.update { $0.uploadedThrough = core.savedPosition }
                core.savePosition()
            case .failure(let error):
                core.logger.warning("cannot store the upload position yet; retrying", metadata: ["error": "\(error)"])
                core.retryLater { $0.savePosition() }
            }
        }
    }
}
