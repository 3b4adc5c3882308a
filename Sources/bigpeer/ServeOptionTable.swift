import ConfigFile

/// What the configuration file and the `BIGPEER_*` variables need to know about each option of
/// `bigpeer serve` beyond its declaration (`OptionRow`). Name, default and help come from the
/// declaration itself (see `CommandOptions`), so `--help`, the file, the environment, `config print` and the reference in
/// docs/OPERATIONS.md describe the same options; ConfigFileTests fails when a row is missing or
/// names an option `serve` does not have.
enum ServeOptionTable {
    static let rows: [String: OptionRow] = [
        // Listening and threads.
        "host": .text, "port": .integer, "threads": .integer, "no-loop-yield": .flag,
        "tls-cert": .text, "tls-key": .text,
        // Database.
        "database-url": OptionRow(kind: .text, secrecy: .url, olderEnvironment: ["DATABASE_URL"]),
        "data-dir": .text,
        "migrations-dir": OptionRow(kind: .text, olderEnvironment: ["BIGPEER_MIGRATIONS"]),
        "db-connections": .integer, "read-cache-mb": .integer, "maintenance-interval": .integer, "statement-timeout": .integer,
        // Limits.
        "max-body-bytes": .integer, "max-buffered-request-bytes": .integer, "max-buffered-result-bytes": .integer, "max-streamed-results": .integer,
        "max-attachment-bytes": .integer, "max-sync-sessions": .integer, "max-sync-sessions-per-key": .integer,
        "remote-query-timeout": .integer,
        // Authentication and authorization.
        "insecure-dev": .flag, "jwt-secret-file": .text, "jwt-issuer": .text, "jwt-audience": .text, "jwt-leeway": .integer,
        "jwks": .url, "auth-webhook": .url, "auth-webhook-database-id": .text,
        "peer-policy": .text, "connection-webhook": .url,
        "rate-limit-address": .text, "rate-limit-credential": .text, "time-limit-credential": .text, "auth-failure-limit": .text, "audit-log": .text,
        // Logs and metrics.
        "log-level": .choice, "log-format": .choice, "access-log": .choice, "metrics-port": .integer, "metrics-host": .text,
        "enable-echo": .flag,
        // Local node: LAN.
        "lan": .flag, "lan-port": .integer, "lan-host": .text, "lan-tls": .flag, "lan-interface": .text, "device-name": .text,
        "sync-group": .integer, "no-lan-advertise": .flag, "no-lan-link": .flag, "lan-subscribe": .text, "lan-key": .secret,
        "lan-jwt-file": .text, "lan-link-grace": .integer, "lan-forget-after": .integer,
        // Local node: BLE.
        "ble": .flag, "ble-adapter": .text,
        // Local node: upstream.
        "upstream": .url, "upstream-key": .secret, "upstream-jwt-file": .text, "upstream-subscribe": .text,
        "upstream-relay-subscriptions": .flag, "upstream-relay-linger": .integer, "upstream-batch-documents": .integer,
        "upstream-retry-max": .integer,
    ]

    /// `BIGPEER_*` variables BigPeer or its deployment files read that are no option of `serve`.
    static let otherVariables: Set<String> = [
        "BIGPEER_CONFIG",  // the file, when --config is not given
        "BIGPEER_JWT_SECRET",  // the HS256 secret itself (--jwt-secret-file names a file holding it)
        "BIGPEER_OPENAPI", "BIGPEER_PG_BIN", "BIGPEER_TEST_DATABASE_URL",
        "BIGPEER_OPTIONS",  // more arguments, in deploy/systemd/bigpeer.service
        // The repository's scripts and tests, which run bigpeer with them set.
        "BIGPEER_BIN", "BIGPEER_BINARY", "BIGPEER_KEEP_SYSTEM_CLUSTER", "BIGPEER_EMFILE_CHILD", "BIGPEER_MEASURE_SYNC_RSS",
        "BIGPEER_SIM_SEEDS", "BIGPEER_SIM_CONCURRENCY",
    ]
}
