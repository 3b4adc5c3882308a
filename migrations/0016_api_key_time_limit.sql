-- An API key's own share of the server's time (docs/AUTH.md, "Server time"): seconds of request
-- time a second, and the seconds it may run ahead (`bigpeer keys create --time-limit RATE:BURST`).
-- NULL for both: the key has no share of its own (the server's --time-limit-credential, if any,
-- applies). The bounds are those the server accepts for any rate (TokenBucketRate); a double's
-- NaN sorts above every number in PostgreSQL, so the upper bounds keep it (and Infinity) out.
ALTER TABLE api_keys
    ADD COLUMN time_limit_rate double precision,
    ADD COLUMN time_limit_burst double precision,
    ADD CONSTRAINT api_keys_time_limit_whole CHECK ((time_limit_rate IS NULL) = (time_limit_burst IS NULL)),
    ADD CONSTRAINT api_keys_time_limit_bounds CHECK (time_limit_rate > 0 AND time_limit_rate <= 1000000
                                                     AND time_limit_burst >= 1 AND time_limit_burst <= 1000000);
