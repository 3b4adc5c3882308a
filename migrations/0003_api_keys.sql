-- API keys for the REST API (docs/API.md "Authentication", docs/STORAGE.md "api_keys").
-- A key is `bpk_<id>_<secret>`; only the SHA-256 of the whole key is stored, so a database dump
-- does not reveal usable keys. Lookup is by `id` (primary key), verification compares hashes in
-- constant time. Scopes: `*_all` grants every collection, else the listed collections only.
CREATE TABLE api_keys (
    id                text PRIMARY KEY CHECK (id ~ '^[0-9a-f]{16}$'),
    key_sha256        bytea NOT NULL CHECK (octet_length(key_sha256) = 32),
    description       text NOT NULL DEFAULT '' CHECK (length(description) <= 1000),
    created_at        timestamptz NOT NULL DEFAULT now(),
    expires_at        timestamptz NOT NULL,
    revoked_at        timestamptz,
    read_all          boolean NOT NULL DEFAULT false,
    read_collections  text[] NOT NULL DEFAULT '{}',
    write_all         boolean NOT NULL DEFAULT false,
    write_collections text[] NOT NULL DEFAULT '{}',
    -- Refreshed at most once per cache period per instance (not on every request).
    last_used_at      timestamptz
);
