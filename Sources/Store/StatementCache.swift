import DQL
import Values
import Synchronization

/// Parsed statements by their exact text, so a client that sends the same statement with new
/// `args` (the normal way to use DQL over REST) skips the lexer and parser.
///
/// What is cached is only the parse: a pure function of the text (and the parse limits, fixed per
/// cache). Everything that depends on the database or the arguments — strict mode, indexes, the
/// pushdown plan with its bound values, type declarations (which are part of the text) — is still
/// worked out per request, so nothing here can go stale and nothing needs invalidating.
///
/// Bounded: at most `capacity` entries, each at most `maxTextBytes` long (bulk INSERTs with
/// thousands of placeholders are parsed every time rather than pinned in memory). When full, the
/// oldest entry is dropped (FIFO: cheap, and a hot statement is simply re-added).
final class StatementCache: Sendable {
    private struct State {
        // Keyed by the exact bytes: String keys would hand the parse of `WHERE n = 'é'` (NFC) to
        // the same text with the NFD spelling, a different value to PostgreSQL.
        var entries: [ExactString: Statement] = [:]
        var order: [ExactString] = []
        var oldest = 0
        var hits = 0
        var misses = 0
    }

    let capacity: Int
    let maxTextBytes: Int
    let limits: DQLParseLimits
    private let state = Mutex(State())

    init(capacity: Int = 1024, maxTextBytes: Int = 4096, limits: DQLParseLimits) {
        self.capacity = max(1, capacity)
        self.maxTextBytes = maxTextBytes
        self.limits = limits
    }

    /// The parsed statement for `text` (from the cache, or parsed now and remembered).
    func statement(for text: String) throws(DQLSyntaxError) -> Statement {
        let cacheable = text.utf8.count <= maxTextBytes
        let key = ExactString(text)
        if cacheable, let hit = state.withLock({ s -> Statement? in
            guard let st = s.entries[key] else { return nil }
            s.hits += 1
            return st
        }) {
            return hit
        }
        let parsed = try DQL.parse(text, limits: limits)
        guard cacheable else { return parsed }
        state.withLock { s in
            s.misses += 1
            guard s.entries.updateValue(parsed, forKey: key) == nil else { return }
            if s.order.count < capacity {
                s.order.append(key)
            } else {
                s.entries[s.order[s.oldest]] = nil
                s.order[s.oldest] = key
                s.oldest = (s.oldest + 1) % capacity
            }
        }
        return parsed
    }

    /// (hits, misses, entries), for tests and metrics.
    var statistics: (hits: Int, misses: Int, entries: Int) {
        state.withLock { ($0.hits, $0.misses, $0.entries.count) }
    }
}
