import Postgres
import Synchronization

/// Feeds a bulk INSERT's chunks into one COPY that spans them (`PostgresConnection.copyIn(_:from:)`),
/// so PostgreSQL never stops between chunks for a new statement and its first data:
///
///   PostgreSQL   ── COPY chunk 0 ── COPY ── chunk 1 ── chunk 2 ── … ── end ──
///   pool thread        make 1          make 2     make 3     …
///
/// (Chunk 0 goes in a COPY of its own first: `insertEvaluatingInChunks`.) `next` hands over chunk k,
/// made while the chunk before it was being stored, and starts making chunk k + 1 on the global
/// pool. The connection asks for one piece at a time and hands it to libpq only once the previous
/// one has left for the socket, so at most three chunks exist at once: one in the socket or libpq,
/// one made, one being made.
///
/// What each chunk created and mutated is kept without its payload, for the transaction's change
/// log and result once the COPY has ended (`sent`).
final class BulkCopyFeed: Sendable {
    /// A chunk's bookkeeping, its COPY tuples already handed over.
    typealias Sent = InsertMerge.Chunk

    private struct State {
        var next: Int
        var making: Task<InsertMerge.Chunk, any Error>?
        var sent: [Sent] = []
    }

    private let state: Mutex<State>
    private let first: Int
    private let chunks: Int
    private let make: @Sendable (Int) throws -> InsertMerge.Chunk

    /// Feeds chunks `from ..< chunks`, each made by `make(k)` (with `InsertMerge.apply(_:framed:
    /// false)`); making chunk `from` starts now.
    init(from: Int, chunks: Int, make: @escaping @Sendable (Int) throws -> InsertMerge.Chunk) {
        state = Mutex(State(next: from, making: from < chunks ? Self.start(from, make) : nil))
        first = from
        self.chunks = chunks
        self.make = make
    }

    /// Makes chunk k on the global pool (not on the caller's executor: that is the event loop
    /// driving the COPY).
    private static func start(_ k: Int, _ make: @escaping @Sendable (Int) throws -> InsertMerge.Chunk) -> Task<InsertMerge.Chunk, any Error> {
        Task(executorPreference: globalConcurrentExecutor) { try make(k) }
    }

    /// The next piece of the COPY data: chunk k's tuples, the header before the first chunk's and
    /// the trailer after the last one's; nil once all were given.
    func next() async throws -> [UInt8]? {
        let (k, making) = state.withLock { s in
            defer { s.making = nil }
            return (s.next, s.making)
        }
        guard k < chunks else { return nil }
        guard let making else { throw StoreError.corrupt("bulk COPY feed: chunk \(k) was never started") }
        var chunk = try await making.value
        let following = k + 1 < chunks ? Self.start(k + 1, make) : nil
        var piece = chunk.copyPayload ?? []
        chunk.copyPayload = nil
        if k == first { piece.insert(contentsOf: PostgresBinaryCopy.header, at: 0) }
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
