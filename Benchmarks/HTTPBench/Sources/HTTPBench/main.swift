// Usage: HTTPBench [port] [threads] [reuseport|acceptor] [tls-cert tls-key] [noyield]
// Serves GET /healthz (sync, "ok") and POST /echo (JSON echo) until killed.
import Glibc
import HTTP
import Logging

let args = CommandLine.arguments
var config = HTTPServerConfiguration()
config.host = "127.0.0.1"
config.port = args.count > 1 ? Int(args[1]) ?? 8080 : 8080
config.threads = args.count > 2 ? Int(args[2]) ?? 2 : 2
config.acceptStrategy = args.count > 3 && args[3] == "acceptor" ? .singleAcceptor : .reusePort
config.loopsYieldAfterEachBatch = !args.contains("noyield")
config.maxConnections = 20_000
if args.count > 5 { config.tls = .init(certificatePath: args[4], privateKeyPath: args[5]) }

var router = HTTPRouter()
router.get("/healthz", .immediate { _ in .text("ok") })
router.post("/echo", .immediate { req in .json(req.body) })
router.post("/echo-async", .respond { req in .json(req.body) })

var logger = Logger(label: "httpbench")
logger.logLevel = .notice
signal(SIGPIPE, SIG_IGN)
let server = try HTTPServer(configuration: config, router: router, logger: logger)
try await server.start()
let line = "listening on \(server.localPort ?? 0)\n"
_ = line.withCString { write(1, $0, strlen($0)) }
while true { try await Task.sleep(for: .seconds(3600)) }
