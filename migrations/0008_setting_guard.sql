-- A write transaction that remembers a setting (DQL_STRICT_MODE) from an earlier transaction calls
-- this as its first statement instead of reading bigpeer_settings, which would cost it a round
-- trip before it can compute its writes. If the stored value (NULL: absent) is no longer the one
-- the transaction assumed, it fails with SQLSTATE BP001 before anything is written or committed,
-- and the store reruns it with the value read afresh (docs/STORAGE.md, "Settings in write
-- transactions").
CREATE FUNCTION bigpeer_expect_setting(setting text, expected jsonb) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF (SELECT value FROM bigpeer_settings WHERE name = setting) IS DISTINCT FROM expected THEN
        RAISE EXCEPTION 'setting % changed since this instance last read it', setting USING ERRCODE = 'BP001';
    END IF;
END
$$;
