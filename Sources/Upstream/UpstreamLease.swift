// One replicator per upstream per database (docs/LOCAL-NODE.md, "Several instances"). Several
// BigPeer instances on one node database, each started with the same `--upstream`, would each
// upload the same changes and download the same documents: safe (both are idempotent) but
// redundant. The instance that holds a PostgreSQL session-level advisory lock, named after the
// upstream URL, replicates; the others stand by and try again every few seconds.
//
// The lock lives as long as the session that took it, so it goes with a crashed process (its
// socket closes) or a restarted database. The holder asks its session every `probeInterval`
// whether it is still there (an answer later than `probeTimeout` counts as lost: the session is
// closed, which also releases the lock on the server if it was still held) and stops
// replicating when it is not. Between the loss and the probe noticing it another instance may
// already have started: for that moment two replicate, which is safe.
//
// Runs as one task; `onChange` is called from it (the replicator hops to its own loop).

import Logging
import Postgres
import Sockets
import Synchronization

final class UpstreamLease: Sendable {
    struct Timing: Sendable {
        var probeInterval: Duration
        var probeTimeout: Duration = .seconds(10)
        var retryInterval: Duration
    }

    /// The advisory lock's first key (the two-key form, which never meets a one-bigint key): "bpup".
    static let lockClass: Int32 = 0x6270_7570

    private let configuration: PostgresConfiguration
    private let upstream: String
    private let loop: EventLoop
    private let timing: Timing
    private let logger: Logger
    private let task = Mutex<Task<Void, Never>?>(nil)

    /// `upstream` names the lock (the upstream's key in `bigpeer_upstream`: its URL without user
    /// information, or `lan:<pk>` for a node found on the LAN).
    init(configuration: PostgresConfiguration, upstream: String, loop: EventLoop, timing: Timing, logger: Logger) {
        self.configuration = configuration
        self.upstream = upstream
        self.loop = loop
        self.timing = timing
        self.logger = logger
    }

    /// Starts trying; `onChange(true)` once the lock is held, `onChange(false, why)` when it is not
    /// (another instance holds it, or the session that held it is gone).
    func start(onChange: @escaping @Sendable (_ held: Bool, _ why: String) -> Void) {
        let body = Task { [self] in await run(onChange) }
        task.withLock { $0 = body }
    }

    /// Stops trying and releases the lock (its session ends).
    func stop() async {
        guard let body = task.withLock({ $0 }) else { return }
        body.cancel()
        await body.value
    }

    private func run(_ onChange: @escaping @Sendable (Bool, String) -> Void) async {
        var session: PostgresConnection?
        var holding = false
        var toldStandby = false
        while !Task.isCancelled {
            do {
                let conn: PostgresConnection
                if let open = session { conn = open } else { conn = try await open(); session = conn }
                if holding {
                    try await probe(conn)
                } else if try await tryLock(conn) {
                    holding = true
                    toldStandby = false
                    onChange(true, "this instance holds the replication lock")
                } else if !toldStandby {
                    toldStandby = true
                    onChange(false, "another instance on this database replicates with this upstream (it holds the replication lock)")
                }
            } catch {
                let why = "the database session holding the replication lock failed: \(error)"
                if holding {
                    holding = false
                    onChange(false, why)
                } else if !toldStandby {
                    toldStandby = true
                    onChange(false, "cannot take the replication lock: \(error)")
                }
                await session?.close()
                session = nil
            }
            try? await Task.sleep(for: holding ? timing.probeInterval : timing.retryInterval)
        }
        await session?.close()  // ends the session: the lock goes with it
    }

    private func open() async throws -> PostgresConnection {
        let conn = try await PostgresConnection.connect(configuration, on: loop)
        // Over TCP, a peer that vanished without closing (a dead host) is found in about 25 s
        // instead of the system's default of two hours, so another instance can take over.
        // (Ignored on a Unix socket, where a dead process closes its end at once.)
        _ = try await conn.simpleQuery(unsafeSQL: "SET tcp_keepalives_idle = 10; SET tcp_keepalives_interval = 5; SET tcp_keepalives_count = 3")
        return conn
    }

    private func tryLock(_ conn: PostgresConnection) async throws -> Bool {
        let result = try await conn.query("SELECT pg_try_advisory_lock(\(Self.lockClass), hashtext(\(upstream)))")
        return try result[0].decode(0, as: Bool.self)
    }

    /// Throws if the session does not answer within `probeTimeout` (it is then closed).
    private func probe(_ conn: PostgresConnection) async throws {
        let watchdog = Task { [timing] in
            try await Task.sleep(for: timing.probeTimeout)
            await conn.close()  // fails the probe below with `.shutDown`
        }
        defer { watchdog.cancel() }
        _ = try await conn.query("SELECT 1")
    }
}
