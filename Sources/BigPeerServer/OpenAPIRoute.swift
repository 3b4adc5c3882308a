import Foundation
import HTTP

/// `GET /api/v4/openapi.yaml`: the API description. The one built into the binary
/// (`EmbeddedResources.openAPI`, generated from the repository's `openapi.yaml`, which
/// EmbeddedResourcesTests keeps byte-identical to it, so the file CI checks with schemathesis is
/// the one served), unless `BIGPEER_OPENAPI` names a file to serve instead (editing the spec
/// without rebuilding). Nothing is searched for on disk.
struct OpenAPIRoute {
    static let environmentVariable = "BIGPEER_OPENAPI"

    let document: [UInt8]

    /// The document to serve; throws when `BIGPEER_OPENAPI` names a file that cannot be read (a
    /// typo should stop the start, not quietly serve something else).
    static func load() throws -> OpenAPIRoute {
        guard let path = ProcessInfo.processInfo.environment[environmentVariable], !path.isEmpty else {
            return OpenAPIRoute(document: Array(EmbeddedResources.openAPI.utf8))
        }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw OpenAPIFileError(message: "\(environmentVariable)=\(path): cannot read the file")
        }
        return OpenAPIRoute(document: [UInt8](data))
    }

    func register(on router: inout HTTPRouter) {
        let document = self.document
        // RFC 9512: application/yaml.
        router.get("/api/v4/openapi.yaml", .immediate { _ in HTTPResponse(contentType: "application/yaml", body: document) })
    }
}

struct OpenAPIFileError: Error, CustomStringConvertible {
    let message: String
    var description: String { message }
}
