import Foundation
import HTTP

/// `GET /api/v4/openapi.yaml`: the API description, read once at start from the repository's (or
/// package's) `openapi.yaml`, found the way `migrations/` is: `BIGPEER_OPENAPI`, then beside the
/// migrations directory (a source checkout keeps both at its root), then the packaged path.
/// Read from the file rather than embedded so the one file CI checks with schemathesis is the one
/// served; a server started without it answers 404 and logs a warning at start.
struct OpenAPIRoute {
    static let packaged = "/usr/share/bigpeer/openapi.yaml"

    let document: [UInt8]?

    static func locate(migrationsDirectory: String?) -> String? {
        var candidates: [String] = []
        if let env = ProcessInfo.processInfo.environment["BIGPEER_OPENAPI"] { candidates.append(env) }
        if let dir = try? MigrationsDirectory.locate(explicit: migrationsDirectory) {
            candidates.append(URL(fileURLWithPath: dir).deletingLastPathComponent().appendingPathComponent("openapi.yaml").path)
        }
        candidates.append(FileManager.default.currentDirectoryPath + "/openapi.yaml")
        candidates.append(packaged)
        return candidates.first { FileManager.default.fileExists(atPath: $0) }
    }

    static func load(migrationsDirectory: String?) -> OpenAPIRoute {
        guard let path = locate(migrationsDirectory: migrationsDirectory), let data = FileManager.default.contents(atPath: path) else {
            return OpenAPIRoute(document: nil)
        }
        return OpenAPIRoute(document: [UInt8](data))
    }

    func register(on router: inout HTTPRouter) {
        guard let document else {
            router.get("/api/v4/openapi.yaml", .immediate { r in
                .error(.notFound, message: "openapi.yaml is not installed with this server", requestID: r.requestID)
            })
            return
        }
        // RFC 9512: application/yaml.
        router.get("/api/v4/openapi.yaml", .immediate { _ in HTTPResponse(contentType: "application/yaml", body: document) })
    }
}
