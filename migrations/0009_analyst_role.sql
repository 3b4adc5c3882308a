-- Analysts read the analytics views, and nothing else (docs/STORAGE.md, "Analytics").
--
-- 1. The views cannot be written through, by anyone. A view over one table is "automatically
--    updatable" in PostgreSQL: `UPDATE analytics.cars SET value = …` or `DELETE FROM analytics.cars`
--    changed `documents.value` behind the CRDT state, after which REST and sync disagreed. A view
--    whose FROM item is a subquery is never automatically updatable (and has no INSTEAD OF
--    trigger or rule), so every INSERT/UPDATE/DELETE on it fails, for its owner too, and
--    information_schema reports it as not updatable. The planner flattens the subquery: reads
--    plan exactly as before. The per-collection views are replaced in place (same columns); new
--    ones are created in this form (Sources/Store/WriteTransaction.swift, registerCollection).
CREATE OR REPLACE VIEW analytics.all_documents AS
    SELECT collection, _id, value, updated_at
    FROM (SELECT collection, id #>> '{}' AS _id, value, updated_at FROM documents WHERE NOT deleted) AS live;

DO $$
DECLARE
    v record;
BEGIN
    FOR v IN
        SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'analytics' AND c.relkind = 'v' AND c.relname <> 'all_documents'
          AND c.relname IN (SELECT name FROM bigpeer_collections)
    LOOP
        EXECUTE format(
            'CREATE OR REPLACE VIEW analytics.%I AS SELECT _id, value, updated_at FROM '
            '(SELECT id #>> ''{}'' AS _id, value, updated_at FROM documents WHERE collection = %L AND NOT deleted) AS live',
            v.relname, v.relname);
    END LOOP;
END
$$;

-- 2. The role `bigpeer_analyst`: USAGE on the analytics schema and SELECT on its views (those that
--    exist now, and through default privileges every view this role creates later), nothing on
--    the tables (documents, change_log, api_keys, …: PUBLIC has no privileges on them). It is a
--    NOLOGIN group role: people log in as their own roles made members of it (GRANT
--    bigpeer_analyst TO alice), or, for a private cluster, `bigpeer serve` gives it a password
--    and LOGIN itself. CONNECTION LIMIT keeps analysts from taking every connection slot.
--
--    Roles belong to the whole cluster, and every database on it runs this migration (possibly at
--    the same moment): the role is created only if missing, and a concurrent creation by another
--    database's migration is not an error. The migrating user needs CREATEROLE (or superuser) to
--    create it; without it the migration still succeeds and grants nothing — `bigpeer serve`
--    then logs at every start what an administrator should run (docs/STORAGE.md, "Analytics").
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'bigpeer_analyst') THEN
        BEGIN
            CREATE ROLE bigpeer_analyst NOLOGIN CONNECTION LIMIT 16;
        EXCEPTION
            -- Another database's migration created it between our check and our CREATE.
            WHEN duplicate_object OR unique_violation THEN NULL;
            WHEN insufficient_privilege THEN
                RAISE WARNING 'bigpeer: role % may not create roles, so bigpeer_analyst does not exist; '
                    'analysts get no read-only role until an administrator creates it (docs/STORAGE.md, "Analytics")', current_user;
        END;
    END IF;
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'bigpeer_analyst') THEN
        GRANT USAGE ON SCHEMA analytics TO bigpeer_analyst;
        GRANT SELECT ON ALL TABLES IN SCHEMA analytics TO bigpeer_analyst;
        ALTER DEFAULT PRIVILEGES IN SCHEMA analytics GRANT SELECT ON TABLES TO bigpeer_analyst;
    END IF;
END
$$;

-- 3. Nobody but BigPeer's own user creates objects here — analysts included: no temporary tables
--    (PUBLIC has TEMPORARY on every new database) and, on PostgreSQL 14 and older, nothing in the
--    `public` schema (PUBLIC had CREATE there until 15). Done only where the migrating user owns
--    the object (or is superuser); otherwise it is left to the administrator (docs/STORAGE.md).
DO $$
DECLARE
    super boolean := (SELECT rolsuper FROM pg_roles WHERE rolname = current_user);
BEGIN
    IF super OR (SELECT pg_has_role(current_user, datdba, 'USAGE') FROM pg_database WHERE datname = current_database()) THEN
        EXECUTE format('GRANT TEMPORARY ON DATABASE %I TO %I', current_database(), current_user);
        EXECUTE format('REVOKE TEMPORARY ON DATABASE %I FROM PUBLIC', current_database());
    END IF;
    IF super OR (SELECT pg_has_role(current_user, nspowner, 'USAGE') FROM pg_namespace WHERE nspname = 'public') THEN
        REVOKE CREATE ON SCHEMA public FROM PUBLIC;
    END IF;
END
$$;
