// The document pass: when the change log no longer holds every change after the upload position
// (maintenance pruned it before any upstream row held it back: a server that becomes a local node
// after CHANGE_LOG_RETENTION_DAYS, or a new database behind the upstream URL), the changes cannot
// be replayed. Every document (tombstones too) is then uploaded whole, in (collection, id) order,
// in pages; the first page's snapshot `n` says which changes the states contain, and the upload
// goes on from the change log after `n`.
//
// The pass is not stored: the upload position stays where it was until the pass ends, so a node
// that restarts in the middle does it again (merging a state twice changes nothing upstream).

import CRDT
import Logging
import Store
import SyncProtocol
import Values

/// Where the document pass is.
struct DocumentPass {
    /// The last document read.
    var after: (collection: String, id: Value)?
    /// The first page's snapshot: the newest transaction its states contained.
    var snapshot: Int64?
}

extension UpstreamCore {
    /// Reads the next page of documents for the pass, or ends the pass.
    func readDocuments() {
        guard let pass = documentPass else { return }
        reading = true
        let store = self.store, rows = configuration.backlogReadRows, bytes = configuration.backlogReadBytes, generation = self.generation
        run({ () async throws(StoreError) in try await store.readDocumentsForUpload(after: pass.after, limit: rows, maxBytes: bytes) }) { core, result in
            core.reading = false
            guard core.generation == generation, core.uploads.started, core.documentPass != nil else { return core.pumpUploads() }
            switch result {
            case .success(let (documents, snapshot)):
                let through = core.documentPass?.snapshot ?? snapshot
                guard let last = documents.last else {
                    // Done: the change log takes over after the first page's snapshot.
                    core.documentPass = nil
                    core.logger.notice("every document's state was read for the upstream; uploading from the change log again", metadata: ["after": "\(through)"])
                    core.uploads.read([], end: .end(of: through))
                    core.savePosition()
                    core.pumpUploads()
                    core.subscribeWhenDrained()
                    return
                }
                core.documentPass = DocumentPass(after: (last.collection, last.id), snapshot: through)
                // Each at the position the pass started from: the upload position cannot pass it
                // before the pass ends.
                let at = core.uploads.readEnd
                let uploads = documents.compactMap { d -> UpstreamUpload? in
                    guard let doc = try? Document.decode(d.state) else { return nil }
                    return UpstreamUpload(ref: DocumentRef(collection: d.collection, id: d.id), delta: doc.delta(since: VersionVector()).encode(),
                                          position: at, isFullState: true)
                }
                core.status.update {
                    $0.documentPassUploads += uploads.count
                    $0.skippedUploads += documents.count - uploads.count
                }
                core.uploads.read(uploads, end: at)
                core.pumpUploads()
            case .failure(let error):
                core.logger.warning("cannot read documents for the upstream yet; retrying", metadata: ["error": "\(error)"])
                core.status.update { $0.lastError = "local store: \(error)"; $0.lastErrorAt = Self.epochSeconds() }
                core.retryLater { $0.pumpUploads() }
            }
        }
    }
}
