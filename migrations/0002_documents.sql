-- The document store. See docs/STORAGE.md for the full description.

-- Every document's CRDT state and its materialized value, updated in the same transaction.
CREATE TABLE documents (
    collection text        NOT NULL,
    id         jsonb       NOT NULL CHECK (jsonb_typeof(id) IN ('string', 'object')),
    value      jsonb,                      -- the current value including "_id"; NULL once deleted
    state      bytea       NOT NULL,       -- CRDT state, canonical CBOR (docs/CRDT.md)
    deleted    boolean     NOT NULL DEFAULT false,
    deleted_at timestamptz,                -- when the tombstone was written (reaped after the TTL)
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (collection, id)
);
-- Pushed-down `_id = ...` predicates compare value -> '_id'; this makes them point reads.
CREATE INDEX documents_value_id ON documents (collection, (value -> '_id'));
CREATE INDEX documents_tombstones ON documents (deleted_at) WHERE deleted;

-- The commit-ordering counter: the last step of every writing transaction increments the single
-- row and takes its new value as the transaction number. The row lock is held until commit, so
-- numbers are assigned in commit order and a reader that sees number n also sees every number
-- below it: following the change log by `txn > last` never skips a change (docs/STORAGE.md).
CREATE TABLE bigpeer_txn (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    n         bigint  NOT NULL
);
INSERT INTO bigpeer_txn (n) VALUES (0);

-- The change log: one row per changed document per transaction, in commit order by txn.
CREATE TABLE change_log (
    txn        bigint      NOT NULL,
    seq        integer     NOT NULL,       -- order within the transaction
    collection text        NOT NULL,
    id         jsonb       NOT NULL,
    kind       text        NOT NULL CHECK (kind IN ('upsert', 'delete', 'evict')),
    delta      bytea,                      -- CRDT delta (canonical CBOR); NULL for evict
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (txn, seq)
);
CREATE INDEX change_log_document ON change_log (collection, id, txn);

-- Identity of this database as a CRDT replica. Every BigPeer instance on the database writes with
-- this site id: writes to one document are serialized by its row lock, and the CRDT never reuses
-- a dot below the document's version vector, so instances cannot collide (docs/CRDT.md).
CREATE TABLE bigpeer_identity (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    site_id   bigint  NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO bigpeer_identity (site_id) VALUES ((floor(random() * 9223372036854775807))::bigint);

-- Collections seen so far (collections need no declaration: a row appears with the first write).
CREATE TABLE bigpeer_collections (
    name       text PRIMARY KEY,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- Read-only views for analysts: analytics.all_documents shows every live document; a view per
-- collection (analytics."cars") is created with the collection's first write.
CREATE SCHEMA analytics;
CREATE VIEW analytics.all_documents AS
    SELECT collection, id #>> '{}' AS _id, value, updated_at FROM documents WHERE NOT deleted;
