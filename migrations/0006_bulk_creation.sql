-- Creations log no delta, and the change log loses its unused per-document index (docs/STORAGE.md
-- "Transaction numbers and the change log").
--
-- `change_log_document (collection, id, txn)` was never read: every reader follows the log by txn
-- (the primary key). Each change paid for it with one more btree insertion comparing jsonb ids.
DROP INDEX IF EXISTS change_log_document;
-- An `upsert` row with a NULL delta is a creation: the document did not exist before this
-- transaction, so its delta is its whole state at that transaction, which `documents.state`
-- contains (a CRDT state only grows while the row exists). Readers send that state instead.
COMMENT ON COLUMN change_log.delta IS
    'CRDT delta (canonical CBOR); NULL for evict, and for an upsert that created the document (its delta is its whole state: read documents.state)';
