import HTTP
import Postgres
import Synchronization

/// `GET /healthz`: the process is alive (answered on the loop, no task, no database).
/// `GET /readyz`: the database answers `SELECT 1` within two seconds; otherwise 503 with
/// `Retry-After`, so a load balancer stops sending traffic to an instance that cannot serve it.
/// From the moment a drain starts (SIGTERM) it is 503 `draining`, whatever the database says.
struct HealthRoutes {
    let pool: PostgresPool
    let drain: DrainFlag

    static let okBody = Array(#"{"status":"ok"}"#.utf8)
    static let drainingBody = Array(#"{"status":"draining","reason":"the server is shutting down"}"#.utf8)

    func register(on router: inout HTTPRouter) {
        router.get("/healthz", .immediate { _ in .json(Self.okBody) })
        let pool = self.pool, drain = self.drain
        router.get("/readyz", .respond { _ in
            if drain.isDraining {
                var r = HTTPResponse.json(Self.drainingBody, status: .serviceUnavailable)
                r.headers.add("Retry-After", "5")
                return r
            }
            do {
                try await withThrowingTaskGroup(of: Void.self) { g in
                    g.addTask { _ = try await pool.query("SELECT 1") }
                    g.addTask {
                        try await Task.sleep(for: .seconds(2))
                        throw PostgresError.connectionFailed("readiness check timed out")
                    }
                    try await g.next()
                    g.cancelAll()
                }
                return .json(Self.okBody)
            } catch {
                var r = HTTPResponse.json(Array(#"{"status":"unavailable","reason":"database unreachable"}"#.utf8), status: .serviceUnavailable)
                r.headers.add("Retry-After", "5")
                return r
            }
        })
    }
}

/// Set once when the server starts to drain; read by `/readyz` on any loop.
final class DrainFlag: Sendable {
    private let draining = Atomic<Bool>(false)
    var isDraining: Bool { draining.load(ordering: .relaxed) }
    func start() { draining.store(true, ordering: .relaxed) }
}
