-- Per-document write rules of API keys (docs/AUTH.md, "Write rules"), the shape of read_rules
-- (0013): an object from collection name to an array of rule texts. A key may change a document
-- of a collection listed here only when one of its rules is true for the document before and
-- after the change; a collection not listed keeps its scope (write_all, write_collections) alone.
ALTER TABLE api_keys
    ADD COLUMN write_rules jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(write_rules) = 'object');
