-- Upstream replication (docs/LOCAL-NODE.md): this database's BigPeer replicates with another
-- BigPeer (a local node with its cloud). One row per upstream, named by its sync URL without
-- credentials.
--
-- Upload: every change-log row after (uploaded_txn, uploaded_seq) whose origin is not the
-- upstream's site id is still to be uploaded; the position moves only after the upstream has
-- acknowledged (committed) everything up to it. Maintenance neither prunes the change log nor
-- reaps a tombstone past the lowest uploaded_txn of any row here, so nothing waiting to go up is
-- lost to retention (delete the row to stop replicating with that upstream for good).
CREATE TABLE bigpeer_upstream (
    upstream      text PRIMARY KEY,
    -- The upstream's CRDT site id (welcome.site), once a session has run. Changes with this
    -- origin came from it and are not uploaded back; a different site id on a later session means
    -- another database behind the URL, and the download checkpoints are dropped.
    upstream_site bigint,
    uploaded_txn  bigint NOT NULL DEFAULT 0,
    uploaded_seq  integer NOT NULL DEFAULT -1,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);

-- Download: per upstream subscription (its key: query text and arguments), the upstream's
-- transaction through which everything it matches has been merged here. Written in the same
-- transaction as the merged data it covers (or a later one), never before.
CREATE TABLE bigpeer_upstream_checkpoints (
    upstream     text NOT NULL REFERENCES bigpeer_upstream (upstream) ON DELETE CASCADE,
    subscription text NOT NULL,
    checkpoint   bigint NOT NULL,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (upstream, subscription)
);
