-- Local nodes found on the LAN (docs/LOCAL-NODE.md, "Two nodes on one ship"): a node that dials
-- another node of its sync group replicates with it as with an upstream, in a `bigpeer_upstream`
-- row named `lan:<peer key>` (the key it advertises: its address changes, its key does not).
--
-- discovered_peer_key marks such a row; last_seen_at is when the node was last advertised on the
-- LAN. A discovered node not seen for `--lan-forget-after` has its row deleted (its checkpoints
-- go with it), so a node that left for good stops holding the change log and tombstones back.
-- Rows of configured upstreams (`--upstream`) have neither and are never deleted this way.
ALTER TABLE bigpeer_upstream
    ADD COLUMN discovered_peer_key text,
    ADD COLUMN last_seen_at timestamptz;
