#!/usr/bin/env bash
# Write rules (docs/AUTH.md, "Write rules"): the cost of a write rule on INSERT and UPDATE latency,
# same server, same run, interleaved. Two keys write the same kind of documents: one with
# --write-all, one whose rule `bench: site = 'A'` every document it writes matches (so both do the
# same writes and the difference is the rule's checks).
#   Benchmarks/write-rules.sh [requests per round=300] [rounds=3]
# Environment: BIGPEER_BIN=path (skip the build).
# Rows: one-document INSERT (a new _id each), and UPDATE … WHERE _id = :id of an existing document,
# one client, sequential, latency measured by the client (median and p90 per round).
set -euo pipefail
cd "$(dirname "$0")/.."
. Benchmarks/lib/rest-workload.sh
n=${1:-300}; rounds=${2:-3}
export PATH="/opt/swift/usr/bin:$PATH"
bin=$(rest_bigpeer_bin)
work=$(mktemp -d /tmp/bigpeer-wrules-XXXX); chmod 711 "$work"
port=$(rest_free_port)
rest_serve "$bin" "$work" "$port"
plain=$(rest_key "$bin" "$work/data" plain)
ruled=$("$bin" keys create --data-dir "$work/data" --description ruled --expires-in 1d --read-all --write "bench: site = 'A'" 2>/dev/null | tail -1)
python3 - "$port" "$plain" "$ruled" "$n" "$rounds" <<'PY'
import http.client, json, sys, time, statistics
port, plain, ruled, n, rounds = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
c = http.client.HTTPConnection("127.0.0.1", port)
def call(key, statement, args):
    t = time.perf_counter()
    c.request("POST", "/api/v4/store/execute", json.dumps({"statement": statement, "args": args}),
              {"Authorization": "Bearer " + key, "Content-Type": "application/json"})
    r = c.getresponse(); body = r.read()
    assert r.status == 200, (r.status, body[:200])
    return (time.perf_counter() - t) * 1e6
pad = "x" * 800
def doc(k, i): return {"_id": f"{k}-{i}", "site": "A", "n": i, "pad": pad}
seq = {"plain": 0, "ruled": 0}
def insert(k, key):
    seq[k] += 1
    return call(key, "INSERT INTO bench DOCUMENTS (:d)", {"d": doc(k, seq[k])})
def update(k, key, i):
    return call(key, "UPDATE bench SET n = n + 1 WHERE _id = :id", {"id": f"{k}-{1 + i % max(1, seq[k])}"})
for k, key in (("plain", plain), ("ruled", ruled)):
    for _ in range(200): insert(k, key)  # warm up, and documents to update
for r in range(1, rounds + 1):
    out = {}
    for op in ("insert", "update"):
        for k, key in (("plain", plain), ("ruled", ruled)):
            lat = [insert(k, key) if op == "insert" else update(k, key, i) for i in range(n)]
            lat.sort()
            out[(op, k)] = (statistics.median(lat), lat[int(len(lat) * 0.9)])
    load = open("/proc/loadavg").read().split()[:3]
    print(f"round {r}: " + " | ".join(f"{op} {k} p50 {m:.0f} µs p90 {p:.0f} µs" for (op, k), (m, p) in out.items()) + f" | load {' '.join(load)}")
PY
