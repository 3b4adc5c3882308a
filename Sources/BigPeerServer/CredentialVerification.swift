import Auth
import Logging

/// The verifiers of credentials other than API keys (`--jwks`, `--jwt-secret-file`,
/// `--auth-webhook`), started before the service and stopped with it.
struct CredentialVerifiers: Sendable {
    var tokens: TokenVerifier?
    var webhook: AuthWebhook?

    func shutdown() async {
        await tokens?.shutdown()
        await webhook?.shutdown()
    }
}

extension ServerConfiguration {
    /// The JWT verification and the authentication webhooks this configuration asks for (none
    /// with `--insecure-dev`, where nothing is checked).
    func startCredentialVerification(logger: Logger) async throws -> CredentialVerifiers {
        guard !insecureDevelopment else { return CredentialVerifiers() }
        let webhook = try authWebhook.map { try AuthWebhook($0) }
        do {
            return CredentialVerifiers(tokens: try await startTokenVerification(logger: logger), webhook: webhook)
        } catch {
            await webhook?.shutdown()
            throw error
        }
    }

    /// The JWT verification `jwt` (HS256 secret) and `jwks` (key set) ask for, keys loaded; nil
    /// when neither is configured (or `--insecure-dev`, where nothing is checked).
    ///
    /// A key-set file that cannot be read, is not a JWKS, or holds no usable key stops the start
    /// (the operator's mistake, to be seen at once). A URL that cannot be fetched does not: the
    /// identity provider may be down for a moment while BigPeer restarts, and API keys do not
    /// depend on it. The server starts, answers JWTs with 503 + `Retry-After` (sync: 4xxx "try
    /// again later") and retries the fetch in the background until it succeeds.
    func startTokenVerification(logger: Logger) async throws(JWKError) -> TokenVerifier? {
        guard !insecureDevelopment else { return nil }
        var keySet: JWKSVerifier?
        if let jwks {
            let source = try JWKSSource(jwks)
            let origin: String
            switch jwks.location {
            case .file(let path): origin = path
            case .url(let url): origin = url
            }
            do {
                try await source.load()
            } catch {
                guard case .url = jwks.location else {
                    await source.shutdown()
                    throw error
                }
                logger.error("the JWKS cannot be fetched; JWTs are answered with 503 until it can (retrying)",
                             metadata: ["jwks": "\(origin)", "error": "\(error)"])
                source.keepLoading()
            }
            if let loaded = source.keys {
                for skipped in loaded.skipped {
                    logger.warning("JWKS key left out", metadata: ["jwks": "\(origin)", "reason": "\(skipped)"])
                }
                if loaded.keys.isEmpty, case .file = jwks.location {
                    await source.shutdown()
                    throw JWKError(nil, "\(origin) holds no key BigPeer can verify with")
                }
                logger.notice("JWT verification keys loaded", metadata: ["jwks": "\(origin)", "keys": "\(loaded.keys.count)"])
            }
            keySet = JWKSVerifier(source: source, rules: jwtRules)
        }
        guard jwt != nil || keySet != nil else { return nil }
        return TokenVerifier(secret: jwt, jwks: keySet, maxCachedTokens: maxCachedTokens)
    }
}
