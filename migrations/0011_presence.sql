-- Presence across the instances of one database (docs/LOCAL-NODE.md, "Presence"): every few
-- seconds each instance writes one row holding the presence records of the peers linked to it and
-- its own links (a `presence` message, docs/PROTOCOL.md §4.14); the other instances read the rows
-- that have not expired and show those peers as their own. Soft state, rewritten at every
-- heartbeat: UNLOGGED (no WAL; emptied by a crash, which loses nothing that is not rewritten).
CREATE UNLOGGED TABLE bigpeer_presence (
    instance   text PRIMARY KEY,
    records    bytea NOT NULL,
    expires_at timestamptz NOT NULL
);
