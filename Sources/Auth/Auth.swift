// Auth: API keys (hashed at rest, scoped per collection), bearer-token checks for the REST API,
// and the collections a DQL statement reads and writes. Schema: migrations/0003_api_keys.sql.
// JWT verification (HS256 secret; RS256/ES256/EdDSA from a JWKS). Still to come here
// (docs/ARCHITECTURE.md): the auth webhook, per-document permission rules.
