import Foundation
import Glibc

/// Runs helper programs (curl, python, openssl, the bigpeer binary) from tests.
///
/// Not Foundation's `Process` + `Pipe`: `FileHandle.readDataToEndOfFile` crashes (`try!` inside
/// Foundation) when a read is interrupted by a signal — and these tests SIGKILL child servers, so
/// SIGCHLD arrives at random moments. Output goes to temporary files; `waitpid` retries EINTR.
public enum TestCommand {
    public struct Output: Sendable {
        public var status: Int32
        public var out: String
        public var err: String
    }

    /// Runs `path args` to completion. `stdin` is fed from a temporary file when given. Waiting
    /// never blocks a thread (see `wait`).
    public static func run(_ path: String, _ args: [String], environment: [String: String]? = nil,
                           stdin: [UInt8]? = nil) async throws -> Output {
        let base = NSTemporaryDirectory() + "bp-cmd-\(getpid())-\(UInt64.random(in: 0...UInt64.max))"
        let (outPath, errPath, inPath) = (base + ".out", base + ".err", base + ".in")
        defer { unlink(outPath); unlink(errPath); unlink(inPath) }
        if let stdin { _ = FileManager.default.createFile(atPath: inPath, contents: Data(stdin)) }
        let pid = try spawn(path, args, environment: environment, stdinPath: stdin == nil ? "/dev/null" : inPath,
                            stdoutPath: outPath, stderrPath: errPath)
        let status = await wait(pid)
        func read(_ p: String) -> String { (try? String(contentsOfFile: p, encoding: .utf8)) ?? "" }
        return Output(status: status, out: read(outPath), err: read(errPath))
    }

    /// Starts `path args` without waiting; returns its pid.
    public static func spawn(_ path: String, _ args: [String], environment: [String: String]? = nil,
                             stdinPath: String = "/dev/null", stdoutPath: String, stderrPath: String) throws -> pid_t {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, stdinPath, O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, stdoutPath, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        posix_spawn_file_actions_addopen(&actions, 2, stderrPath, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        let argv: [UnsafeMutablePointer<CChar>?] = ([path] + args).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        let env = environment ?? ProcessInfo.processInfo.environment
        let envp: [UnsafeMutablePointer<CChar>?] = env.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { envp.forEach { free($0) } }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, path, &actions, nil, argv, envp)
        guard rc == 0 else { throw ServerProcessError.spawn("\(path): \(String(cString: strerror(rc)))") }
        return pid
    }

    /// Waits for `pid`; returns its exit status (128 + signal when killed). Polls with `WNOHANG`
    /// and sleeps between polls: a blocking `waitpid` would hold one of Swift's cooperative
    /// threads (two on this kind of machine) and could deadlock tests that need them.
    public static func wait(_ pid: pid_t) async -> Int32 {
        var status: Int32 = 0
        var delay: UInt64 = 1
        var killed = false
        while true {
            let r = waitpid(pid, &status, WNOHANG)
            if r == pid { break }
            if r == -1 && errno != EINTR { return -1 }
            if Task.isCancelled {
                // A cancelled task's sleeps return at once: without this the loop would spin.
                // The test is over (time limit or failure), so the child goes too.
                if !killed { kill(pid, SIGKILL); killed = true }
                usleep(1000)
                continue
            }
            try? await Task.sleep(for: .milliseconds(delay))
            delay = min(delay * 2, 20)
        }
        return (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
    }
}

/// A child process the test talks to line by line over pipes (raw `read`/`write`, EINTR-safe;
/// no Foundation FileHandle, which crashes on EINTR and blocked a run here).
public final class InteractiveChild: Sendable {
    public let pid: pid_t
    private let stdinFD: Int32
    private let stdoutFD: Int32

    public init(_ path: String, _ args: [String]) throws {
        var toChild: [Int32] = [0, 0], fromChild: [Int32] = [0, 0]
        guard pipe(&toChild) == 0, pipe(&fromChild) == 0 else { throw ServerProcessError.spawn("pipe: errno \(errno)") }
        // CLOEXEC at once: a process another test spawns meanwhile must not inherit the write end
        // of this child's stdin, or the child never sees EOF and `finish` waits forever (it
        // happened: two PostgreSQL reaper shells held it). The dup2 onto 0 and 1 below clears the
        // flag in the child. (`pipe2` would close the remaining window; Glibc does not export it.)
        for fd in toChild + fromChild { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, toChild[0], 0)
        posix_spawn_file_actions_adddup2(&actions, fromChild[1], 1)
        posix_spawn_file_actions_addclose(&actions, toChild[1])
        posix_spawn_file_actions_addclose(&actions, fromChild[0])
        let argv: [UnsafeMutablePointer<CChar>?] = ([path] + args).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var child: pid_t = 0
        let rc = posix_spawnp(&child, path, &actions, nil, argv, environ)
        close(toChild[0])
        close(fromChild[1])
        guard rc == 0 else {
            close(toChild[1]); close(fromChild[0])
            throw ServerProcessError.spawn("\(path): \(String(cString: strerror(rc)))")
        }
        pid = child
        stdinFD = toChild[1]
        stdoutFD = fromChild[0]
    }

    /// One line the child printed (without the newline); "" at EOF. Polls a non-blocking pipe, so
    /// it never holds one of Swift's few cooperative threads while the child works.
    public func readLine() async -> String {
        _ = fcntl(stdoutFD, F_SETFL, fcntl(stdoutFD, F_GETFL) | O_NONBLOCK)
        var line: [UInt8] = []
        var byte: UInt8 = 0
        while true {
            let n = read(stdoutFD, &byte, 1)
            if n == 1 {
                if byte == 10 { break }
                line.append(byte)
            } else if n == -1 && (errno == EAGAIN || errno == EINTR) {
                if Task.isCancelled { break }  // sleeps no longer wait: give up rather than spin
                try? await Task.sleep(for: .milliseconds(10))
            } else {
                break
            }
        }
        return String(decoding: line, as: UTF8.self)
    }

    /// Writes `text` to the child's stdin (EINTR-safe; the pipe is blocking, so keep it short).
    public func send(_ text: String) {
        var bytes = Array(text.utf8)[...]
        while !bytes.isEmpty {
            let n = bytes.withUnsafeBytes { write(stdinFD, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { return }
            bytes = bytes.dropFirst(n)
        }
    }

    /// Closes the child's stdin (its signal to finish) and waits for it to exit (polling).
    public func finish() async -> Int32 {
        close(stdinFD)
        let status = await TestCommand.wait(pid)
        close(stdoutFD)
        return status
    }

    /// Kills the child at once (a test that fails half-way); the zombie is reaped in the background
    /// (a detached task: it must not inherit a test's executor preference, whose thread may stop first).
    public func kill() {
        Glibc.kill(pid, SIGKILL)
        close(stdinFD)
        close(stdoutFD)
        let pid = self.pid
        Task.detached { _ = await TestCommand.wait(pid) }
    }
}
