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
-- transaction. Documents without a "_type": "attachment" anywhere cost one jsonpath walk of the
-- value per write and nothing more (no trigger call, no row of this table).
CREATE TABLE bigpeer_attachment_refs (
    attachment_id text  NOT NULL CHECK (attachment_id ~ '^[0-9a-f]{64}$'),
    collection    text  NOT NULL,
    doc_id        jsonb NOT NULL,
    -- The one index: downloads look up by attachment id; the triggers delete by all three columns.
    PRIMARY KEY (attachment_id, collection, doc_id)
);

-- The ids a document value references, as a JSON array of strings in document order (repeats
-- kept). A one-expression SQL function, so PostgreSQL inlines it wherever it is called.
CREATE FUNCTION bigpeer_attachment_ids(value jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN jsonb_path_query_array(value, 'strict $.** ? (@."_type" == "attachment").id ? (@ like_regex "^[0-9a-f]{64}$")');

-- Brings a document's rows from what its old value references to what its new value does. The
-- rows always match the stored value (the backfill below starts them so), so the difference of
-- the two lists is all there is to write. Only simple expressions besides the two writes:
-- PL/pgSQL evaluates those without starting an executor.
CREATE FUNCTION bigpeer_attachment_refs_maintain() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    old_ids jsonb := '[]';
    new_ids jsonb := '[]';
BEGIN
    IF TG_OP <> 'INSERT' AND NOT OLD.deleted THEN
        old_ids := coalesce(bigpeer_attachment_ids(OLD.value), '[]');
    END IF;
    IF TG_OP <> 'DELETE' AND NOT NEW.deleted THEN
        new_ids := coalesce(bigpeer_attachment_ids(NEW.value), '[]');
    END IF;
    IF old_ids = new_ids THEN
        RETURN NULL;
    END IF;
    IF old_ids <> '[]' THEN
        DELETE FROM bigpeer_attachment_refs
        WHERE collection = OLD.collection AND doc_id = OLD.id
          AND attachment_id IN (SELECT jsonb_array_elements_text(old_ids)) AND NOT new_ids @> to_jsonb(attachment_id);
    END IF;
    IF old_ids = '[]' AND jsonb_array_length(new_ids) = 1 THEN
        -- The common case (a new document with one attachment): no set to take apart.
        INSERT INTO bigpeer_attachment_refs (attachment_id, collection, doc_id)
        VALUES (new_ids ->> 0, NEW.collection, NEW.id) ON CONFLICT DO NOTHING;
    ELSIF new_ids <> '[]' THEN
        INSERT INTO bigpeer_attachment_refs (attachment_id, collection, doc_id)
        SELECT x, NEW.collection, NEW.id FROM jsonb_array_elements_text(new_ids) AS x WHERE NOT old_ids @> to_jsonb(x)
        ON CONFLICT DO NOTHING;
    END IF;
    RETURN NULL;
END
$$;

-- The WHEN clauses run inside the executor, before any trigger is queued. The first test is a
-- cheap superset of "references an attachment" (a "_type": "attachment" anywhere): a document
-- without one pays that walk of its value and nothing else. An UPDATE fires only when the old or
-- the new value has one and the ids of their token-shaped objects differ (editing other fields of
-- a document with a photo costs two more walks and no trigger call). The clauses spell their
-- paths out: a trigger's WHEN is not planned, so a SQL function there would not be inlined and
-- would cost an executor start per row.
CREATE TRIGGER bigpeer_attachment_refs_insert AFTER INSERT ON documents FOR EACH ROW
    WHEN (NEW.value @? 'strict $.**."_type" ? (@ == "attachment")')
    EXECUTE FUNCTION bigpeer_attachment_refs_maintain();
CREATE TRIGGER bigpeer_attachment_refs_update AFTER UPDATE ON documents FOR EACH ROW
    WHEN ((OLD.value @? 'strict $.**."_type" ? (@ == "attachment")' OR NEW.value @? 'strict $.**."_type" ? (@ == "attachment")')
          AND jsonb_path_query_array(OLD.value, 'strict $.** ? (@."_type" == "attachment").id')
              IS DISTINCT FROM jsonb_path_query_array(NEW.value, 'strict $.** ? (@."_type" == "attachment").id'))
    EXECUTE FUNCTION bigpeer_attachment_refs_maintain();
CREATE TRIGGER bigpeer_attachment_refs_delete AFTER DELETE ON documents FOR EACH ROW
    WHEN (OLD.value @? 'strict $.**."_type" ? (@ == "attachment")')
    EXECUTE FUNCTION bigpeer_attachment_refs_maintain();

-- The references of the documents written before this migration.
INSERT INTO bigpeer_attachment_refs (attachment_id, collection, doc_id)
SELECT DISTINCT jsonb_array_elements_text(bigpeer_attachment_ids(value)), collection, id
FROM documents
WHERE NOT deleted AND value @? 'strict $.**."_type" ? (@ == "attachment")';

-- An explicit scope to download any attachment (`bigpeer keys create --read-attachments`).
ALTER TABLE api_keys ADD COLUMN read_attachments boolean NOT NULL DEFAULT false;
