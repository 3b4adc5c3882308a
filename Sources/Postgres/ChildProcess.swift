import Glibc

/// Runs helper programs (initdb, pg_ctl) with posix_spawn.
///
/// Not Foundation's `Process`: its `waitUntilExit` depends on a run loop and was seen to hang when
/// called from Swift concurrency's cooperative threads. Output goes to a file, never a pipe:
/// `pg_ctl start` leaves a server running that would inherit a pipe and hold it open.
enum ChildProcess {
    struct Failure: Error {
        var message: String
    }

    /// Spawns `argv[0]` with `argv`, stdin from /dev/null and stdout+stderr appended to `outputPath`.
    static func spawn(_ argv: [String], outputPath: String) throws(Failure) -> pid_t {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, outputPath, O_WRONLY | O_CREAT | O_APPEND, 0o600)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        let cargs: [UnsafeMutablePointer<CChar>?] = argv.map { strdup($0) } + [nil]
        defer { cargs.forEach { free($0) } }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, argv[0], &actions, nil, cargs, environ)
        guard rc == 0 else { throw Failure(message: "cannot run \(argv[0]): \(String(cString: strerror(rc)))") }
        return pid
    }

    /// Runs to completion; returns the exit status and everything it printed.
    static func run(_ argv: [String]) throws(Failure) -> (status: Int32, output: String) {
        let outPath = "/tmp/bigpeer-cmd-\(getpid())-\(UInt32.random(in: 0...UInt32.max)).log"
        defer { unlink(outPath) }
        let pid = try spawn(argv, outputPath: outPath)
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1 {
            if errno != EINTR { throw Failure(message: "waitpid failed: errno \(errno)") }
        }
        let exit: Int32 = (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
        return (exit, readFile(outPath) ?? "")
    }

    static func readFile(_ path: String) -> String? {
        guard let f = fopen(path, "r") else { return nil }
        defer { fclose(f) }
        var bytes: [UInt8] = []
        var buf = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = fread(&buf, 1, buf.count, f)
            if n <= 0 { break }
            bytes.append(contentsOf: buf[0..<n])
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
