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
            switch await auth.authenticate(request) {
            case .success(let principal):
                if let denied = principal.authorize(AccessRequirement(readAll: true)) { return APIError(denied).response(to: request, logger: logger, negotiated: false) }
            case .failure(let e):
                return APIError(e).response(to: request, logger: logger, negotiated: false)
            }
            return .json(JSON.serialize(hub.graph.json))
        })
    }

    /// The server's device name in presence: the host's name.
    static func hostName() -> String {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count - 1) == 0 else { return "bigpeer" }
        let name = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return name.isEmpty ? "bigpeer" : name
    }
}
