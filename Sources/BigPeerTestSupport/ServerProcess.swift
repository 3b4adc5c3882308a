import Foundation
import Glibc
import Postgres

/// A `bigpeer serve` child process for tests that must kill a real server (SIGKILL) and restart it.
public final class ServerProcess: Sendable {
    public let pid: pid_t
    public let port: Int
    /// The address it listens on (and answers /healthz on).
    public let host: String
    /// Where its standard output and error go.
    public let logPath: String

    /// Starts the built `bigpeer` binary (from `swift build`) against `databaseURL` on a free port and
    /// waits until /healthz answers.
    public static func start(databaseURL: String, port: Int? = nil, extraArguments: [String] = []) async throws -> ServerProcess {
        try await start(arguments: ["--database-url", databaseURL] + extraArguments, port: port)
    }

    /// Starts `[launcher…] binary serve --port P --threads 1 arguments…` (default: the built binary) in
    /// `workingDirectory` (default: ours) and waits up to `readyTimeout` until /healthz answers.
    /// `host` is where it listens (`--host`, default loopback) and where /healthz is asked;
    /// `launcher` runs it (e.g. `ip netns exec NAME`, for a server in a network namespace).
    public static func start(binary: String? = nil, arguments: [String], port: Int? = nil, host: String = "127.0.0.1",
                             launcher: [String] = [], workingDirectory: String? = nil,
                             environment: [String: String]? = nil, readyTimeout: Duration = .seconds(20)) async throws -> ServerProcess {
        let binary = try binary ?? locateBinary()
        let chosen = try port ?? LocalPostgres.freeLoopbackPort()
        let log = NSTemporaryDirectory() + "bigpeer-serve-\(chosen)-\(UInt32.random(in: 0...UInt32.max)).log"
        var argv = launcher + [binary, "serve", "--port", String(chosen), "--host", host, "--threads", "1"] + arguments
        if let workingDirectory {
            // The shell changes directory, then becomes the server (same pid).
            argv = ["/bin/sh", "-c", "cd \"$0\" && exec \"$@\"", workingDirectory] + argv
        }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, log, O_WRONLY | O_CREAT | O_APPEND, 0o600)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        let cargs: [UnsafeMutablePointer<CChar>?] = argv.map { strdup($0) } + [nil]
        defer { cargs.forEach { free($0) } }
        let envp: [UnsafeMutablePointer<CChar>?]? = environment.map { env in env.map { strdup("\($0.key)=\($0.value)") } + [nil] }
        defer { envp?.forEach { free($0) } }
        var pid: pid_t = 0
        let rc = envp.map { posix_spawn(&pid, argv[0], &actions, nil, cargs, $0) } ?? posix_spawn(&pid, argv[0], &actions, nil, cargs, environ)
        guard rc == 0 else { throw ServerProcessError.spawn(String(cString: strerror(rc))) }
        let server = ServerProcess(pid: pid, port: chosen, host: host, logPath: log)
        let deadline = ContinuousClock.now + readyTimeout
        while ContinuousClock.now < deadline {
            if await server.answersHealth() { return server }
            var status: Int32 = 0
            if waitpid(pid, &status, WNOHANG) == pid {
                throw ServerProcessError.exited(server.log())
            }
            try await Task.sleep(for: .milliseconds(50))
        }
        await server.kill()
        throw ServerProcessError.notReady(server.log())
    }

    /// Everything it has printed so far.
    public func log() -> String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    private init(pid: pid_t, port: Int, host: String, logPath: String) {
        self.pid = pid
        self.port = port
        self.host = host
        self.logPath = logPath
    }

    /// Set once the process was reaped: its pid may then belong to another process, which a
    /// second `kill` must not signal.
    private let reaped = MutexBox(false)

    /// SIGKILL and reap: no graceful shutdown, exactly like a crash. Reaps by polling
    /// (`TestCommand.wait`), so no cooperative thread sits in `waitpid` meanwhile.
    public func kill() async { await signal(SIGKILL) }

    /// SIGTERM and wait for a clean exit (up to the server's shutdown grace), polling so no
    /// cooperative thread is held meanwhile.
    public func terminate() async { await signal(SIGTERM) }

    private func signal(_ signal: Int32) async {
        guard !reaped.withLock({ $0 }) else { return }
        _ = Glibc.kill(pid, signal)
        _ = await TestCommand.wait(pid)
        reaped.withLock { $0 = true }
    }

    /// One GET /healthz; false unless it answers 200 within a second. The connect is blocking
    /// (loopback: answered or refused at once); the answer is awaited without holding a
    /// cooperative thread (`DescriptorWait`), so a server that accepted but does not answer
    /// only costs this probe its second.
    func answersHealth() async -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr(host)
        addr.sin_port = UInt16(port).bigEndian
        let ok = withUnsafePointer(to: &addr) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
        guard ok else { return false }
        let req = Array("GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".utf8)
        guard (try? await DescriptorWait.sendAll(fd, req, stallTimeout: .seconds(1))) == true else { return false }
        var got: [UInt8] = []
        let deadline = ContinuousClock.now + .seconds(1)
        while got.count < 12 {
            let left = deadline - ContinuousClock.now
            guard left > .zero, case .data(let bytes)? = try? await DescriptorWait.receive(fd, timeout: left) else { break }
            got += bytes
        }
        return String(decoding: got, as: UTF8.self).hasPrefix("HTTP/1.1 200")
    }

    /// The `bigpeer` binary built next to the running test bundle (any scratch path), else the
    /// default `.build/debug` or `.build/release` of the current directory.
    public static func locateBinary() throws -> String {
        var candidates: [String] = []
        var exe = [CChar](repeating: 0, count: 4096)
        let n = readlink("/proc/self/exe", &exe, exe.count - 1)
        if n > 0 {
            var dir = String(decoding: exe[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
            // …/debug/BigPeerPackageTests.xctest (a file on Linux): bigpeer is in the same folder.
            while let slash = dir.lastIndex(of: "/"), dir != "/" {
                dir = String(dir[..<slash])
                candidates.append(dir + "/bigpeer")
                if dir.hasSuffix("/debug") || dir.hasSuffix("/release") { break }
            }
        }
        let cwd = FileManager.default.currentDirectoryPath
        candidates += [cwd + "/.build/debug/bigpeer", cwd + "/.build/release/bigpeer"]
        for candidate in candidates where FileManager.default.isExecutableFile(atPath: candidate) {
            return candidate
        }
        throw ServerProcessError.noBinary
    }
}

public enum ServerProcessError: Error {
    case spawn(String), exited(String), notReady(String), noBinary
}

extension TestDatabase {
    /// A libpq URL for this database (unix socket), for child processes.
    public var url: String {
        let host = configuration["host"] ?? "127.0.0.1"
        let port = configuration["port"] ?? "5432"
        let user = configuration["user"] ?? "postgres"
        let encodedHost = host.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? host
        return "postgresql://\(user)@/\(name)?host=\(encodedHost)&port=\(port)"
    }
}
