import CEpoll
import CThreads
import Glibc
import Synchronization

/// Readiness interest for a registered descriptor (level-triggered).
public struct Interest: OptionSet, Sendable {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }
    public static let readable = Interest(rawValue: EPOLLIN.rawValue | EPOLLRDHUP.rawValue)
    public static let writable = Interest(rawValue: EPOLLOUT.rawValue)
}

/// What epoll reported for a descriptor.
public struct Readiness: Sendable {
    public let raw: UInt32
    public var isReadable: Bool { raw & (EPOLLIN.rawValue | EPOLLRDHUP.rawValue | EPOLLHUP.rawValue | EPOLLERR.rawValue) != 0 }
    public var isWritable: Bool { raw & (EPOLLOUT.rawValue | EPOLLERR.rawValue | EPOLLHUP.rawValue) != 0 }
    public var isHangup: Bool { raw & (EPOLLHUP.rawValue | EPOLLERR.rawValue) != 0 }
}

/// Identifies one registration. The generation makes a reused descriptor number unable to receive a
/// stale event meant for the descriptor that had it before (swift-nio does the same).
public struct Registration: Hashable, Sendable {
    public let fd: Int32
    let generation: UInt32
}

public struct TimerID: Hashable, Sendable { let raw: UInt64 }

/// One epoll loop on one thread.
///
/// Ownership: `registrations`, `timers`, `localTasks` and every handler run only on this loop's
/// thread; other threads reach the loop through `execute`, which appends to the `inbox` (a
/// `Mutex`) and wakes the loop through an eventfd (on the loop thread itself `execute` appends to
/// `localTasks`, no lock, no wake-up). That is why the class can be `@unchecked Sendable`: its mutable
/// loop-owned state is never touched off the loop thread (checked by `assertInLoop` in debug).
/// It is also a `TaskExecutor`, so `Task(executorPreference: loop)` runs async code on this thread
/// with no hop through the global pool.
public final class EventLoop: @unchecked Sendable, TaskExecutor, CustomStringConvertible {
    public typealias Handler = (Readiness) -> Void

    private struct Entry {
        var generation: UInt32
        var handler: Handler
    }

    private struct Inbox {
        var tasks: [@Sendable () -> Void] = []
        var wakePending = false
        var stopRequested = false
    }

    public let index: Int
    /// The time slice a loop thread asks the kernel for (`bp_thread_request_slice`). A loop wakes
    /// for a request and runs for microseconds; with the default slice a waking loop waits for
    /// the thread on its core (an evaluation thread, a PostgreSQL backend) to finish up to 3 ms
    /// first. Same fair share, shorter waits: the hostile mix's normal-client p99 (regex bombs,
    /// one evaluation thread) 2.4-3.4 ms -> 2.0-2.7 ms (docs/performance-history.md).
    static let requestedSliceNanoseconds: UInt64 = 100_000

    /// Whether the thread offers the CPU (`sched_yield`) after each batch of events; see `run`.
    public let yieldsAfterEachBatch: Bool
    private let epfd: Int32
    private let wakefd: Int32
    private let inbox = Mutex(Inbox())
    private let threadID = Atomic<UInt>(0)
    private let finished = Mutex<Bool>(false)

    // Loop-owned state.
    /// Work `execute`d on the loop thread itself (a resumed continuation of a task whose executor
    /// is this loop, a handler scheduling a follow-up): no lock and no wake-up needed.
    private var localTasks: [@Sendable () -> Void] = []
    private var localSpare: [@Sendable () -> Void] = []
    private var entries: [Int32: Entry] = [:]
    private var nextGeneration: UInt32 = 1
    private var timers = TimerHeap()
    private var nextTimerID: UInt64 = 1
    private var running = true
    /// One read buffer per loop, shared by all its connections: a read is handed to the
    /// connection's delegate and consumed before the next read, so idle connections hold no buffer.
    let readBuffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 16)

    private static let wakeToken: UInt64 = UInt64.max

    public var description: String { "EventLoop(\(index))" }

    /// Creates the loop and starts its thread. `yieldsAfterEachBatch`: see `run`; on by default.
    public init(index: Int = 0, yieldsAfterEachBatch: Bool = true) throws(IOError) {
        self.index = index
        self.yieldsAfterEachBatch = yieldsAfterEachBatch
        epfd = try Syscall.call("epoll_create1") { epoll_create1(Int32(EPOLL_CLOEXEC)) }
        do {
            wakefd = try Syscall.call("eventfd") { eventfd(0, Int32(EFD_NONBLOCK | EFD_CLOEXEC)) }
        } catch {
            Syscall.close(epfd)
            throw error
        }
        _ = try Syscall.call("epoll_ctl") {
            bp_epoll_ctl(epfd, EPOLL_CTL_ADD, wakefd, EPOLLIN.rawValue, Self.wakeToken)
        }
        let box = Unmanaged.passRetained(self).toOpaque()
        var tid = pthread_t()
        let rc = pthread_create(&tid, nil, { arg in
            let loop = Unmanaged<EventLoop>.fromOpaque(arg!).takeRetainedValue()
            loop.run()
            return nil
        }, box)
        if rc != 0 {
            Unmanaged<EventLoop>.fromOpaque(box).release()
            throw IOError(call: "pthread_create", errno: rc)
        }
        pthread_detach(tid)
    }

    deinit {
        readBuffer.deallocate()
        Syscall.close(wakefd)
        Syscall.close(epfd)
    }

    /// True when called on this loop's thread.
    public var inEventLoop: Bool { threadID.load(ordering: .acquiring) == UInt(pthread_self()) }

    @inline(__always)
    public func assertInLoop(file: StaticString = #fileID, line: UInt = #line) {
        assert(inEventLoop, "must run on \(self)", file: file, line: line)
    }

    // MARK: - Cross-thread entry points

    /// Runs `work` on the loop thread, soon. Safe from any thread.
    public func execute(_ work: @escaping @Sendable () -> Void) {
        if inEventLoop {
            localTasks.append(work)
            return
        }
        let needsWake = inbox.withLock { inbox -> Bool in
            inbox.tasks.append(work)
            if inbox.wakePending { return false }
            inbox.wakePending = true
            return true
        }
        if needsWake { wake() }
    }

    /// Runs `body` on the loop thread and returns its result to the caller.
    public func submit<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { (cont: CheckedContinuation<T, any Error>) in
            execute {
                do { cont.resume(returning: try body()) } catch { cont.resume(throwing: error) }
            }
        }
    }

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        execute { [unowned self] in job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }

    /// Asks the loop to stop after the current iteration. Pending `execute` work still runs.
    public func stop() {
        inbox.withLock { $0.stopRequested = true }
        wake()
    }

    /// Blocks until the loop thread has exited (never call on the loop itself).
    public func waitUntilStopped() {
        precondition(!inEventLoop, "waitUntilStopped on the loop thread would deadlock")
        while !finished.withLock({ $0 }) { usleep(1000) }
    }

    private func wake() {
        var one: UInt64 = 1
        _ = withUnsafeBytes(of: &one) { write(wakefd, $0.baseAddress, 8) }
    }

    // MARK: - Loop-thread API

    /// Registers `fd` for `interest`; `handler` runs on this loop for each readiness event.
    public func register(fd: Int32, interest: Interest, handler: @escaping Handler) throws(IOError) -> Registration {
        assertInLoop()
        let gen = nextGeneration
        nextGeneration &+= 1
        if nextGeneration == 0 { nextGeneration = 1 }
        let data = UInt64(gen) << 32 | UInt64(UInt32(bitPattern: fd))
        _ = try Syscall.call("epoll_ctl(ADD)") { bp_epoll_ctl(epfd, EPOLL_CTL_ADD, fd, interest.rawValue, data) }
        entries[fd] = Entry(generation: gen, handler: handler)
        return Registration(fd: fd, generation: gen)
    }

    /// Changes what a registration waits for.
    public func modify(_ reg: Registration, interest: Interest) throws(IOError) {
        assertInLoop()
        guard entries[reg.fd]?.generation == reg.generation else { return }
        let data = UInt64(reg.generation) << 32 | UInt64(UInt32(bitPattern: reg.fd))
        _ = try Syscall.call("epoll_ctl(MOD)") { bp_epoll_ctl(epfd, EPOLL_CTL_MOD, reg.fd, interest.rawValue, data) }
    }

    /// Removes a registration. Call before closing the descriptor.
    public func deregister(_ reg: Registration) {
        assertInLoop()
        guard entries[reg.fd]?.generation == reg.generation else { return }
        entries[reg.fd] = nil
        // ENOENT/EBADF here only mean the kernel already forgot the fd; nothing to undo.
        _ = bp_epoll_ctl(epfd, EPOLL_CTL_DEL, reg.fd, 0, 0)
    }

    /// Runs `body` once after `delay` on this loop. Returns an id for `cancelTimer`.
    @discardableResult
    public func scheduleTimer(after delay: Duration, _ body: @escaping () -> Void) -> TimerID {
        assertInLoop()
        let id = nextTimerID
        nextTimerID += 1
        timers.push(deadline: NanoTime.now().adding(delay), id: id, body: body)
        return TimerID(raw: id)
    }

    public func cancelTimer(_ id: TimerID) {
        assertInLoop()
        timers.cancel(id: id.raw)
    }

    /// Number of live registrations (for tests and metrics).
    public var registrationCount: Int {
        assertInLoop()
        return entries.count
    }

    // MARK: - The loop

    private func run() {
        threadID.store(UInt(pthread_self()), ordering: .releasing)
        // Named for thread dumps (gdb, /proc/PID/task/*/comm); at most 15 characters.
        _ = bp_set_thread_name("bp-loop-\(index)")
        _ = bp_thread_request_slice(Self.requestedSliceNanoseconds)
        var events = [UInt32](repeating: 0, count: 256)
        var datas = [UInt64](repeating: 0, count: 256)
        while running {
            let timeout = computeTimeout()
            let n = events.withUnsafeMutableBufferPointer { ev in
                datas.withUnsafeMutableBufferPointer { da in
                    bp_epoll_wait(epfd, ev.baseAddress, da.baseAddress, 256, timeout)
                }
            }
            if n < 0 {
                let e = bp_errno()
                if e == EINTR { continue }
                preconditionFailure("epoll_wait: errno \(e)")  // EBADF/EINVAL: our fd is gone, a bug
            }
            for i in 0..<Int(n) {
                let data = datas[i]
                if data == Self.wakeToken {
                    var buf: UInt64 = 0
                    _ = read(wakefd, &buf, 8)
                    continue
                }
                let fd = Int32(bitPattern: UInt32(truncatingIfNeeded: data))
                let gen = UInt32(truncatingIfNeeded: data >> 32)
                guard let entry = entries[fd], entry.generation == gen else { continue }
                entry.handler(Readiness(raw: events[i]))
            }
            runDueTimers()
            drainInbox()
            // A loop that always finds events ready never blocks, so when other threads want the
            // same cores (PostgreSQL backends, other loops, co-located clients) the scheduler takes
            // the CPU from it only at a tick (4 ms at HZ=250), and every connection of the loop
            // waits that long. Offering the CPU after each batch lets them run now, and the loop
            // gets it back as soon as they block: on 2 cores shared with wrk, c64 p99 fell from
            // 7.5-7.8 ms to 0.9-1.2 ms at the same requests/s (docs/performance-history.md, HTTP). With
            // nothing else runnable, sched_yield returns at once (one cheap syscall per batch).
            if yieldsAfterEachBatch && n > 0 { sched_yield() }
        }
        finished.withLock { $0 = true }
    }

    private func computeTimeout() -> Int32 {
        let hasWork = !localTasks.isEmpty || inbox.withLock { !$0.tasks.isEmpty || $0.stopRequested }
        if hasWork { return 0 }
        guard let deadline = timers.nextDeadline else { return -1 }
        let now = NanoTime.now()
        if deadline <= now { return 0 }
        let ms = (deadline.nanoseconds - now.nanoseconds + 999_999) / 1_000_000
        return Int32(min(ms, 86_400_000))
    }

    private func runDueTimers() {
        guard timers.nextDeadline != nil else { return }
        let now = NanoTime.now()
        while let body = timers.popDue(now: now) { body() }
    }

    private func drainInbox() {
        // Bounded passes so work that re-enqueues itself cannot starve I/O.
        for _ in 0..<4 {
            let (tasks, stop) = inbox.withLock { inbox -> ([@Sendable () -> Void], Bool) in
                let t = inbox.tasks
                inbox.tasks.removeAll(keepingCapacity: true)
                inbox.wakePending = false
                return (t, inbox.stopRequested)
            }
            for t in tasks { t() }
            // The loop's own queue: swapped out first, so what these tasks enqueue waits for the
            // next pass (FIFO, and a task that re-enqueues itself cannot spin here).
            var local = localSpare
            swap(&local, &localTasks)
            for t in local { t() }
            local.removeAll(keepingCapacity: true)
            localSpare = local
            if stop && tasks.isEmpty && localTasks.isEmpty { running = false; return }
            if tasks.isEmpty && localTasks.isEmpty { return }
        }
    }
}

/// A fixed set of loops, one thread each; connections are spread round-robin.
public final class EventLoopGroup: Sendable {
    public let loops: [EventLoop]
    private let counter = Atomic<Int>(0)

    public init(threads: Int, yieldsAfterEachBatch: Bool = true) throws(IOError) {
        var loops: [EventLoop] = []
        for i in 0..<max(1, threads) { loops.append(try EventLoop(index: i, yieldsAfterEachBatch: yieldsAfterEachBatch)) }
        self.loops = loops
    }

    public func next() -> EventLoop {
        loops[counter.wrappingAdd(1, ordering: .relaxed).oldValue % loops.count]
    }

    public func shutdown() {
        for l in loops { l.stop() }
        for l in loops where !l.inEventLoop { l.waitUntilStopped() }
    }

    /// Number of online CPUs (the default thread count).
    public static var defaultThreadCount: Int { max(1, Int(sysconf(Int32(_SC_NPROCESSORS_ONLN)))) }
}
