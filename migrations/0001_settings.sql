-- Server settings changed at run time (DQL `ALTER SYSTEM SET name = value`), shared by every
-- instance on this database. Absent keys take their built-in defaults (docs/STORAGE.md).
CREATE TABLE bigpeer_settings (
    name       text PRIMARY KEY CHECK (name ~ '^[A-Z][A-Z0-9_]*$'),
    value      jsonb NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
