import HTTP
import Postgres

/// `GET /healthz`: the process is alive (answered on the loop, no task, no database).
/// `GET /readyz`: the database answers `SELECT 1` within two seconds; otherwise 503 with
/// `Retry-After`, so a load balancer stops sending traffic to an instance that cannot serve it.
struct HealthRoutes {
    let pool: PostgresPool

    static let okBody = Array(#"{"status":"ok"}"#.utf8)

    func register(on router: inout HTTPRouter) {
        router.get("/healthz", .immediate { _ in .json(Self.okBody) })
        let pool = self.pool
        router.get("/readyz", .respond { _ in
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
