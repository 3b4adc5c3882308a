// Auth: API keys (hashed at rest, scoped per collection), bearer-token checks for the REST API,
// and the collections a DQL statement reads and writes. Schema: migrations/0003_api_keys.sql.
// Still to come here (docs/ARCHITECTURE.md): JWT, the auth webhook, per-document permission rules.
