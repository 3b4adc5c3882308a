-- Per-document read rules of API keys (docs/AUTH.md, "Rules"): an object from collection name to
-- an array of rule texts (DQL conditions, or Ditto's legacy query form), the shape of Ditto's
-- `queriesByCollection`. A document of a collection listed here is visible to the key only when
-- one of its rules is true for it; a collection not listed keeps its scope (read_all,
-- read_collections) alone. The server parses the texts once when it loads the key.
ALTER TABLE api_keys
    ADD COLUMN read_rules jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(read_rules) = 'object');
