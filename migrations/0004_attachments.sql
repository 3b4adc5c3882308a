-- Attachments: immutable blobs addressed by the SHA-256 of their content (docs/STORAGE.md,
-- "Attachments"). Identical content is stored once. The bytes live in rows of at most
-- `chunk_size` bytes so a download or a range request reads only the chunks it needs, one at a
-- time, and never a whole blob in one result.
CREATE SEQUENCE bigpeer_attachment_blob_seq;

CREATE TABLE bigpeer_attachments (
    -- Lowercase hex SHA-256 of the content.
    id           text PRIMARY KEY CHECK (id ~ '^[0-9a-f]{64}$'),
    -- Key of the chunk rows (a number, not the 64-character id, keeps the chunk index small).
    blob         bigint NOT NULL UNIQUE,
    length       bigint NOT NULL CHECK (length >= 0),
    chunk_size   integer NOT NULL CHECK (chunk_size > 0),
    content_type text CHECK (length(content_type) <= 255),
    created_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE bigpeer_attachment_chunks (
    -- Deferred: chunks are written while the upload streams in, before the content (and so the
    -- id) is known; the metadata row comes last in the same transaction and the check runs at
    -- COMMIT, so no chunk can ever exist without its attachment.
    blob  bigint NOT NULL REFERENCES bigpeer_attachments (blob) ON DELETE CASCADE DEFERRABLE INITIALLY DEFERRED,
    seq   integer NOT NULL CHECK (seq >= 0),
    data  bytea NOT NULL,
    PRIMARY KEY (blob, seq)
);
-- EXTERNAL: out-of-line but uncompressed. Attachments are mostly compressed already (images,
-- archives), so pglz would burn CPU for nothing, and `substring` on an uncompressed TOAST value
-- fetches only the TOAST pages covering the requested slice (range requests).
ALTER TABLE bigpeer_attachment_chunks ALTER COLUMN data SET STORAGE EXTERNAL;
