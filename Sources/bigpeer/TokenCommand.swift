import ArgumentParser
import Sockets
import Auth
import Glibc
import Values

/// How JWTs are verified (REST and sync alike, docs/AUTH.md): the HS256 secret, from a file
/// (preferred: not visible in `ps` or the environment of child processes) or `$BIGPEER_JWT_SECRET`,
/// and the claims every token must satisfy. `serve --jwks` adds a key set for the other algorithms.
struct JWTOptions: ParsableArguments {
    @Option(name: .customLong("jwt-secret-file"), help: "File holding the HS256 secret (≥ 32 bytes) for JWTs (default: $BIGPEER_JWT_SECRET; neither this nor --jwks: JWTs are refused).")
    var secretFile: String?
    @Option(name: .customLong("jwt-issuer"), help: "Accept only JWTs whose iss is this.") var issuer: String?
    @Option(name: .customLong("jwt-audience"), help: "Accept only JWTs whose aud contains this.") var audience: String?
    @Option(name: .customLong("jwt-leeway"), help: "Seconds of clock skew tolerated on exp, nbf and iat (0...600).") var leewaySeconds: Int64 = 60

    func validate() throws {
        if !(0...600).contains(leewaySeconds) { throw ValidationError("--jwt-leeway must be 0...600 seconds") }
    }

    /// The claims every JWT must satisfy.
    var rules: JWTClaimRules { JWTClaimRules(issuer: issuer, audience: audience, leewaySeconds: leewaySeconds) }

    /// The HS256 verifier; nil when no secret is configured.
    func verifier() throws -> JWTVerifier? {
        let secret: [UInt8]
        if let secretFile {
            guard let bytes = Self.readFile(secretFile) else { throw ValidationError("cannot read --jwt-secret-file \(secretFile)") }
            // A trailing newline from `echo` or an editor is not part of the secret.
            secret = Array(bytes.reversed().drop { $0 == 10 || $0 == 13 }.reversed())
        } else if let env = getenv("BIGPEER_JWT_SECRET") {
            secret = Array(String(cString: env).utf8)
        } else {
            return nil
        }
        var verifier = try JWTVerifier(secret: secret, issuer: issuer, audience: audience)
        verifier.leewaySeconds = leewaySeconds
        return verifier
    }

    static func readFile(_ path: String) -> [UInt8]? { FileBytes.read(path) }
}

/// `bigpeer token`: mints an HS256 JWT with the configured secret (for scripts, tests and operators
/// who hand tokens to devices; production deployments usually mint them in their own backend).
struct TokenCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "token",
        abstract: "Print an HS256 JWT for REST clients and sync peers, signed with the server's JWT secret.")

    @OptionGroup var jwt: JWTOptions
    @Option(help: "Subject (who the token is for).") var subject: String?
    @Option(help: "Collections the peer may read: * or a comma-separated list.") var read = "*"
    @Option(help: "Collections the peer may write: * or a comma-separated list (empty: none).") var write = ""
    @Option(name: .customLong("ttl"), help: "Seconds until the token expires.") var ttlSeconds: Int64 = 3600
    @Flag(name: .customLong("read-attachments"),
          help: "The token may download any attachment by id (the claim \"attachments\": \"read\"; docs/AUTH.md, \"Attachments\").")
    var readAttachments = false

    func run() throws {
        guard ttlSeconds > 0, ttlSeconds <= 366 * 86_400 else { throw ValidationError("--ttl must be 1...31622400 seconds") }
        guard let verifier = try jwt.verifier() else {
            throw ValidationError("no JWT secret: pass --jwt-secret-file or set BIGPEER_JWT_SECRET")
        }
        let now = JWTVerifier.wallClockSeconds()
        var claims: [String: Value] = ["iat": .int(now), "exp": .int(now + ttlSeconds),
                                       "read": Self.scope(read), "write": Self.scope(write)]
        if let subject { claims["sub"] = .string(subject) }
        if readAttachments { claims["attachments"] = "read" }
        if let issuer = jwt.issuer { claims["iss"] = .string(issuer) }
        if let audience = jwt.audience { claims["aud"] = .string(audience) }
        print(verifier.sign(claims: claims))
    }

    static func scope(_ text: String) -> Value {
        if text == "*" { return .string("*") }
        return .array(text.split(separator: ",").map { .string(String($0)) })
    }
}
