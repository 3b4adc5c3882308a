#!/usr/bin/env python3
"""Joins the normal client's latencies (hostile-mix.sh with TRACE=path) with the server's access log
(path.server.log): for the slowest requests of each phase, how much of the client's wait the server
saw (its duration_us runs from the request's head being parsed to the response being queued).

    hostile_trace.py path [how-many-slowest=20]
"""
import re, statistics, sys

path = sys.argv[1]
worst = int(sys.argv[2]) if len(sys.argv) > 2 else 20
client = {}
for line in open(path):
    rid, ms = line.split()
    client[rid] = float(ms)
server = {}
pattern = re.compile(r'duration_us[=":]+(\d+).*?request_id[=":]+"?(normal-[\w-]+)')
for line in open(path + ".server.log", errors="replace"):
    m = pattern.search(line)
    if m:
        server[m.group(2)] = int(m.group(1)) / 1000
for phase in ("idle", "hostile", "idle-after"):
    ids = [r for r in client if re.fullmatch(r"normal-%s-\d+" % phase, r)]
    if not ids:
        continue
    ids.sort(key=lambda r: client[r])
    n = len(ids)
    p99 = ids[int(n * 0.99) - 1]
    inside = [server[r] for r in ids if r in server]
    outside = [client[r] - server[r] for r in ids if r in server]
    print("== %s: %d requests, client p50 %.3f p99 %.3f ms; server-side p50 %.3f p99 %.3f ms; outside the server p50 %.3f p99 %.3f ms"
          % (phase, n, client[ids[n // 2]], client[p99], statistics.median(inside), sorted(inside)[int(len(inside) * 0.99) - 1],
             statistics.median(outside), sorted(outside)[int(len(outside) * 0.99) - 1]))
    print("   slowest %d (client ms / server ms):" % worst, " ".join("%.2f/%s" % (client[r], "%.2f" % server[r] if r in server else "?") for r in ids[-worst:]))
