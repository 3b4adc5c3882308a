// Usage: HummingbirdHello [port]. GET /healthz -> "ok"; POST /echo -> the request body.
import Hummingbird
import Logging

let port = CommandLine.arguments.count > 1 ? Int(CommandLine.arguments[1]) ?? 8080 : 8080
let router = Router()
router.get("/healthz") { _, _ in "ok" }
router.post("/echo") { request, _ -> Response in
    let body = try await request.body.collect(upTo: 1 << 20)
    return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: body))
}
var logger = Logger(label: "hb")
logger.logLevel = .warning
let app = Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: port)), logger: logger)
try await app.runService()
