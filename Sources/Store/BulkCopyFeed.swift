import Postgres
import Synchronization

/// Feeds a bulk INSERT's chunks into one COPY that spans them all (`PostgresConnection.copyIn(_:from:)`),
/// so PostgreSQL never stops between chunks for a new statement and its first data:
///
///   PostgreSQL   ── COPY ── chunk 0 ── chunk 1 ── chunk 2 ── … ── end ──
///   pool thread       make 1     make 2     make 3     …
///
/// `next` hands over chunk k (made while chunk k − 1 was being sent) and starts making chunk
/// k + 1 on the global pool. The connection calls `next` for one piece at a time, and only once the
/// previous piece has left for the socket, so at most three chunks exist at once: one in the
/// socket or libpq, one made, one being made.
///
/// What each chunk created and mutated is kept without its payload, for the transaction's change
/// log and result once the COPY has ended (`sent`).
final class BulkCopyFeed: Sendable {
    /// A chunk's bookkeeping, its COPY tuples already handed over.
    typealias Sent = InsertMerge.Chunk

    private struct State {
        var first: InsertMerge.Chunk?
        var next = 0
        var making: Task<InsertMerge.Chunk, any Error>?
        var sent: [Sent] = []
    }

    private let state: Mutex<State>
    private let chunks: Int
    private let make: @Sendable (Int) throws -> InsertMerge.Chunk

    /// `first` is chunk 0, made before the COPY starts (an error in it then leaves nothing sent);
    /// `make(k)` makes chunk k (with `InsertMerge.apply(_:framed: false)`).
    init(first: InsertMerge.Chunk, chunks: Int, make: @escaping @Sendable (Int) throws -> InsertMerge.Chunk) {
        state = Mutex(State(first: first))
        self.chunks = chunks
        self.make = make
    }

    /// The next piece of the COPY data: chunk k's tuples, the header before chunk 0's and the
    /// trailer after the last one's; nil once all were given.
    func next() async throws -> [UInt8]? {
        let (k, first, making) = state.withLock { s in
            defer { s.first = nil; s.making = nil }
            return (s.next, s.first, s.making)
        }
        guard k < chunks else { return nil }
        var chunk: InsertMerge.Chunk
        if let first { chunk = first } else if let making { chunk = try await making.value } else {
            throw StoreError.corrupt("bulk COPY feed: chunk \(k) was never started")
        }
        let following: Task<InsertMerge.Chunk, any Error>? = k + 1 < chunks
            ? Task(executorPreference: globalConcurrentExecutor) { [make] in try make(k + 1) } : nil
        var piece = chunk.copyPayload ?? []
        chunk.copyPayload = nil
        if k == 0 { piece.insert(contentsOf: PostgresBinaryCopy.header, at: 0) }
        if k + 1 == chunks { piece += PostgresBinaryCopy.trailer }
        state.withLock { s in
            s.next = k + 1
            s.making = following
            s.sent.append(chunk)
        }
        return piece
    }

    /// The chunks handed over so far, in order (their payloads dropped).
    var sent: [Sent] { state.withLock { $0.sent } }

    /// Stops making the chunk in progress (the COPY failed): its result is not needed.
    func cancel() { state.withLock { $0.making?.cancel() } }
}
