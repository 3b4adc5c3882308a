/// Binary min-heap of timer deadlines. Cancelling removes the body; the stale heap slot is skipped
/// when it surfaces (lazy deletion keeps cancel O(1), which idle-timeout resets need).
struct TimerHeap {
    private struct Slot { var deadline: NanoTime; var id: UInt64 }
    private var heap: [Slot] = []
    private var bodies: [UInt64: () -> Void] = [:]

    var count: Int { bodies.count }

    var nextDeadline: NanoTime? {
        mutating get {
            dropCancelledTop()
            return heap.first?.deadline
        }
    }

    mutating func push(deadline: NanoTime, id: UInt64, body: @escaping () -> Void) {
        bodies[id] = body
        heap.append(Slot(deadline: deadline, id: id))
        siftUp(heap.count - 1)
    }

    mutating func cancel(id: UInt64) {
        bodies[id] = nil
        if bodies.isEmpty { heap.removeAll(keepingCapacity: true) }
    }

    /// Removes and returns the body of the earliest timer due at `now`, if any.
    mutating func popDue(now: NanoTime) -> (() -> Void)? {
        dropCancelledTop()
        guard let top = heap.first, top.deadline <= now else { return nil }
        removeTop()
        return bodies.removeValue(forKey: top.id)
    }

    private mutating func dropCancelledTop() {
        while let top = heap.first, bodies[top.id] == nil { removeTop() }
    }

    private mutating func removeTop() {
        let last = heap.removeLast()
        if !heap.isEmpty {
            heap[0] = last
            siftDown(0)
        }
    }

    private mutating func siftUp(_ i: Int) {
        var i = i
        while i > 0 {
            let p = (i - 1) / 2
            if heap[i].deadline < heap[p].deadline { heap.swapAt(i, p); i = p } else { return }
        }
    }

    private mutating func siftDown(_ i: Int) {
        var i = i
        while true {
            let l = 2 * i + 1, r = l + 1
            var m = i
            if l < heap.count && heap[l].deadline < heap[m].deadline { m = l }
            if r < heap.count && heap[r].deadline < heap[m].deadline { m = r }
            if m == i { return }
            heap.swapAt(i, m)
            i = m
        }
    }
}
