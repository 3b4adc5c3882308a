#!/usr/bin/env bash
# Large SELECT results (issue #16 item 4): peak RSS of the server and time to first/last byte for
# `SELECT * FROM big` over N documents (~155 bytes of JSON each; 200k ≈ 31 MB), a fast reader
# (curl) and a slow one (curl --limit-rate). Numbers: docs/performance-history.md, "Large results stream".
#
#   Benchmarks/large-result.sh [BIGPEER_BINARY]     # DOCS=200000 PORT=18416 RATE=4M
#
# Compare builds by passing each one's binary in turn; the data directory is reused, so the
# collection is filled once (through DQL INSERTs of 5,000 documents).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-.build/release/bigpeer}
DOCS=${DOCS:-200000}
PORT=${PORT:-18416}
RATE=${RATE:-4M}
DATA=${DATA:-/tmp/bigpeer-large-result}
OUT=$(mktemp)
[ -x "$BIN" ] || { echo "build first: swift build -c release --product bigpeer" >&2; exit 1; }
"$BIN" serve --data-dir "$DATA" --port "$PORT" --insecure-dev --threads 2 --log-level warning >/dev/null 2>&1 & srv=$!
trap 'kill -INT $srv 2>/dev/null; wait $srv 2>/dev/null; rm -f "$OUT"' EXIT
for _ in $(seq 150); do curl -sf -o /dev/null "http://127.0.0.1:$PORT/readyz" && break; sleep 0.2; done
url="http://127.0.0.1:$PORT/api/v4/store/execute"
have=$(curl -s -H 'Content-Type: application/json' -d '{"statement":"SELECT COUNT(*) AS n FROM big"}' "$url" \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["items"][0]["n"])')
if [ "$have" -lt "$DOCS" ]; then
  python3 - "$url" "$have" "$DOCS" <<'PY'
import json, sys, urllib.request
url, start, total = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for first in range(start, total, 5000):
    n = min(5000, total - first)
    args = {f"d{k}": {"_id": f"d{first + k:07d}", "n": first + k, "name": f"name-{first + k}", "pad": "x" * 96} for k in range(n)}
    body = json.dumps({"statement": "INSERT INTO big DOCUMENTS " + ",".join(f"(:d{k})" for k in range(n)), "args": args}).encode()
    with urllib.request.urlopen(urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"}), timeout=300) as r:
        assert r.status == 200
PY
fi
mem() { grep -E 'VmHWM|VmRSS' /proc/$srv/status | tr -s ' \t' ' ' | tr '\n' ' '; }
echo "idle: $(mem)"
q='{"statement":"SELECT * FROM big"}'
for run in 1 2 3; do
  r=$(curl -s -o "$OUT" -w '%{http_code} bytes=%{size_download} first=%{time_starttransfer}s last=%{time_total}s' \
        -H 'Content-Type: application/json' -d "$q" "$url"; echo " curl_exit=$?")
  items=$(python3 -c "import json; print(len(json.load(open('$OUT'))['items']))" 2>/dev/null || echo "unparsable")
  echo "fast reader $run: $r items=$items; $(mem)"
done
r=$(curl -s --limit-rate "$RATE" -o /dev/null -w '%{http_code} bytes=%{size_download} first=%{time_starttransfer}s last=%{time_total}s' \
      -H 'Content-Type: application/json' -d "$q" "$url"; echo " curl_exit=$?")
echo "slow reader ($RATE/s): $r; $(mem)"
