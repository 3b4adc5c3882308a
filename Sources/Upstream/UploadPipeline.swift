// Which local changes are read, sent and acknowledged, as positions in the change log: pure, so
// its rules are tested alone (UploadPipelineTests).
//
//   stored position ─▶ read (backlog) ─▶ queue ─▶ up (seq) ─▶ ack ─▶ acknowledged moves ─▶ stored
//
// `acknowledged` is the upload position: everything up to it that must go up has been committed
// upstream. It is the position just before the lowest change still queued or waiting for its
// ack (retries after `deltaGap` keep their rows' positions), or, with nothing outstanding, the
// end of the last read (rows from the upstream and evictions are skipped but passed). A session
// that ends forgets what was in flight and reads again from `acknowledged`.

import Store
import SyncProtocol

struct UploadPipeline {
    private(set) var acknowledged = ChangeLogPosition(txn: 0, seq: -1)
    /// Where the next backlog read starts.
    private(set) var readEnd = ChangeLogPosition(txn: 0, seq: -1)
    /// Read and not yet sent, in position order.
    private(set) var queue: [UpstreamUpload] = []
    /// Sent (or being prepared) and not acknowledged: the lowest position in each `up`.
    private var outstanding: [UInt64: ChangeLogPosition] = [:]
    /// Rows may be waiting after `readEnd` (the last read moved on, or the head moved since).
    var mayHaveMore = true
    /// A session resumed the pipeline from the stored position (false between sessions).
    private(set) var started = false

    /// Starts a session's uploads at `position`.
    mutating func start(at position: ChangeLogPosition) {
        acknowledged = position
        readEnd = position
        queue = []
        outstanding = [:]
        mayHaveMore = true
        started = true
    }

    /// The session ended: what was read or in flight is read again next time.
    mutating func linkDown() {
        queue = []
        outstanding = [:]
        readEnd = acknowledged
        mayHaveMore = true
        started = false
    }

    /// A backlog read that started at `readEnd` returned `uploads` and ended at `end`.
    mutating func read(_ uploads: [UpstreamUpload], end: ChangeLogPosition) {
        mayHaveMore = end > readEnd
        queue += uploads
        readEnd = max(readEnd, end)
        advance()
    }

    /// The next `up`: at most `maxDocuments` documents and about `maxBytes` of deltas (at least one).
    mutating func take(seq: UInt64, maxDocuments: Int, maxBytes: Int) -> [UpstreamUpload] {
        var batch: [UpstreamUpload] = []
        var bytes = 0
        while let next = queue.first, batch.count < maxDocuments, batch.isEmpty || bytes + next.delta.count <= maxBytes {
            var u = queue.removeFirst()
            u.seq = seq
            bytes += u.delta.count
            batch.append(u)
        }
        if let low = batch.map(\.position).min() { outstanding[seq] = low }
        return batch
    }

    /// The `up` `seq` was acknowledged; `retry` are its documents to send again as full states.
    mutating func acknowledged(seq: UInt64, retry: [UpstreamUpload]) {
        outstanding[seq] = nil
        queue = (retry + queue).sorted { $0.position < $1.position }
        advance()
    }

    /// Nothing read and unsent, nothing waiting for an ack.
    var isIdle: Bool { queue.isEmpty && outstanding.isEmpty }

    /// An `up` taken and not sent after all (the session could not take it, or its states could
    /// not be read): its documents go back to the queue, so the position cannot pass them.
    mutating func putBack(seq: UInt64, _ batch: [UpstreamUpload]) {
        outstanding[seq] = nil
        queue = (batch + queue).sorted { $0.position < $1.position }
    }

    private mutating func advance() {
        let lows = outstanding.values.min()
        let low = [lows, queue.first?.position].compactMap { $0 }.min()
        if let low {
            acknowledged = max(acknowledged, ChangeLogPosition(txn: low.txn, seq: low.seq - 1))
        } else {
            acknowledged = max(acknowledged, readEnd)
        }
    }
}
