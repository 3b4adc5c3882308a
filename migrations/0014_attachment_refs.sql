-- Which documents reference which attachments (docs/STORAGE.md, "Attachment references";
-- docs/AUTH.md, "Attachments"): an attachment is downloadable by a caller without an attachment
-- scope only through a live document that references it and that the caller may read.
--
-- A reference is any JSON object in a live document's value with "_type": "attachment" and an
-- "id" of 64 lowercase hex digits: the shape an attachment token materializes to
-- (docs/CRDT.md), and exactly what a reader of the document sees. (An object of that shape
-- written as a plain MAP counts too: a caller who can see it can see the id anyway.)
--
-- Kept by triggers on `documents`, so every write — statement upserts, COPY creations, sync
-- merges, tombstones, EVICT, tombstone reaping, hand-made SQL — updates it in its own
-- transaction. Each trigger's WHEN clause is one jsonpath scan of the value for a "_type" key
-- equal to "attachment"; a document without one costs that scan and nothing more (no trigger
-- call, no row of this table).
CREATE TABLE bigpeer_attachment_refs (
    attachment_id text  NOT NULL CHECK (attachment_id ~ '^[0-9a-f]{64}$'),
    collection    text  NOT NULL,
    doc_id        jsonb NOT NULL,
    PRIMARY KEY (attachment_id, collection, doc_id)
);
-- A document's references, for the triggers (a write replaces them).
CREATE INDEX bigpeer_attachment_refs_document ON bigpeer_attachment_refs (collection, doc_id);

-- The attachment ids a document value references, distinct.
CREATE FUNCTION bigpeer_attachment_ids(value jsonb) RETURNS text[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT coalesce(array_agg(DISTINCT t #>> '{}'), '{}')
    FROM jsonb_path_query(value, 'strict $.** ? (@.type() == "object" && @."_type" == "attachment").id ? (@ like_regex "^[0-9a-f]{64}$")') AS t
$$;

CREATE FUNCTION bigpeer_attachment_refs_maintain() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    ids text[] := '{}';
BEGIN
    IF TG_OP <> 'DELETE' AND NOT NEW.deleted AND NEW.value IS NOT NULL THEN
        ids := bigpeer_attachment_ids(NEW.value);
    END IF;
    IF TG_OP <> 'INSERT' THEN
        DELETE FROM bigpeer_attachment_refs
        WHERE collection = OLD.collection AND doc_id = OLD.id AND attachment_id <> ALL (ids);
    END IF;
    IF cardinality(ids) > 0 THEN
        INSERT INTO bigpeer_attachment_refs (attachment_id, collection, doc_id)
        SELECT unnest(ids), NEW.collection, NEW.id
        ON CONFLICT DO NOTHING;
    END IF;
    RETURN NULL;
END
$$;

-- The WHEN clauses are a cheap superset of "references an attachment" (any "_type": "attachment"
-- anywhere); the function decides exactly. An UPDATE fires when the old or the new value has one,
-- so a reference that disappears is removed.
CREATE TRIGGER bigpeer_attachment_refs_insert AFTER INSERT ON documents FOR EACH ROW
    WHEN (NEW.value @? 'strict $.**."_type" ? (@ == "attachment")')
    EXECUTE FUNCTION bigpeer_attachment_refs_maintain();
CREATE TRIGGER bigpeer_attachment_refs_update AFTER UPDATE ON documents FOR EACH ROW
    WHEN (OLD.value @? 'strict $.**."_type" ? (@ == "attachment")' OR NEW.value @? 'strict $.**."_type" ? (@ == "attachment")')
    EXECUTE FUNCTION bigpeer_attachment_refs_maintain();
CREATE TRIGGER bigpeer_attachment_refs_delete AFTER DELETE ON documents FOR EACH ROW
    WHEN (OLD.value @? 'strict $.**."_type" ? (@ == "attachment")')
    EXECUTE FUNCTION bigpeer_attachment_refs_maintain();

-- The references of the documents written before this migration.
INSERT INTO bigpeer_attachment_refs (attachment_id, collection, doc_id)
SELECT DISTINCT unnest(bigpeer_attachment_ids(value)), collection, id
FROM documents
WHERE NOT deleted AND value @? 'strict $.**."_type" ? (@ == "attachment")';

-- An explicit scope to download any attachment (`bigpeer keys create --read-attachments`).
ALTER TABLE api_keys ADD COLUMN read_attachments boolean NOT NULL DEFAULT false;
