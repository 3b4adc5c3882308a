// Store observers: a SELECT re-run after every commit (local write or applied sync change) that
// touches its collection, delivered with the differences to the previous result by `_id`.

import DQL
import Synchronization
import Values

/// One delivery to an observer: the full current result and what changed since the last one.
/// Rows are identified by `_id` (a row without `_id`, e.g. from a projection, by its position).
public struct ObserverEvent: Sendable, Equatable {
    public var items: [Value]
    /// Ids of rows that are new in `items`.
    public var insertions: [Value]
    /// Ids of rows that were in the previous result and are gone.
    public var deletions: [Value]
    /// Ids of rows present before and now whose value changed.
    public var updates: [Value]
    /// Ids of rows present before and now whose order relative to the other kept rows changed
    /// (the rows outside a longest run that kept its order).
    public var moves: [Value]

    public var isInitial = false
    /// Whether the commit behind this event was a statement run on this peer (`execute`); false
    /// for the initial result and for what sync did (changes from a server or a peer this one
    /// serves, copies sync evicted). Per event: a handler may run while another thread's statement
    /// is in progress, or deliver another thread's events, so "a statement is running" cannot
    /// tell the two apart (`bigpeer peer` lost synced changes that way).
    public var isLocal = false

    /// Computes the event from the previous and the current result (by `_id`).
    static func diff(old: [Value], new: [Value]) -> ObserverEvent {
        func keys(_ rows: [Value]) -> [Value] { rows.enumerated().map { $0.element["_id"] ?? .int(Int64($0.offset)) } }
        let oldKeys = keys(old), newKeys = keys(new)
        var oldIndex: [Value: Int] = [:]
        for (i, k) in oldKeys.enumerated() where oldIndex[k] == nil { oldIndex[k] = i }
        var newIndex: [Value: Int] = [:]
        for (i, k) in newKeys.enumerated() where newIndex[k] == nil { newIndex[k] = i }
        var event = ObserverEvent(items: new, insertions: [], deletions: [], updates: [], moves: [])
        event.deletions = oldKeys.filter { newIndex[$0] == nil }
        var keptOldPositions: [(key: Value, old: Int)] = []
        for (i, k) in newKeys.enumerated() where newIndex[k] == i {
            if let o = oldIndex[k] {
                if old[o] != new[i] { event.updates.append(k) }
                keptOldPositions.append((k, o))
            } else {
                event.insertions.append(k)
            }
        }
        let stay = longestIncreasingRun(keptOldPositions.map(\.old))
        event.moves = keptOldPositions.enumerated().filter { !stay.contains($0.offset) }.map(\.element.key)
        return event
    }

    /// Indexes of one longest strictly increasing subsequence of `xs` (patience sorting, O(n log n)).
    static func longestIncreasingRun(_ xs: [Int]) -> Set<Int> {
        var tails: [Int] = []          // index into xs of the smallest tail of each length
        var previous = [Int](repeating: -1, count: xs.count)
        for (i, x) in xs.enumerated() {
            var lo = 0, hi = tails.count
            while lo < hi {
                let mid = (lo + hi) / 2
                if xs[tails[mid]] < x { lo = mid + 1 } else { hi = mid }
            }
            if lo > 0 { previous[i] = tails[lo - 1] }
            if lo == tails.count { tails.append(i) } else { tails[lo] = i }
        }
        var out = Set<Int>()
        var at = tails.last ?? -1
        while at >= 0 { out.insert(at); at = previous[at] }
        return out
    }
}

struct ObserverEntry {
    var query: SelectQuery
    var collection: String
    var last: [Value]
    var handler: @Sendable (ObserverEvent) -> Void
}

/// Cancels an observer (or a sync subscription) when told to; cancelling twice is harmless.
public final class CancelHandle: Sendable {
    private let action: Mutex<(@Sendable () -> Void)?>

    init(_ action: @escaping @Sendable () -> Void) { self.action = Mutex(action) }

    public func cancel() {
        let a = action.withLock { a in
            let taken = a
            a = nil
            return taken
        }
        a?()
    }
}

extension SmallPeer {
    /// Calls `handler` with the result of `query` now (`isInitial`) and after every later change
    /// that alters it. The query must be a SELECT; it sees the documents this peer holds. Date
    /// functions (`now()`, `clock()`) read the time of registration, so results stay comparable.
    public func registerObserver(_ query: String, arguments: [String: Value] = [:],
                                 handler: @escaping @Sendable (ObserverEvent) -> Void) throws(SmallPeerError) -> CancelHandle {
        let statement: Statement
        do { statement = try DQL.parse(query) } catch { throw .syntax(error) }
        guard case .select(let s) = statement else { throw .invalid("an observer needs a SELECT statement") }
        let context = EvaluationContext(arguments: arguments, nowMilliseconds: Int64(clamping: configuration.wallClock()),
                                        strictMode: configuration.strictMode)
        let prepared: SelectQuery
        do { prepared = try SelectQuery(s, context: context) } catch { throw .from(error) }
        let id = try state.withLock { st throws(SmallPeerError) -> UInt64 in
            guard st.storage != nil else { throw .closed }
            let items: [Value]
            do throws(DQLEvaluationError) { items = try prepared.run(st.store.candidates(s.from.name, s.filter, context)) } catch { throw SmallPeerError.from(error) }
            let id = st.nextObserverID
            st.nextObserverID += 1
            st.observers[id] = ObserverEntry(query: prepared, collection: s.from.name, last: items, handler: handler)
            var first = ObserverEvent.diff(old: [], new: items)
            first.isInitial = true
            st.deliveries.append((handler, first))
            return id
        }
        deliverObserverEvents()
        return CancelHandle { [weak self] in
            self?.state.withLock { _ = $0.observers.removeValue(forKey: id) }
        }
    }

    /// Delivers queued events outside the lock, in order. One thread delivers at a time; events
    /// queued meanwhile (also by handlers that write) are delivered by that same thread.
    func deliverObserverEvents() {
        let start = state.withLock { s -> Bool in
            if s.delivering || s.deliveries.isEmpty { return false }
            s.delivering = true
            return true
        }
        guard start else { return }
        while true {
            let batch = state.withLock { s in
                let b = s.deliveries
                s.deliveries = []
                if b.isEmpty { s.delivering = false }
                return b
            }
            if batch.isEmpty { return }
            for (handler, event) in batch { handler(event) }
        }
    }
}

extension PeerState {
    /// Re-runs the observers of `collections` and queues an event for each whose result changed
    /// (`isLocal`: the commit was a statement run on this peer).
    mutating func queueObserverEvents(for collections: Set<String>, isLocal: Bool) {
        for (id, var o) in observers where collections.contains(o.collection) {
            // A query that fails now (e.g. arithmetic overflow on a new value) keeps its last result.
            guard let items = try? o.query.run(store.candidates(o.collection, o.query.statement.filter, o.query.evaluator.context)),
                  items != o.last else { continue }
            var event = ObserverEvent.diff(old: o.last, new: items)
            event.isLocal = isLocal
            deliveries.append((o.handler, event))
            o.last = items
            observers[id] = o
        }
    }
}
