import Auth
import HTTP

extension Authenticator {
    /// The caller of `request` (its `Authorization` headers, and `X-Auth-Provider` for a token of
    /// an authentication webhook's provider), or why there is none.
    func authenticate(_ request: HTTPRequest) async -> Result<Principal, AuthError> {
        await authenticate(authorizationHeaders: request.headers.values("Authorization"), providerHeaders: request.headers.values("X-Auth-Provider"))
    }
}
