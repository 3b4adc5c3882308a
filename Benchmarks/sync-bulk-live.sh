#!/usr/bin/env bash
# A live sync client receives a bulk INSERT: one peer (scripts/sync_wire.py, the independent Python
# client's session: schema checks, deterministic CBOR, credit rules of PROTOCOL.md §6) subscribes
# to an empty collection, then one REST statement inserts N ~1 KB documents. The peer must receive
# every document exactly once in `changes` of that transaction, with no checkpoint covering it
# before the last one, and no data message sent without positive credit.
#   Benchmarks/sync-bulk-live.sh [docs=100000]
# Environment: BIGPEER_BIN=path (use this binary, skip the build); CREDIT=bytes (hello credit and
# max, default 1 MiB). Prints the delivery time after the REST response, the server's CPU and its
# peak RSS. The peer, the server and PostgreSQL share the machine's cores.
set -euo pipefail
cd "$(dirname "$0")/.."
docs=${1:-100000}
export PATH="/opt/swift/usr/bin:$PATH"
if [ -n "${BIGPEER_BIN:-}" ]; then bin=$BIGPEER_BIN; else
  swift build -c release --product bigpeer >/dev/null
  bin=.build/release/bigpeer
fi
venv="${BIGPEER_PY_VENV:-/tmp/bigpeer-py-venv}"
if ! "$venv/bin/python" -c 'import websockets, cbor2' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q 'websockets>=14,<18' 'cbor2>=5.4,<7'
fi
work=$(mktemp -d /tmp/bigpeer-bulklive-XXXX); chmod 711 "$work"
port=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
"$bin" serve --port "$port" --data-dir "$work/data" --db-connections 16 --max-body-bytes $((256<<20)) --log-level warning >"$work/server.log" 2>&1 &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; [ -n "${KEEP_LOG:-}" ] && cp "$work/server.log" "$KEEP_LOG"; rm -rf "$work"' EXIT
for _ in $(seq 1 300); do curl -sf "127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.1; done
key=$("$bin" keys create --data-dir "$work/data" --description bench --expires-in 1d --read-all --write-all 2>/dev/null | tail -1)
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
status=0
"$venv/bin/python" - "$port" "$key" "$docs" "$pid" "${CREDIT:-1048576}" <<'PY' || status=$?
import asyncio, http.client, json, os, sys, threading, time
sys.path.insert(0, "scripts")
import websockets
from sync_wire import SUBPROTOCOL, Deviation, Session, id_key, need

port, key, n, pid, credit = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
tck = os.sysconf("SC_CLK_TCK")
def cpu():
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / tck

def bulk(result):
    pad = "x" * 900
    args = {f"d{i}": {"_id": f"d{i:07d}", "n": i, "pad": pad} for i in range(n)}
    body = json.dumps({"statement": "INSERT INTO bench DOCUMENTS " + ", ".join(f"(:d{i})" for i in range(n)), "args": args})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", "/api/v4/store/execute", body, {"Authorization": "Bearer " + key, "Content-Type": "application/json"})
    r = c.getresponse(); data = r.read()
    assert r.status == 200, (r.status, data[:300])
    result["txn"] = json.loads(data)["transactionId"]
    result["at"] = time.monotonic()
    result["cpu"] = cpu()

async def main():
    ws = await websockets.connect(f"ws://127.0.0.1:{port}/api/v4/sync", subprotocols=[SUBPROTOCOL], compression=None,
                                  max_size=4 * credit, ping_interval=None)
    s = Session(ws, credit, credit)
    await s.send({"t": "hello", "v": 1, "site": 0x5151, "key": b"bulk", "name": "bulk-live", "meta": {},
                  "cred": {"apiKey": key}, "credit": credit, "max": credit})
    need((await s.recv("handshake"))["t"] == "welcome", "welcome")
    await s.send({"t": "sub", "id": 1, "q": "SELECT * FROM bench"})
    while (m := await s.recv("initial sync"))["t"] != "synced":
        await s.consumed(m["_size"])
    result = {}
    writer = threading.Thread(target=bulk, args=(result,)); writer.start()
    seen, messages, last, covered = set(), 0, 0, None
    while True:
        m = await s.recv("live", timeout=600)
        if m["t"] in ("changes", "checkpoint"):
            need(m["txn"] >= last, f"txn went back: {m['t']} {m['txn']} after {last}")
            last = m["txn"]
        if m["t"] == "changes":
            messages += 1
            for e in m["docs"]:
                k = id_key(e["id"])
                need(k not in seen, f"{e['id']!r} delivered twice")
                need("state" in e and e["kind"] == "upsert", f"a creation comes as its state: {e!r:.120}")
                seen.add(k)
            await s.consumed(m["_size"])
        elif m["t"] == "checkpoint" and "txn" in result and m["txn"] >= result["txn"]:
            covered = time.monotonic()
            need(len(seen) == n, f"checkpoint {m['txn']} covers the bulk after only {len(seen)} of {n} documents")
            break
    writer.join()
    print(f"live peer: {len(seen)} of {n} documents in {messages} `changes` messages; the checkpoint covering the bulk "
          f"came {covered - result['at']:.2f}s after the REST response; {s.credit_stalls} credit stalls; "
          f"server CPU after the response {cpu() - result['cpu']:.2f}s")
    await ws.close()

try:
    asyncio.run(main())
except Deviation as d:
    print(f"DEVIATION: {d}"); sys.exit(1)
PY
kill -0 $pid 2>/dev/null || { echo "the server exited (see the log: KEEP_LOG=file)"; exit 1; }
echo "server peak RSS $(awk '/VmHWM/ {print $2, $3}' /proc/$pid/status); load after: $(cut -d' ' -f1-3 /proc/loadavg)"
exit $status
