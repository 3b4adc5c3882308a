/// Carries a loop-owned, non-`Sendable` value across an isolation boundary, to be opened only on
/// its loop (like NIO's `NIOLoopBound`).
///
/// `@unchecked Sendable` is sound because `value` is reachable only through the getter, which
/// traps off the owning loop's thread: the wrapped object is never touched concurrently.
public struct LoopBound<Value>: @unchecked Sendable {
    private let wrapped: Value
    public let loop: EventLoop

    public init(_ value: Value, loop: EventLoop) {
        self.wrapped = value
        self.loop = loop
    }

    public var value: Value {
        precondition(loop.inEventLoop, "LoopBound value opened off its loop \(loop)")
        return wrapped
    }
}
