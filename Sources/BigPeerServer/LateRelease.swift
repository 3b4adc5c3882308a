/// Lets a large request's values be freed after its response is on its way, not before.
///
/// A handler's locals die when it returns, before the HTTP layer writes the response it returned:
/// for a bulk INSERT of 100,000 documents, freeing the parsed body (a tree of ~400,000
/// allocations) took ~0.1 s between COMMIT and the response (docs/performance-history.md, "Session 6: bulk
/// INSERT"). `hold` keeps one more reference to them on a background task that lets go a moment
/// later, so the handler's own releases only decrement counts and the last one, which frees, runs
/// on a pool thread while the response is sent.
enum LateRelease {
    /// Request bodies from this size on are worth it (smaller ones free in microseconds).
    static let threshold = 1 << 20

    /// `values` must hold references to the storage to free later (arrays, dictionaries, `Value`s).
    /// Call it as the handler returns (in a `defer`): the task lets go 100 ms after the call.
    static func hold<T: Sendable>(_ values: T) {
        Task.detached(priority: .background) {
            // Long enough for the handler to have returned and its locals to have been released.
            try? await Task.sleep(for: .milliseconds(100))
            withExtendedLifetime(values) {}
        }
    }
}
