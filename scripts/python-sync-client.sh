#!/usr/bin/env bash
# Independent-client conformance of the sync protocol: scripts/sync-client.py, a Python client
# written only from docs/PROTOCOL.md and docs/CRDT.md §12, against a real `bigpeer serve`.
#
#   scripts/python-sync-client.sh                       # builds bigpeer unless BIGPEER_BIN is set
#   BIGPEER_BIN=path/to/bigpeer scripts/python-sync-client.sh
#
# Starts `bigpeer serve` on a free port with a private PostgreSQL in a temporary data directory and
# seeds ~154 KB of document states through REST: more than the client's 64 KiB initial credit, so
# the server must pause for credit. Then it runs the client:
#   selftest    the examples of PROTOCOL.md and CRDT.md §12, no server;
#   check       handshake; subscribe; initial sync decoded and compared field by field; upload of a
#               new document and a one-field change as CRDT deltas; sub_error; want; ping; 25 s idle
#               answering the server's heartbeat ping; live changes made through REST while it is
#               subscribed (a delta, a full state, a delete); bye; a resumed session with cp + have;
#   violations  every refusal and close code, and the key scopes.
# Finally it checks through REST that the client's upload is stored with exactly its values.
# Exits non-zero on any failure. websockets and cbor2 are installed once into a venv under
# $BIGPEER_PY_VENV (default /tmp/bigpeer-py-venv).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v swift >/dev/null || export PATH="/opt/swift/usr/bin:$PATH"

venv="${BIGPEER_PY_VENV:-/tmp/bigpeer-py-venv}"
if ! "$venv/bin/python" -c 'import websockets, cbor2' 2>/dev/null; then
  echo "==> installing websockets and cbor2 into $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q 'websockets>=14,<18' 'cbor2>=5.4,<7'
fi
py="$venv/bin/python"
echo "==> sync-client.py selftest (the examples of PROTOCOL.md and CRDT.md §12)"
"$py" scripts/sync-client.py selftest

. scripts/lib/test-server.sh
client_pid=""
extra_cleanup='if [ -n "$client_pid" ] && kill -0 "$client_pid" 2>/dev/null; then kill -TERM "$client_pid" 2>/dev/null || true; fi'
test_server_start pyclient
fail() { echo "==> python sync client: FAILED: $*"; tail -20 "$work/server.log" 2>/dev/null || true; exit 1; }
key=$(test_server_key python-sync-client --read-all --write-all)
ro_key=$(test_server_key read-only --read-all)
other_key=$(test_server_key other --read other --write other)

# POST /api/v4/store/execute with a JSON body file; prints the response, fails on a non-200.
execute() {
  local status
  status=$(curl -s -o "$work/response.json" -w '%{http_code}' -H "Authorization: Bearer $key" \
    -H 'Content-Type: application/json' --data-binary "@$1" "http://127.0.0.1:$port/api/v4/store/execute")
  [ "$status" = 200 ] || fail "REST $(cat "$1" | head -c 200) -> $status $(cat "$work/response.json")"
  cat "$work/response.json"
}
# rest 'STATEMENT' 'ARGS-JSON'
rest() {
  python3 -c 'import json,sys; print(json.dumps({"statement": sys.argv[1], "args": json.loads(sys.argv[2])}))' "$1" "${2:-{\}}" >"$work/body.json"
  execute "$work/body.json" >/dev/null
}

echo "==> seeding the collection pycars through REST"
# Every JSON type, integers vs floats, an object _id, a declared MAP, a counter, a deleted document,
# and 300 padded documents (~130 KB of states: the client's 64 KiB credit runs out during the sync).
python3 - "$work" <<'EOF'
import json, sys
work = sys.argv[1]
docs = [{"_id": f"car-{i:03d}", "color": ["red", "blue", "green"][i % 3], "n": i, "price": i + 0.25,
         "ok": i % 2 == 0, "nil": None, "tags": ["t", i], "spec": {"hp": 100 + i, "trim": {"x": "y"}},
         "pad": "p" * 300} for i in range(300)]
docs.append({"_id": {"vin": "W0L1", "n": 1}, "color": "grey", "unicode": "ñ✓€😀", "big": 9007199254740993,
             "neg": -42, "tiny": 1e-300})
args = {f"d{i}": d for i, d in enumerate(docs)}
stmt = "INSERT INTO pycars DOCUMENTS " + ", ".join(f"(:d{i})" for i in range(len(docs)))
json.dump({"statement": stmt, "args": args}, open(f"{work}/seed-body.json", "w"))
expected = docs + [{"_id": "car-map", "color": "red", "specs": {"hp": 200, "seats": 5}},
                   {"_id": "car-counter", "color": "red", "views": 3}]
json.dump(expected, open(f"{work}/expect.json", "w"))
json.dump({"_id": "py-new-1", "color": "purple", "n": 7, "price": 19.5, "ok": False, "nil": None,
           "tags": ["a", 1, 2.5], "spec": {"hp": 90, "deep": {"x": [1, {"y": None}]}}, "name": "Ωmega"},
          open(f"{work}/upload.json", "w"))
json.dump({"_id": "car-007", "field": "color", "value": "py-teal"}, open(f"{work}/update.json", "w"))
live = [dict(docs[5], color="live-blue"),
        {"_id": "live-new", "color": "live", "n": 1}]
json.dump(live, open(f"{work}/live.json", "w"))
json.dump(["car-008"], open(f"{work}/live-deleted.json", "w"))
EOF
execute "$work/seed-body.json" >/dev/null
rest "INSERT INTO COLLECTION pycars (specs MAP) DOCUMENTS (:d)" '{"d": {"_id": "car-map", "color": "red", "specs": {"hp": 150}}}'
rest "UPDATE COLLECTION pycars (specs MAP) SET specs.hp = 200, specs.seats = 5 WHERE _id = 'car-map'"
rest "INSERT INTO pycars DOCUMENTS (:d)" '{"d": {"_id": "car-counter", "color": "red"}}'
rest "UPDATE COLLECTION pycars (views COUNTER) APPLY views INCREMENT BY 5 WHERE _id = 'car-counter'"
rest "UPDATE COLLECTION pycars (views COUNTER) APPLY views INCREMENT BY -2 WHERE _id = 'car-counter'"
rest "INSERT INTO pycars DOCUMENTS (:d)" '{"d": {"_id": "car-gone", "color": "red"}}'
rest "DELETE FROM pycars WHERE _id = 'car-gone'"
rest "INSERT INTO other DOCUMENTS (:d)" '{"d": {"_id": "not-subscribed", "color": "red"}}'

echo "==> running scripts/sync-client.py"
"$py" scripts/sync-client.py --url "ws://127.0.0.1:$port" --key "$key" check --collection pycars \
  --expect "$work/expect.json" --upload "$work/upload.json" --update "$work/update.json" \
  --live "$work/live.json" --live-deleted "$work/live-deleted.json" --ready-file "$work/ready" \
  --idle 25 --resume &
client_pid=$!
for _ in $(seq 1 450); do
  [ -f "$work/ready" ] && break
  kill -0 "$client_pid" 2>/dev/null || break
  sleep 0.2
done
if [ -f "$work/ready" ]; then
  echo "==> REST writes while the client is subscribed"
  rest "UPDATE pycars SET color = 'live-blue' WHERE _id = 'car-005'"
  rest "INSERT INTO pycars DOCUMENTS (:d)" '{"d": {"_id": "live-new", "color": "live", "n": 1}}'
  rest "DELETE FROM pycars WHERE _id = 'car-008'"
  rest "INSERT INTO other DOCUMENTS (:d)" '{"d": {"_id": "not-subscribed-2", "color": "red"}}'
fi
status=0
wait "$client_pid" || status=$?
client_pid=""
[ "$status" -eq 0 ] || fail "the client exited with $status"

echo "==> sync-client.py violations (refusals, close codes, scopes; ~13 s)"
"$py" scripts/sync-client.py --url "ws://127.0.0.1:$port" --key "$key" violations --collection pycars \
  --read-only-key "$ro_key" --other-key "$other_key" || fail "violations"

echo "==> checking the client's upload through REST"
rest "SELECT * FROM pycars WHERE _id = 'py-new-1' OR _id = 'car-007'"
python3 - "$work" <<'EOF' || fail "the upload is not stored as sent"
import json, sys
work = sys.argv[1]
items = {json.dumps(d["_id"]): d for d in json.load(open(f"{work}/response.json"))["items"]}
def same(a, b):
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b
upload = json.load(open(f"{work}/upload.json"))
update = json.load(open(f"{work}/update.json"))
seed = next(d for d in json.load(open(f"{work}/expect.json")) if d["_id"] == update["_id"])
got_new, got_upd = items.get('"py-new-1"'), items.get(json.dumps(update["_id"]))
ok = True
if not same(got_new, upload):
    print(f"uploaded document: REST has {got_new}, the client sent {upload}"); ok = False
if not same(got_upd, dict(seed, **{update["field"]: update["value"]})):
    print(f"updated document: REST has {got_upd}, expected {dict(seed, **{update['field']: update['value']})}"); ok = False
print("    upload stored exactly" if ok else "    MISMATCH")
sys.exit(0 if ok else 1)
EOF

if grep -q "handler failed\|internal error" "$work/server.log"; then
  grep "handler failed\|internal error" "$work/server.log" | head -20
  fail "the server logged internal errors"
fi
echo "==> python sync client: clean"
