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

    /// Runs `path args` to completion. `stdin` is fed from a temporary file when given.
    public static func run(_ path: String, _ args: [String], environment: [String: String]? = nil,
                           stdin: [UInt8]? = nil) throws -> Output {
        let base = NSTemporaryDirectory() + "bp-cmd-\(getpid())-\(UInt64.random(in: 0...UInt64.max))"
        let (outPath, errPath, inPath) = (base + ".out", base + ".err", base + ".in")
        defer { unlink(outPath); unlink(errPath); unlink(inPath) }
        if let stdin { FileManager.default.createFile(atPath: inPath, contents: Data(stdin)) }
        let pid = try spawn(path, args, environment: environment, stdinPath: stdin == nil ? "/dev/null" : inPath,
                            stdoutPath: outPath, stderrPath: errPath)
        let status = wait(pid)
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

    /// Waits for `pid`; returns its exit status (128 + signal when killed).
    public static func wait(_ pid: pid_t) -> Int32 {
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
        return (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
    }
}
