import BigPeerTestSupport
import CThreads
import Glibc
import Synchronization
import Testing
@testable import Sockets

@Suite struct EventLoopTests {
    @Test func executeRunsOnTheLoopThread() async throws {
        let loop = try EventLoop()
        defer { loop.stop() }
        let onLoop = try await loop.submit { loop.inEventLoop }
        #expect(onLoop)
        #expect(!loop.inEventLoop)
    }

    /// A loop thread asks for a short time slice, so that waking it preempts a busy thread
    /// (Linux 6.12+, EEVDF). Checked where the kernel shows slices and honours requested ones.
    @Test func theLoopThread_isNamed_andAsksForAShortSlice() async throws {
        let loop = try EventLoop(index: 3)
        defer { loop.stop() }
        let (name, slice, honoured) = try await loop.submit { () -> (String, UInt64?, Bool) in
            let name = CurrentThread.name, slice = CurrentThread.slice
            // Does this kernel honour a requested slice at all? Ask for another, read it, undo.
            _ = bp_thread_request_slice(200_000)
            let honoured = CurrentThread.slice == 200_000
            _ = bp_thread_request_slice(EventLoop.requestedSliceNanoseconds)
            return (name, slice, honoured)
        }
        #expect(name == "bp-loop-3")
        if honoured { #expect(slice == EventLoop.requestedSliceNanoseconds) }
    }

    @Test func timersFireInDeadlineOrderAndCancelledOnesDoNot() async throws {
        let loop = try EventLoop()
        defer { loop.stop() }
        let fired = Mutex<[Int]>([])
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            loop.execute {
                loop.scheduleTimer(after: .milliseconds(30)) { fired.withLock { $0.append(3) } }
                loop.scheduleTimer(after: .milliseconds(10)) { fired.withLock { $0.append(1) } }
                let cancelled = loop.scheduleTimer(after: .milliseconds(20)) { fired.withLock { $0.append(2) } }
                loop.cancelTimer(cancelled)
                loop.scheduleTimer(after: .milliseconds(40)) { done.resume() }
            }
        }
        #expect(fired.withLock { $0 } == [1, 3])
    }

    @Test func readinessIsDeliveredForAPipe() async throws {
        let loop = try EventLoop()
        defer { loop.stop() }
        var fds: [Int32] = [0, 0]
        #expect(pipe(&fds) == 0)
        let (r, w) = (fds[0], fds[1])
        _ = fcntl(r, F_SETFL, fcntl(r, F_GETFL) | O_NONBLOCK)
        let got: UInt8 = try await withCheckedThrowingContinuation { cont in
            loop.execute {
                do {
                    var reg: Registration?
                    reg = try loop.register(fd: r, interest: .readable) { ready in
                        var b: UInt8 = 0
                        _ = read(r, &b, 1)
                        loop.deregister(reg!)
                        cont.resume(returning: b)
                    }
                    var byte: UInt8 = 42
                    _ = write(w, &byte, 1)
                } catch { cont.resume(throwing: error) }
            }
        }
        #expect(got == 42)
        close(r); close(w)
    }

    /// The cross-thread wake-up (`execute`: inbox + `wakePending` + eventfd) loses no job when it
    /// races with the loop going idle: each sender thread waits for its job before sending the
    /// next, so the loop drains, clears `wakePending` and blocks in epoll_wait between almost every
    /// pair of jobs, while the other senders hit those same moments. A lost wake-up leaves a sender
    /// waiting (its job sits in the inbox with no eventfd write to announce it) and is counted.
    @Test func executeFromOtherThreadsLosesNoWakeUpWhileTheLoopGoesIdle() async throws {
        let loop = try EventLoop()
        defer { loop.stop() }
        let rounds = 1000
        let lost = await withTaskGroup(of: Int.self) { group in
            for _ in 0..<3 {
                group.addTask {
                    await OwnThread.run { () -> Int in
                        let ran = Atomic<Int>(0)
                        var lost = 0
                        for round in 1...rounds {
                            loop.execute { ran.add(1, ordering: .releasing) }
                            // A job is never late by 5 s, however loaded the machine, unless lost.
                            let deadline = NanoTime.now().adding(.seconds(5))
                            while ran.load(ordering: .acquiring) < round {
                                if NanoTime.now() > deadline { lost += 1; break }
                                usleep(20)
                            }
                            if lost > 0 { break }
                        }
                        return lost
                    }
                }
            }
            return await group.reduce(0, +)
        }
        #expect(lost == 0)
    }

    @Test func taskExecutorPreferenceRunsOnTheLoop() async throws {
        let loop = try EventLoop()
        defer { loop.stop() }
        let onLoop = await Task(executorPreference: loop) { loop.inEventLoop }.value
        #expect(onLoop)
    }
}
