"""The REST writer of Benchmarks/rolling-restart.sh: inserts documents with unique ids at a steady
rate through nginx, over keep-alive connections as a production client would, until SIGINT; then
writes what was sent, acknowledged (200) and failed to a JSON file.
Usage: rolling_restart.py BASE_URL API_KEY WRITES_PER_SECOND OUT.json"""
import http.client
import json
import signal
import sys
import time
import urllib.parse

base, key, rate, out = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
url = urllib.parse.urlparse(base)
stop = False


def on_interrupt(*_):
    global stop
    stop = True


signal.signal(signal.SIGINT, on_interrupt)
conn = None
acknowledged, failed, latencies = [], [], []
sent = 0
next_at = time.monotonic()
while not stop:
    now = time.monotonic()
    if now < next_at:
        time.sleep(next_at - now)
    next_at += 1 / rate
    sent += 1
    doc_id = f"rr-{sent}"
    body = json.dumps({"statement": "INSERT INTO rolling DOCUMENTS (:d)", "args": {"d": {"_id": doc_id, "n": sent}}})
    started = time.monotonic()
    try:
        if conn is None:
            conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
        conn.request("POST", "/api/v4/store/execute", body, {"Authorization": "Bearer " + key, "Content-Type": "application/json"})
        response = conn.getresponse()
        response.read()
        if response.status == 200:
            acknowledged.append(doc_id)
        else:
            failed.append(f"HTTP {response.status}")
        if response.getheader("Connection", "").lower() == "close":
            conn.close()
            conn = None
    except (OSError, http.client.HTTPException) as error:
        failed.append(type(error).__name__)
        if conn is not None:
            conn.close()
        conn = None
    latencies.append((time.monotonic() - started) * 1000)

latencies.sort()
pick = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))] if latencies else 0.0
json.dump({"sent": sent, "acknowledged": acknowledged, "failed": failed,
           "p50_ms": pick(0.5), "p99_ms": pick(0.99), "max_ms": latencies[-1] if latencies else 0.0}, open(out, "w"))
