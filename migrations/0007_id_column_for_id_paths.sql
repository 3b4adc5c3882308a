-- The pushdown planner compiles the DQL path `_id` to the `id` column (the primary key's second
-- column: every live row's value holds `"_id"` equal to `id`, and the planner always excludes
-- tombstones), so the expression index on `value -> '_id'` is never used any more. Dropping it
-- saves one B-tree insertion comparing jsonb per created document (docs/STORAGE.md).
DROP INDEX IF EXISTS documents_value_id;
