import ArgumentParser
import Auth
import BigPeerServer
import Glibc

/// `bigpeer serve`'s abuse limits and audit log (docs/AUTH.md, "Abuse limits"). Each option falls
/// back to its environment variable, then to the default.
struct AbuseOptions: ParsableArguments {
    @Option(name: .customLong("rate-limit-address"), help: "Requests and sync handshakes per client address (IPv4 address, IPv6 /64), as RATE:BURST per second, or off (default: off; $BIGPEER_RATE_LIMIT_ADDRESS).")
    var perAddress: String?
    @Option(name: .customLong("rate-limit-credential"), help: "Requests and sync handshakes per API key or JWT subject, as RATE:BURST per second, or off (default: off; $BIGPEER_RATE_LIMIT_CREDENTIAL).")
    var perCredential: String?
    @Option(name: .customLong("time-limit-credential"), help: "Server time per API key or JWT subject, as RATE:BURST in seconds a second and seconds (e.g. 0.5:5: half of one core's time, five seconds at once), or off; REST requests over it get 429 (default: off; $BIGPEER_TIME_LIMIT_CREDENTIAL).")
    var serverTimePerCredential: String?
    @Option(name: .customLong("auth-failure-limit"), help: "Failed authentications per client address before it gets 429, as RATE:BURST (BURST failures, then RATE more per second), or off (default: 0.1:20; $BIGPEER_AUTH_FAILURE_LIMIT).")
    var failedAuthentication: String?
    @Option(name: .customLong("audit-log"), help: "Auth decisions written to the bigpeer.audit log: off, denials or all (default: denials; $BIGPEER_AUDIT_LOG).")
    var auditLog: String?

    func apply(to config: inout ServerConfiguration) throws {
        var limits = AbuseLimits()
        limits.perAddress = try Self.rate(perAddress, "BIGPEER_RATE_LIMIT_ADDRESS", option: "--rate-limit-address", default: nil)
        limits.perCredential = try Self.rate(perCredential, "BIGPEER_RATE_LIMIT_CREDENTIAL", option: "--rate-limit-credential", default: nil)
        limits.serverTimePerCredential = try Self.rate(serverTimePerCredential, "BIGPEER_TIME_LIMIT_CREDENTIAL",
                                                       option: "--time-limit-credential", default: nil)
        limits.failedAuthentication = try Self.rate(failedAuthentication, "BIGPEER_AUTH_FAILURE_LIMIT", option: "--auth-failure-limit",
                                                    default: AbuseLimits.defaultFailedAuthentication)
        config.abuseLimits = limits
        if let text = auditLog ?? Self.environment("BIGPEER_AUDIT_LOG") {
            guard let mode = AuditLogMode(rawValue: text) else { throw ValidationError("--audit-log must be off, denials or all") }
            config.auditLog = mode
        }
    }

    static func rate(_ given: String?, _ variable: String, option: String, default fallback: TokenBucketRate?) throws -> TokenBucketRate? {
        guard let text = given ?? environment(variable) else { return fallback }
        if text == "off" { return nil }
        guard let rate = TokenBucketRate(parsing: text) else {
            throw ValidationError("\(option) (or $\(variable)) must be RATE:BURST with RATE > 0 per second and BURST ≥ 1, or off")
        }
        return rate
    }

    static func environment(_ name: String) -> String? { getenv(name).map { String(cString: $0) } }
}
