import Synchronization

/// A `Mutex` in a class, so a `Sendable` final class can hold mutable test state by reference.
public final class MutexBox<Value: Sendable>: Sendable {
    private let mutex: Mutex<Value>
    public init(_ value: Value) { mutex = Mutex(value) }
    public func withLock<R>(_ body: (inout Value) throws -> R) rethrows -> R { try mutex.withLock { try body(&$0) } }
}
