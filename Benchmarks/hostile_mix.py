#!/usr/bin/env python3
"""A normal client's latency on an idle server, then while hostile clients run (#16, "Also").

    hostile_mix.py URL KEY [seconds=20] [ATTACKER_KEY]

Phases (each bounded in time, every hostile worker stops by itself):
  idle     the normal client alone: point reads by _id through POST /api/v4/store/execute, one
           request at a time on a keep-alive connection;
  hostile  the same normal client while, concurrently:
           - regex bombs: regexp_like(:s, :p) with s = 'a'*25+'b', p = '^(a|a)*$' (catastrophic for a
             backtracking engine), 2 clients in a loop; the condition has no document in it, so the
             planner evaluates it once (a one-time filter) and reads no row;
           - per-document regex bombs ("regexdoc"): regexp_like(s, :p) over 1,000 documents whose s
             is 'a'*25+'b', evaluated in memory for each, 2 clients in a loop;
           - LIKE bombs: a 4,000-character pattern against a 4 MB argument, 2 clients in a loop;
           - slow readers of a huge result (SELECT * FROM the seeded collection), 4 clients reading
             4 KiB every 50 ms and starting over when done;
           - a session flood: up to FLOOD WebSocket upgrades to /api/v4/sync held open (no hello).
  idle-after  the normal client alone again;
  control  the same hostile clients aimed at a sink (a process that answers every request with an
           empty 400 at once), each bomb client paced to its rate in the hostile phase, the
           normal client on the server as before: what generating the
           attack costs the normal client on this machine, where the load generator shares the
           server's cores (CONTROL=0 skips it).
Prints one JSON line per phase: count, p50/p99/max in ms, errors; then the p99 ratios hostile/idle,
control/idle and hostile/control (the server's own share).
The README of Benchmarks/ and docs/PERFORMANCE.md ("Hostile mix") say how to read it.
"""
import base64, http.client, json, multiprocessing, os, socket, statistics, sys, threading, time, urllib.parse

URL, KEY = sys.argv[1], sys.argv[2]
SECONDS = float(sys.argv[3]) if len(sys.argv) > 3 else 20.0
FLOOD = int(os.environ.get("FLOOD", "300"))
# Which hostile clients run (comma-separated subset of regex,regexdoc,like,slow,flood; default all).
KINDS = set(os.environ.get("HOSTILE", "regex,regexdoc,like,slow,flood").split(","))
# TRACE=path: the normal client sends X-Request-ID normal-PHASE-N and appends "ID latency-ms" lines
# to path, to be joined with the server's access log (Benchmarks/hostile_trace.py).
TRACE = os.environ.get("TRACE")
# ATTACKER_CPUS=1 (a cpu list as taskset takes it, e.g. "1" or "2-3"): the hostile clients and the
# control's sink run only on these CPUs and the normal client only on the others; the server and
# PostgreSQL stay free to use every CPU. It stands in for an attacker on another machine: on one
# box the attack's own CPU and its loopback send path (softirq work on the sending CPU, ahead of any
# task there) otherwise land on the normal client's CPU.
def cpu_list(text):
    cpus = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus
# NORMAL_RT=n: the normal client runs SCHED_FIFO at priority n (root). It stands in for a client on
# a machine of its own: its process is then never the one kept waiting for a CPU here (with the
# server's short-slice loops and PostgreSQL's backends taking turns on both cores, a SCHED_OTHER
# client waited up to 5.6 ms to run at all), so what is measured is the server's answer. It sleeps
# 5 ms between requests: it takes a few per cent of one CPU.
NORMAL_RT = int(os.environ.get("NORMAL_RT", "0"))
ATTACKER_CPUS = cpu_list(os.environ["ATTACKER_CPUS"]) if os.environ.get("ATTACKER_CPUS") else None
NORMAL_CPUS = (os.sched_getaffinity(0) - ATTACKER_CPUS) if ATTACKER_CPUS else None


def on_attacker_cpus(target):
    """`target`, run on the attacker's CPUs when ATTACKER_CPUS is set (Linux: per thread)."""
    def run(*args):
        if ATTACKER_CPUS:
            os.sched_setaffinity(0, ATTACKER_CPUS)
        target(*args)
    return run
u = urllib.parse.urlparse(URL)
HOST, PORT = u.hostname, u.port
HEADERS = {"Authorization": "Bearer " + KEY, "Content-Type": "application/json"}
# The hostile clients' key: their own when given (argument 4), else the normal client's.
ATTACKER = sys.argv[4] if len(sys.argv) > 4 else KEY
ATTACKER_HEADERS = dict(HEADERS, Authorization="Bearer " + ATTACKER)


def execute(conn, statement, args=None, request_id=None, body=None, headers=None):
    """One statement on conn; `body`: its request body encoded already (a bomb's, made once)."""
    headers = headers or HEADERS
    if body is None:
        body = json.dumps({"statement": statement, "args": args or {}}).encode()
    headers = dict(headers, **{"X-Request-ID": request_id}) if request_id else headers
    conn.request("POST", "/api/v4/store/execute", body=body, headers=headers)
    r = conn.getresponse()
    data = r.read()
    return r.status, data


def normal_client(stop_at, out, phase):
    conn = http.client.HTTPConnection(HOST, PORT, timeout=30)
    lat, errors, i = [], 0, 0
    trace = open(TRACE, "a") if TRACE else None
    while time.monotonic() < stop_at:
        doc = "d%d" % (i % 1000)
        i += 1
        t = time.perf_counter()
        try:
            rid = "normal-%s-%d" % (phase, i)
            status, _ = execute(conn, "SELECT * FROM hm_small WHERE _id = :id", {"id": doc}, request_id=rid if trace else None)
            if trace:
                trace.write("%s %.3f\n" % (rid, (time.perf_counter() - t) * 1000))
            if status != 200:
                errors += 1
        except Exception:
            errors += 1
            conn = http.client.HTTPConnection(HOST, PORT, timeout=30)
            continue
        lat.append((time.perf_counter() - t) * 1000)
        time.sleep(0.005)  # a steady client, not a load generator
    if trace:
        trace.close()
    out.update(count=len(lat), errors=errors,
               p50=round(statistics.median(lat), 3) if lat else None,
               p99=round(sorted(lat)[int(len(lat) * 0.99) - 1], 3) if lat else None,
               max=round(max(lat), 3) if lat else None)


def normal_client_result(stop_at, phase):
    if NORMAL_CPUS:
        os.sched_setaffinity(0, NORMAL_CPUS)
    if NORMAL_RT:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(NORMAL_RT))
    out = {}
    normal_client(stop_at, out, phase)
    return out


def bomb_loop(stop_at, statement, args, counts, name, port, rate=None):
    """Sends the bomb in a loop until stop_at; `rate` (requests a second): paced to it, else as
    fast as the answers come."""
    # Encoded once: the attacker's own cost (json.dumps of a 4 MiB argument takes milliseconds of
    # these two cores) is not what is measured.
    body = json.dumps({"statement": statement, "args": args}).encode()
    next_at = time.monotonic()
    while time.monotonic() < stop_at:
        if rate:
            next_at += 1 / rate
            time.sleep(max(0, next_at - time.monotonic()))
        try:
            conn = http.client.HTTPConnection(HOST, port, timeout=60)
            status, _ = execute(conn, statement, body=body, headers=ATTACKER_HEADERS)
            counts[name + ":" + str(status)] = counts.get(name + ":" + str(status), 0) + 1
            conn.close()
        except Exception as e:
            counts[name + ":exc"] = counts.get(name + ":exc", 0) + 1
            time.sleep(0.1)


def slow_reader(stop_at, counts, port):
    body = json.dumps({"statement": "SELECT * FROM hm_big", "args": {}}).encode()
    req = (b"POST /api/v4/store/execute HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + ATTACKER.encode()
           + b"\r\nContent-Type: application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    while time.monotonic() < stop_at:
        s = socket.create_connection((HOST, port))
        s.settimeout(5)
        s.sendall(req)
        got = 0
        try:
            while time.monotonic() < stop_at:
                chunk = s.recv(4096)
                if not chunk:
                    break
                got += len(chunk)
                time.sleep(0.05)
        except Exception:
            pass
        s.close()
        counts["slow-reader bytes"] = counts.get("slow-reader bytes", 0) + got


def flood(stop_at, counts, port):
    socks = []
    while time.monotonic() < stop_at and len(socks) < FLOOD:
        try:
            s = socket.create_connection((HOST, port), timeout=5)
            k = base64.b64encode(os.urandom(16)).decode()
            s.sendall(("GET /api/v4/sync HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                       "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: bigpeer-sync.v1\r\n"
                       "Authorization: Bearer %s\r\n\r\n" % (k, ATTACKER)).encode())
            socks.append(s)
        except Exception:
            counts["flood refused"] = counts.get("flood refused", 0) + 1
            time.sleep(0.05)
    counts["flood held"] = len(socks)
    while time.monotonic() < stop_at:
        time.sleep(0.2)
    for s in socks:
        s.close()


def seed():
    """1,000 small documents for the normal client; 1,000 for the per-document regex; 50,000 ~1 KB documents (~55 MB of JSON) for
    the huge result."""
    conn = http.client.HTTPConnection(HOST, PORT, timeout=300)
    # Seeded with the attacker's key: with a server-time limit per credential, the seeding's
    # seconds must not leave the normal client's key in debt for its idle phase.
    global HEADERS
    normal, HEADERS = HEADERS, ATTACKER_HEADERS
    small = ",".join("({'_id': 'd%d', 'n': %d})" % (i, i) for i in range(1000))
    status, data = execute(conn, "INSERT INTO hm_small DOCUMENTS " + small + " ON ID CONFLICT DO NOTHING")
    if status != 200:
        sys.exit("seeding failed: %d %s" % (status, data[:200]))
    regex = ",".join("({'_id': 'r%d', 's': :s})" % i for i in range(1000))
    status, data = execute(conn, "INSERT INTO hm_regex DOCUMENTS " + regex + " ON ID CONFLICT DO NOTHING", {"s": "a" * 25 + "b"})
    if status != 200:
        sys.exit("seeding failed: %d %s" % (status, data[:200]))
    for part in range(5):
        big = ",".join("({'_id': 'b%d', 'blob': :blob})" % (part * 10000 + i) for i in range(10000))
        status, data = execute(conn, "INSERT INTO hm_big DOCUMENTS " + big + " ON ID CONFLICT DO NOTHING", {"blob": "x" * 1000})
        if status != 200:
            sys.exit("seeding failed: %d %s" % (status, data[:200]))
    HEADERS = normal


def run_phase(name, hostile, target=PORT, pace=None):
    """A phase: the normal client on the server; hostile clients (if any) on `target`, the server
    or the control's sink. `pace`: bomb kind -> requests a second for each of its clients."""
    pace = pace or {}
    stop_at = time.monotonic() + SECONDS
    result, counts, threads = {}, {}, []
    if hostile:
        for _ in range(2):
            if "regex" in KINDS:
                threads.append(threading.Thread(target=bomb_loop, args=(stop_at, "SELECT * FROM hm_small WHERE regexp_like(:s, :p)",
                                                                           {"s": "a" * 25 + "b", "p": "^(a|a)*$"}, counts, "regex", target, pace.get("regex"))))
            if "regexdoc" in KINDS:
                threads.append(threading.Thread(target=bomb_loop, args=(stop_at, "SELECT * FROM hm_regex WHERE regexp_like(s, :p)",
                                                                           {"p": "^(a|a)*$"}, counts, "regexdoc", target, pace.get("regexdoc"))))
            if "like" in KINDS:
                threads.append(threading.Thread(target=bomb_loop, args=(stop_at, "SELECT * FROM hm_small WHERE _id = 'd1' AND :s LIKE :p",
                                                                           {"s": "a" * (4 << 20), "p": "%a" * 2000 + "b"}, counts, "like", target, pace.get("like"))))
        if "slow" in KINDS:
            for _ in range(4):
                threads.append(threading.Thread(target=slow_reader, args=(stop_at, counts, target)))
        if "flood" in KINDS:
            threads.append(threading.Thread(target=flood, args=(stop_at, counts, target)))
    for t in threads:
        t.daemon = True
        t._target = on_attacker_cpus(t._target)
        t.start()
    time.sleep(0.5 if hostile else 0)
    # The normal client is a process of its own: in this one the hostile threads hold the GIL
    # (json.dumps of a 4 MiB argument takes milliseconds), which would show up as server latency.
    queue = multiprocessing.Queue()
    child = multiprocessing.Process(target=lambda: queue.put(normal_client_result(stop_at, name)))
    child.start()
    result.update(queue.get())
    child.join()
    for t in threads:
        t.join(timeout=10)
    result["phase"] = name
    result["hostile"] = counts
    print(json.dumps(result), flush=True)
    return result


def sink_server(listener):
    """The control's target: answers every request with an empty 400 at once and holds upgrade
    requests until the client leaves. What the hostile clients cost this machine when the server
    does nothing for them (their own CPU, the kernel moving their bytes)."""
    def handle(c):
        try:
            buf = b""
            while True:
                while b"\r\n\r\n" not in buf:
                    data = c.recv(65536)
                    if not data:
                        return
                    buf += data
                head, buf = buf.split(b"\r\n\r\n", 1)
                if b"upgrade:" in head.lower():
                    while c.recv(65536):
                        pass
                    return
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                while len(buf) < length:
                    data = c.recv(1 << 20)
                    if not data:
                        return
                    buf += data
                buf = buf[length:]
                c.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        except OSError:
            pass
        finally:
            c.close()
    while True:
        c, _ = listener.accept()
        threading.Thread(target=handle, args=(c,), daemon=True).start()


multiprocessing.set_start_method("fork")
seed()
idle = run_phase("idle", False)
# RATE_like=n etc.: each client of that bomb kind paced to n requests a second in the hostile phase.
hostile = run_phase("hostile", True, pace={k: float(os.environ["RATE_" + k]) for k in ("regex", "regexdoc", "like") if os.environ.get("RATE_" + k)})
idle2 = run_phase("idle-after", False)
# The idle reference is the lower of the two idle phases' p99 (the conservative choice: the first
# may still share the machine with PostgreSQL's work after seeding, which flatters the ratio).
idle_p99 = min(p for p in (idle["p99"], idle2["p99"]) if p) if idle["p99"] or idle2["p99"] else None
ratio = hostile["p99"] / idle_p99 if idle_p99 else None
summary = {"idle_p99": idle_p99, "p99_ratio_hostile_over_idle": round(ratio, 2) if ratio else None}
if os.environ.get("CONTROL", "1") == "1":
    # The control: the same hostile clients, aimed at a sink that does nothing for them, while the
    # normal client reads from the server as before. Its p99 is what the attack's traffic alone
    # costs the normal client on this machine (the load generator shares the server's cores).
    listener = socket.create_server((HOST, 0), backlog=512)
    sink = multiprocessing.Process(target=on_attacker_cpus(sink_server), args=(listener,), daemon=True)
    sink.start()
    # Each bomb client sends as many requests a second as it got answered in the hostile phase:
    # the sink answers at once, and unpaced the control would be a far heavier attack.
    pace = {kind: sum(n for k, n in hostile["hostile"].items() if k.startswith(kind + ":")) / SECONDS / 2 for kind in ("regex", "regexdoc", "like")}
    control = run_phase("control", True, target=listener.getsockname()[1], pace=pace)
    sink.terminate()
    summary["p99_ratio_control_over_idle"] = round(control["p99"] / idle_p99, 2) if idle_p99 else None
    summary["p99_ratio_hostile_over_control"] = round(hostile["p99"] / control["p99"], 2) if control["p99"] else None
print(json.dumps(summary))
