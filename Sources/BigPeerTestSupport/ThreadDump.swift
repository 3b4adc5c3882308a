import Foundation
import Glibc

/// Every thread's backtrace in this process, taken by gdb, for the message of a test that timed
/// out waiting for something: it tells what Swift's cooperative threads (two on a 2-core
/// machine) and the event-loop threads were doing while the work the test waited for did not
/// run. Where gdb is missing (some CI machines) it says so and the test reports without it.
public enum ThreadDump {
    static let gdb = "/usr/bin/gdb"

    /// Attaches gdb to this process (all threads pause for a few seconds meanwhile), writes the
    /// full backtraces to a file under the temporary directory and returns its path with a compact
    /// copy: each thread's name and the function names of its innermost `framesPerThread` frames.
    /// Tests that time out together share one dump (a second gdb could not attach meanwhile).
    public static func capture() async -> String { await coordinator.capture() }

    private actor Coordinator {
        var current: Task<String, Never>?
        func capture() async -> String {
            if let current { return await current.value }
            let task = Task { await ThreadDump.take() }
            current = task
            let result = await task.value
            current = nil
            return result
        }
    }

    private static let coordinator = Coordinator()

    static func take(framesPerThread: Int = 10, maxCharacters: Int = 24_000) async -> String {
        guard access(gdb, X_OK) == 0 else { return "no thread dump (\(gdb) not found)" }
        let arguments = ["-p", "\(getpid())", "-batch", "-nx", "-ex", "set pagination off", "-ex", "thread apply all bt"]
        let output: TestCommand.Output
        do { output = try await TestCommand.run(gdb, arguments) } catch { return "no thread dump (\(error))" }
        let compact = summarize(output.out, framesPerThread: framesPerThread)
        guard !compact.isEmpty else { return "no thread dump (gdb: status \(output.status), \(output.err.suffix(300)))" }
        let path = NSTemporaryDirectory() + "bigpeer-threads-\(getpid())-\(UInt32.random(in: 0...UInt32.max)).txt"
        _ = FileManager.default.createFile(atPath: path, contents: Data(output.out.utf8))
        return "thread dump (full: \(path)):\n" + String(compact.prefix(maxCharacters))
    }

    /// `Thread 3 (Thread 0x7f… (LWP 123) "name"):` headers, then `#n  0x… in function (args) at file:line`
    /// frames: keeps the header and each frame's function name. Idle event loops (waiting in
    /// epoll with nothing else on their stack) are counted, not listed.
    static func summarize(_ text: String, framesPerThread: Int) -> String {
        var threads: [(header: String, frames: [String])] = []
        for line in text.split(separator: "\n", omittingEmptySubsequences: true) {
            if line.hasPrefix("Thread ") {
                threads.append((String(line), []))
            } else if line.hasPrefix("#"), !threads.isEmpty {
                var rest = line.drop(while: { $0 != " " }).drop(while: { $0 == " " })
                if rest.hasPrefix("0x"), let inRange = rest.range(of: " in ") { rest = rest[inRange.upperBound...] }
                let name = rest.prefix(while: { $0 != "(" }).trimmingCharacters(in: .whitespaces)
                threads[threads.count - 1].frames.append(String(name.prefix(160)))
            }
        }
        var idleLoops = 0
        var out: [String] = []
        for t in threads {
            let idle = t.frames.first == "epoll_wait" && !t.frames.contains { $0.contains("drainInbox") || $0.contains("runDueTimers") }
                && t.frames.contains { $0.contains("Sockets9EventLoop") }
            if idle { idleLoops += 1; continue }
            out.append(t.header)
            out.append(contentsOf: t.frames.prefix(framesPerThread).map { "  " + $0 })
        }
        if threads.isEmpty { return "" }
        return "\(threads.count) threads, \(idleLoops) idle event loops not shown\n" + out.joined(separator: "\n")
    }
}
