import Glibc
import Synchronization

/// The processes using a private cluster, so that the last one to leave stops it — not the first.
///
/// Several `bigpeer` processes may share one `--data-dir` (README). Each `LocalPostgres` holds an
/// exclusive `flock` on a file of its own under `<data-dir>/instances/` for as long as it uses the
/// cluster. The kernel drops a flock when the descriptor's last holder exits, however it exits
/// (SIGKILL included), so a file whose lock can be taken belongs to a user that is gone, and is
/// removed. Starting (initdb, `pg_ctl start` or reusing a running server) and stopping (counting the
/// live users, `pg_ctl stop`) both run under `<data-dir>/cluster.lock`: an instance that decided to
/// reuse the running server has registered before any other instance can count users and stop it.
///
/// Every descriptor is opened close-on-exec: a `postgres` started by `pg_ctl` must not inherit one
/// and keep a registration (or the cluster lock) alive after we are gone.
struct ClusterUsers: Sendable {
    let directory: String
    let lockPath: String

    init(dataDirectory: String) {
        directory = dataDirectory + "/instances"
        lockPath = dataDirectory + "/cluster.lock"
    }

    /// Runs `body` holding the data directory's cluster lock. Blocks while another process starts
    /// or stops the cluster (initdb and `pg_ctl -w` take seconds; callers run off the event loops).
    func exclusively<R>(_ body: () throws -> R) throws -> R {
        let fd = try Self.open(lockPath)
        defer { close(fd) }  // also releases the lock
        try Self.lock(fd, wait: true, path: lockPath)
        return try body()
    }

    /// A registration for this user, held until `release()` (or deinit).
    func register() throws -> Registration {
        try LocalPostgres.makeDirectory(directory, mode: 0o700)
        var rng = SystemRandomNumberGenerator()
        let path = directory + "/\(getpid())-\(String(rng.next() as UInt64, radix: 36)).lock"
        let fd = try Self.open(path)
        do { try Self.lock(fd, wait: false, path: path) } catch {
            close(fd)
            throw error
        }
        return Registration(fd: fd, path: path)
    }

    /// How many registrations are held right now; removes those whose holders are gone. Call it
    /// inside `exclusively`, so nobody registers meanwhile.
    func liveUsers() -> Int {
        guard let dir = opendir(directory) else { return 0 }
        var names: [String] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            if name.hasSuffix(".lock") { names.append(name) }
        }
        closedir(dir)
        var live = 0
        for name in names {
            let path = directory + "/" + name
            let fd = Glibc.open(path, O_RDWR | O_CLOEXEC)
            guard fd >= 0 else { continue }  // removed meanwhile
            if flock(fd, LOCK_EX | LOCK_NB) == 0 {
                unlink(path)  // its holder exited without releasing (killed): nobody uses it
            } else {
                live += 1
            }
            close(fd)
        }
        return live
    }

    static func open(_ path: String) throws -> Int32 {
        let fd = Glibc.open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw PostgresError.localCluster("cannot open \(path): \(String(cString: strerror(errno)))") }
        return fd
    }

    static func lock(_ fd: Int32, wait: Bool, path: String) throws {
        while flock(fd, LOCK_EX | (wait ? 0 : LOCK_NB)) != 0 {
            if errno == EINTR { continue }
            throw PostgresError.localCluster("cannot lock \(path): \(String(cString: strerror(errno)))")
        }
    }

    /// One user's hold on the cluster: an open, flock-ed file under `instances/`.
    final class Registration: Sendable {
        private let fd: Mutex<Int32?>
        let path: String

        init(fd: Int32, path: String) {
            self.fd = Mutex(fd)
            self.path = path
        }

        /// Stops counting as a user (idempotent). Unlinked before the descriptor is closed, so no
        /// counter sees a file it could lock while we still meant to hold it.
        func release() {
            fd.withLock { fd in
                guard let open = fd else { return }
                unlink(path)
                close(open)
                fd = nil
            }
        }

        deinit { release() }
    }
}
