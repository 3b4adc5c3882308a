import Auth
import HTTP

extension Authenticator {
    /// The caller of `request` (its `Authorization` headers), or why there is none.
    func authenticate(_ request: HTTPRequest) async -> Result<Principal, AuthError> {
        await authenticate(authorizationHeaders: request.headers.values("Authorization"))
    }
}
