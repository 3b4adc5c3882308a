import Auth
import DQL
import HTTP

/// Whom a REST request's heavy in-memory work is queued for (`InMemoryEvaluation.tenant`): the
/// evaluation threads take turns between tenants, so one client's pile of heavy statements delays
/// another client's statement by one statement, not by the pile (docs/ARCHITECTURE.md, "In-memory
/// evaluation").
///
/// The tenant is the credential the request names (`key:<id>`, `jwt:<sub>`, `webhook:…`, as the
/// abuse limits count them), else the client's address (IPv4, IPv6 /64). The name is read before
/// the route authenticates, but a route evaluates nothing for a request whose credential fails,
/// so a client cannot take another's turn by naming its credential.
enum EvaluationTenant {
    /// The request's tenant, named only if a stage moves off the loop (`InMemoryEvaluation.Tenant`):
    /// only the headers are kept for it, not the body.
    static func tenant(_ request: HTTPRequest) -> InMemoryEvaluation.Tenant {
        let authorization = request.headers["Authorization"], provider = request.headers["X-Auth-Provider"]
        let address = request.remoteAddress
        return InMemoryEvaluation.Tenant {
            if let claimed = ClaimedIdentity.of(authorization: authorization, provider: provider) { return claimed }
            return address.flatMap(ClientAddressKey.init(remote:)).map { "address:\($0)" }
        }
    }

    /// `handler`, run with its request's tenant. Sync handlers run inline on the loop and never
    /// wait for the evaluation threads: they are left as they are.
    static func tagging(_ handler: HTTPHandler) -> HTTPHandler {
        switch handler {
        case .sync:
            return handler
        case .async(let h):
            return .async { request in try await InMemoryEvaluation.$tenant.withValue(tenant(request)) { try await h(request) } }
        case .streaming(let maxBodyBytes, let h):
            return .streaming(maxBodyBytes: maxBodyBytes) { request, body in
                try await InMemoryEvaluation.$tenant.withValue(tenant(request)) { try await h(request, body) }
            }
        }
    }
}
