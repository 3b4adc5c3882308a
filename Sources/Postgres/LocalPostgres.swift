import Foundation
import Glibc
import Sockets

/// A private PostgreSQL cluster under a directory of ours, for development (`bigpeer serve` with no
/// `DATABASE_URL`) and for the test suite.
///
/// - Finds the installed server binaries (`BIGPEER_PG_BIN`, then Debian's `/usr/lib/postgresql/*/bin`,
///   then `PATH`) and says exactly what to install when they are missing.
/// - PostgreSQL refuses to run as root: when we are root, the cluster belongs to the `postgres`
///   user and every server command runs through `runuser`.
/// - Listens on a unix socket inside the cluster directory (trust, reachable only by the owner and
///   root: our own sessions, as the superuser) and on a loopback TCP port (scram-sha-256) for tools
///   on this host: analysts get the read-only role `bigpeer_analyst` (migrations/0009) with a
///   generated password kept in `<data-dir>/analyst-password` (`analystURL`, `enableAnalystLogin`);
///   the superuser's password is in `<data-dir>/postgres-password` and is printed nowhere.
/// - Several processes may use one data directory: if the cluster is already running it is reused,
///   and `stop()` stops it only when no other live process uses it (`ClusterUsers`).
public final class LocalPostgres: Sendable {
    public struct Options: Sendable {
        /// Trade durability for speed (fsync off): only for throwaway test clusters.
        public var ephemeral = false
        public var maxConnections = 200
        public var databaseName = "bigpeer"
        public init() {}
    }

    public let clusterDirectory: String
    public let socketDirectory: String
    public let port: Int
    /// The superuser's password (TCP logins; our own sessions use the socket).
    public let password: String
    /// The password `enableAnalystLogin` gives `bigpeer_analyst`.
    public let analystPassword: String
    public let databaseName: String
    /// True when this process started the server, false when it found it running.
    public let startedServer: Bool
    private let binDirectory: String
    private let runAs: String?
    private let users: ClusterUsers
    /// This process's hold on the cluster, released by `stop()` or when this object goes away.
    private let registration: ClusterUsers.Registration

    public static let superuser = "bigpeer"
    /// The read-only role for analysts, created by migrations/0009_analyst_role.sql.
    public static let analystRole = "bigpeer_analyst"

    private init(clusterDirectory: String, socketDirectory: String, port: Int, password: String, analystPassword: String,
                 databaseName: String, startedServer: Bool, binDirectory: String, runAs: String?,
                 users: ClusterUsers, registration: ClusterUsers.Registration) {
        self.clusterDirectory = clusterDirectory
        self.socketDirectory = socketDirectory
        self.port = port
        self.password = password
        self.analystPassword = analystPassword
        self.databaseName = databaseName
        self.startedServer = startedServer
        self.binDirectory = binDirectory
        self.runAs = runAs
        self.users = users
        self.registration = registration
    }

    /// Session parameters for our own connections (unix socket, no password needed).
    public func configuration(database: String? = nil) -> PostgresConfiguration {
        PostgresConfiguration(parameters: [
            .init("host", socketDirectory), .init("port", String(port)),
            .init("user", Self.superuser), .init("dbname", database ?? databaseName),
        ])
    }

    /// The superuser over loopback TCP with its password (tests; never printed).
    public func url(database: String? = nil) -> String {
        "postgresql://\(Self.superuser):\(Self.percentEncoded(password))@127.0.0.1:\(port)/\(database ?? databaseName)"
    }

    /// The URL for analysts' tools on this host (psql, BI): the read-only role over loopback TCP.
    /// Logs in once `enableAnalystLogin` has run.
    public func analystURL(database: String? = nil) -> String {
        "postgresql://\(Self.analystRole):\(Self.percentEncoded(analystPassword))@127.0.0.1:\(port)/\(database ?? databaseName)"
    }

    /// Lets `bigpeer_analyst` log in with `analystPassword` (run after migrations, which create
    /// the role; every start, so a changed password file takes effect). False when the role does
    /// not exist.
    public func enableAnalystLogin(loop: EventLoop) async throws -> Bool {
        let conn = try await PostgresConnection.connect(configuration(), on: loop)
        defer { Task { await conn.close() } }
        guard try await !conn.query("SELECT 1 FROM pg_roles WHERE rolname = \(Self.analystRole)").isEmpty else { return false }
        // ALTER ROLE takes no parameters: the password goes in as a literal, quotes doubled
        // (standard_conforming_strings makes backslashes plain characters).
        let literal = "'" + String(decoding: analystPassword.utf8.flatMap { $0 == UInt8(ascii: "'") ? [$0, $0] : [$0] }, as: UTF8.self) + "'"
        // Instances starting together would update the role's catalog row at once ("tuple
        // concurrently updated"): one at a time.
        try await conn.transaction { c in
            _ = try await c.query("SELECT pg_advisory_xact_lock(\(Self.analystLoginLock))")
            _ = try await c.query(PostgresQuery(unsafeSQL: "ALTER ROLE \(PostgresQuery.quoteIdentifier(Self.analystRole)) WITH LOGIN PASSWORD \(literal)"))
        }
        return true
    }

    /// `pg_advisory_xact_lock` key serialising `enableAnalystLogin` ("bigpeer" and 2).
    static let analystLoginLock: Int64 = 0x4269_6750_6565_7202

    // MARK: - Start

    /// Where a root-started cluster lives when the postgres user cannot reach `--data-dir`.
    static let rootFallbackClusters = "/var/lib/postgresql/bigpeer-clusters/"

    /// Creates the cluster on first use, starts it (or finds it running), and creates the database.
    public static func start(dataDirectory: String, options: Options = .init(), loop: EventLoop) async throws -> LocalPostgres {
        let bin = try findBinaries()
        let runAs: String? = geteuid() == 0 ? "postgres" : nil
        if let runAs, getpwnam(runAs) == nil {
            throw PostgresError.localCluster("running as root, but there is no '\(runAs)' user to own the database cluster (apt-get install postgresql creates it)")
        }
        let dataDir = absolute(dataDirectory)
        // Traversable (not listable) by the postgres user when we are root, so the cluster can live inside.
        try makeDirectory(dataDir, mode: runAs == nil ? 0o700 : 0o711)
        var cluster = dataDir + "/postgres"
        try makeDirectory(cluster, mode: 0o700, owner: runAs)
        if let runAs, !userCanWrite(runAs, cluster) {
            // e.g. a checkout under /root, which the postgres user cannot traverse.
            try? FileManager.default.removeItem(atPath: cluster)
            // Under the postgres user's own home, not /var/lib/bigpeer: that is the packaged
            // service's data directory (deploy/), owned by the bigpeer user.
            cluster = Self.rootFallbackClusters + String(stableHash(dataDir), radix: 16)
            try makeDirectory(cluster, mode: 0o700, owner: runAs)
        }
        let socketDir = cluster
        guard socketDir.utf8.count + 20 < 108 else {
            throw PostgresError.localCluster("the cluster path \(socketDir) is too long for a unix socket; use a shorter --data-dir")
        }

        // One process at a time creates, starts or stops the cluster (ClusterUsers); this one
        // registers as a user before the server is started or found running.
        let users = ClusterUsers(dataDirectory: dataDir)
        let pg = try users.exclusively { () throws -> LocalPostgres in
            let password = try readOrCreateSecret(dataDir + "/postgres-password")
            let analystPassword = try readOrCreateSecret(dataDir + "/analyst-password")
            if !FileManager.default.fileExists(atPath: cluster + "/PG_VERSION") {
                // Outside the cluster directory: initdb wants it empty.
                let pwfile = (cluster as NSString).deletingLastPathComponent + "/.initdb-pw-\(getpid())"
                try write(password + "\n", to: pwfile, mode: 0o600, owner: runAs)
                defer { unlink(pwfile) }
                var args = ["-D", cluster, "-U", superuser, "--auth-local=trust", "--auth-host=scram-sha-256",
                            "--pwfile=" + pwfile, "-E", "UTF8", "--locale=C.UTF-8"]
                if options.ephemeral { args.append("--no-sync") }
                try run(bin + "/initdb", args, as: runAs)
            }
            let registration = try users.register()
            let (port, started) = try startServer(bin: bin, cluster: cluster, socketDir: socketDir, dataDir: dataDir,
                                                  options: options, runAs: runAs)
            return LocalPostgres(clusterDirectory: cluster, socketDirectory: socketDir, port: port, password: password,
                                 analystPassword: analystPassword, databaseName: options.databaseName, startedServer: started,
                                 binDirectory: bin, runAs: runAs, users: users, registration: registration)
        }
        do {
            try await pg.createDatabaseIfMissing(options.databaseName, loop: loop)
        } catch {
            try? pg.stop()
            throw error
        }
        return pg
    }

    /// A generated password kept in `path` (0600), created on first use.
    static func readOrCreateSecret(_ path: String) throws -> String {
        if let existing = try? String(contentsOfFile: path, encoding: .utf8) {
            let secret = existing.trimmingCharacters(in: .whitespacesAndNewlines)
            guard !secret.isEmpty, !secret.utf8.contains(0) else {
                throw PostgresError.localCluster("\(path) holds no usable password; delete it to have a new one generated")
            }
            return secret
        }
        let secret = randomToken()
        try write(secret + "\n", to: path, mode: 0o600)
        return secret
    }

    /// `s` for the user-information part of a URL: ASCII letters, digits and `-._~` as they are,
    /// every other byte percent-encoded (RFC 3986 §2.1).
    static func percentEncoded(_ s: String) -> String {
        var out = ""
        for b in s.utf8 {
            switch b {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                out.unicodeScalars.append(Unicode.Scalar(b))
            default:
                out += "%" + (b < 16 ? "0" : "") + String(b, radix: 16, uppercase: true)
            }
        }
        return out
    }

    private static func startServer(bin: String, cluster: String, socketDir: String, dataDir: String,
                                    options: Options, runAs: String?) throws -> (Int, Bool) {
        if let running = runningPort(cluster), (try? run(bin + "/pg_ctl", ["-D", cluster, "status"], as: runAs)) != nil {
            return (running, false)
        }
        let portFile = dataDir + "/postgres-port"
        var port = (try? String(contentsOfFile: portFile, encoding: .utf8)).flatMap { Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) } ?? 0
        if port == 0 || !portIsFree(port) { port = try freeLoopbackPort() }
        try write("\(port)\n", to: portFile, mode: 0o644)
        var settings = [
            "port=\(port)", "listen_addresses=127.0.0.1", "unix_socket_directories=\(socketDir)",
            "max_connections=\(options.maxConnections)", "logging_collector=off",
        ]
        if options.ephemeral {
            settings += ["fsync=off", "synchronous_commit=off", "full_page_writes=off"]
        }
        let opts = settings.map { "-c \($0)" }.joined(separator: " ")
        try run(bin + "/pg_ctl", ["-D", cluster, "-l", cluster + "/server.log", "-w", "-t", "60", "-o", opts, "start"], as: runAs)
        return (port, true)
    }

    private func createDatabaseIfMissing(_ name: String, loop: EventLoop) async throws {
        let conn = try await PostgresConnection.connect(configuration(database: "postgres"), on: loop)
        defer { Task { await conn.close() } }
        let exists = try await conn.query("SELECT 1 FROM pg_database WHERE datname = \(name)")
        if exists.isEmpty {
            _ = try await conn.query("CREATE DATABASE \(identifier: name)")
        }
    }

    // MARK: - Stop

    /// Stops using the cluster, and stops the server (fast shutdown: open sessions are
    /// disconnected, data is safe) unless another live process still uses it. Blocks for as long
    /// as PostgreSQL takes to stop; calling it again only repeats that check.
    public func stop() throws {
        try users.exclusively {
            registration.release()
            guard Self.runningPort(clusterDirectory) != nil, users.liveUsers() == 0 else { return }
            try Self.run(binDirectory + "/pg_ctl", ["-D", clusterDirectory, "-m", "fast", "-w", "stop"], as: runAs)
        }
    }

    /// Restarts the server in place (tests use it to prove the pool recovers).
    public func restart() throws {
        try Self.run(binDirectory + "/pg_ctl", ["-D", clusterDirectory, "-m", "fast", "-w", "restart"], as: runAs)
    }

    /// Starts a background watchdog that stops the server and deletes the cluster when process `pid`
    /// exits, so a crashed or killed test run leaves nothing behind.
    public func removeWhenProcessExits(_ pid: Int32 = getpid(), alsoRemove extra: [String] = []) throws {
        let pgctl = (runAs.map { "/usr/sbin/runuser -u \($0) -- " } ?? "") + "'\(binDirectory)/pg_ctl'"
        let script = "while kill -0 \(pid) 2>/dev/null; do sleep 1; done; \(pgctl) -D '\(clusterDirectory)' -m immediate -w stop >/dev/null 2>&1; rm -rf '\(clusterDirectory)' \(extra.map { "'\($0)'" }.joined(separator: " "))"
        do { _ = try ChildProcess.spawn(["/bin/sh", "-c", script], outputPath: "/dev/null") } catch {
            throw PostgresError.localCluster(error.message)
        }
    }

    // MARK: - Helpers

    public static func findBinaries() throws -> String {
        let fm = FileManager.default
        func complete(_ dir: String) -> Bool {
            ["initdb", "pg_ctl", "postgres"].allSatisfy { fm.isExecutableFile(atPath: dir + "/" + $0) }
        }
        if let dir = ProcessInfo.processInfo.environment["BIGPEER_PG_BIN"], complete(dir) { return dir }
        let versions = ((try? fm.contentsOfDirectory(atPath: "/usr/lib/postgresql")) ?? []).compactMap(Int.init).sorted(by: >)
        for v in versions where complete("/usr/lib/postgresql/\(v)/bin") { return "/usr/lib/postgresql/\(v)/bin" }
        for dir in (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":").map(String.init) where complete(dir) {
            return dir
        }
        throw PostgresError.localCluster(
            "PostgreSQL server binaries (initdb, pg_ctl, postgres) were not found. Install them with "
                + "`apt-get install -y postgresql`, or set BIGPEER_PG_BIN to their directory, or pass --database-url / DATABASE_URL to use an existing server.")
    }

    @discardableResult
    static func run(_ executable: String, _ args: [String], as user: String?) throws -> String {
        let argv = (user.map { ["/usr/sbin/runuser", "-u", $0, "--"] } ?? []) + [executable] + args
        let result: (status: Int32, output: String)
        do { result = try ChildProcess.run(argv) } catch { throw PostgresError.localCluster(error.message) }
        guard result.status == 0 else {
            let name = executable.split(separator: "/").last.map(String.init) ?? executable
            throw PostgresError.localCluster("\(name) \(args.last ?? "") failed (exit \(result.status)): \(result.output.suffix(2000))")
        }
        return result.output
    }

    /// The port of a server already running on `cluster` (line 4 of postmaster.pid), if any.
    static func runningPort(_ cluster: String) -> Int? {
        guard let pid = try? String(contentsOfFile: cluster + "/postmaster.pid", encoding: .utf8) else { return nil }
        let lines = pid.split(separator: "\n", omittingEmptySubsequences: false)
        guard lines.count > 3, let port = Int(lines[3].trimmingCharacters(in: .whitespaces)),
              let pidNumber = Int32(lines[0].trimmingCharacters(in: .whitespaces)), kill(pidNumber, 0) == 0 || errno == EPERM
        else { return nil }
        return port
    }

    /// A TCP port on 127.0.0.1 that nothing listens on right now (the kernel picks it).
    public static func freeLoopbackPort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw PostgresError.localCluster("socket() failed: errno \(errno)") }
        defer { close(fd) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        addr.sin_port = 0
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        let ok = withUnsafeMutablePointer(to: &addr) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { sp in
                bind(fd, sp, len) == 0 && getsockname(fd, sp, &len) == 0
            }
        }
        guard ok else { throw PostgresError.localCluster("cannot find a free loopback port: errno \(errno)") }
        return Int(UInt16(bigEndian: addr.sin_port))
    }

    static func portIsFree(_ port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        addr.sin_port = UInt16(port).bigEndian
        return withUnsafePointer(to: &addr) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
    }

    static func userCanWrite(_ user: String, _ path: String) -> Bool {
        (try? run("/usr/bin/test", ["-w", path, "-a", "-x", path], as: user)) != nil
    }

    /// Creates `path` with `mode` (parents it has to create get 0755).
    static func makeDirectory(_ path: String, mode: Int, owner: String? = nil) throws {
        do {
            let parent = (path as NSString).deletingLastPathComponent
            try FileManager.default.createDirectory(atPath: parent, withIntermediateDirectories: true,
                                                    attributes: [.posixPermissions: 0o755])
            if !FileManager.default.fileExists(atPath: path) {
                try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false,
                                                        attributes: [.posixPermissions: mode])
            }
        } catch {
            throw PostgresError.localCluster("cannot create \(path): \(error.localizedDescription)")
        }
        if let owner, let pw = getpwnam(owner) {
            guard chown(path, pw.pointee.pw_uid, pw.pointee.pw_gid) == 0 else {
                throw PostgresError.localCluster("cannot give \(path) to \(owner): errno \(errno)")
            }
            chmod(path, mode_t(mode))
        }
    }

    static func write(_ text: String, to path: String, mode: Int, owner: String? = nil) throws {
        guard FileManager.default.createFile(atPath: path, contents: Data(text.utf8), attributes: [.posixPermissions: mode]) else {
            throw PostgresError.localCluster("cannot write \(path)")
        }
        if let owner, let pw = getpwnam(owner) { chown(path, pw.pointee.pw_uid, pw.pointee.pw_gid) }
    }

    static func absolute(_ path: String) -> String {
        let p = path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
        return (p as NSString).standardizingPath
    }

    static func randomToken() -> String {
        let alphabet = Array("abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789")
        var rng = SystemRandomNumberGenerator()
        return String((0..<24).map { _ in alphabet[Int(rng.next(upperBound: UInt64(alphabet.count)))] })
    }

    /// FNV-1a: stable across runs (Swift's `hashValue` is seeded per process).
    static func stableHash(_ s: String) -> UInt64 {
        var h: UInt64 = 0xcbf2_9ce4_8422_2325
        for b in s.utf8 { h = (h ^ UInt64(b)) &* 0x100_0000_01b3 }
        return h
    }
}
