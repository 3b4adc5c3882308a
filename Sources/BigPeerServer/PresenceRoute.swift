// `GET /api/v4/presence`: the presence graph this instance knows (docs/LOCAL-NODE.md, "Presence";
// PROTOCOL.md §4.14), in Ditto's shape. Like `/api/v4/upstream` it shows server-wide state (every
// connected peer, its metadata), so it needs a key that may read every collection.

import Auth
import Glibc
import HTTP
import Logging
import SyncProtocol
import Values

struct PresenceRoute {
    let hub: PresenceHub
    let auth: Authenticator
    let logger: Logger

    static let path = "/api/v4/presence"

    func register(on router: inout HTTPRouter) {
        let hub = self.hub, auth = self.auth, logger = self.logger
        router.get(Self.path, .respond { request in
            if let refused = await Self.refuseUnlessReadAll(request, auth: auth, logger: logger) { return refused }
            return .json(JSON.serialize(hub.graph.json))
        })
    }

    /// The error answer for a request whose key may not read every collection (server-wide state:
    /// presence, upstream status); nil when it may.
    static func refuseUnlessReadAll(_ request: HTTPRequest, auth: Authenticator, logger: Logger) async -> HTTPResponse? {
        if case .failure(let refused) = await readAllPrincipal(request, auth: auth, logger: logger) { return refused.response }
        return nil
    }

    /// The caller, if it may read every collection; else the 401/403 response.
    static func readAllPrincipal(_ request: HTTPRequest, auth: Authenticator, logger: Logger) async -> Result<Principal, RefusalResponse> {
        switch await auth.authenticate(request) {
        case .success(let principal):
            guard let denied = principal.authorize(AccessRequirement(readAll: true)) else { return .success(principal) }
            return .failure(RefusalResponse(APIError(denied).response(to: request, logger: logger, negotiated: false)))
        case .failure(let e):
            return .failure(RefusalResponse(APIError(e).response(to: request, logger: logger, negotiated: false)))
        }
    }

    /// An HTTP response as a `Result` failure.
    struct RefusalResponse: Error {
        var response: HTTPResponse
        init(_ response: HTTPResponse) { self.response = response }
    }
}
