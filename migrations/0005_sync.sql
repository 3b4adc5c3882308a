-- Sync (docs/PROTOCOL.md): which peer's upload made a change, so the live fan-out does not echo a
-- peer's own changes back to it. NULL for REST and other server-side writes.
ALTER TABLE change_log ADD COLUMN origin bigint;
