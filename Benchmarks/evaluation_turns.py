#!/usr/bin/env python3
"""How long one client's heavy statement waits while another client keeps the evaluation threads busy.

    evaluation_turns.py URL KEY_PILE KEY_OTHER [seconds=15] [pile=12]

A heavy statement here is a per-document regex over DOCS documents (evaluated in memory, off the
event loops). Phases, each bounded in time:
  alone  the other client sends the heavy statement, one at a time;
  pile   the same, while PILE connections with the pile's own key send it in a loop.
Prints one JSON line per phase (the other client's count, p50, p90, max in ms; the pile's answers)
and the p50 ratio pile/alone. With one FIFO for every client the other client waits behind the
whole pile; with turns per tenant, behind one of its statements.
"""
import http.client, json, statistics, sys, threading, time, urllib.parse

URL, KEY_PILE, KEY_OTHER = sys.argv[1], sys.argv[2], sys.argv[3]
SECONDS = float(sys.argv[4]) if len(sys.argv) > 4 else 15.0
PILE = int(sys.argv[5]) if len(sys.argv) > 5 else 12
DOCS = 5000
u = urllib.parse.urlparse(URL)
HEAVY = json.dumps({"statement": "SELECT _id FROM et_docs WHERE regexp_like(s, :p) LIMIT 1", "args": {"p": "^(a|a)*$"}}).encode()


def execute(conn, key, body):
    conn.request("POST", "/api/v4/store/execute", body=body,
                 headers={"Authorization": "Bearer " + key, "Content-Type": "application/json"})
    r = conn.getresponse()
    r.read()
    return r.status


def seed():
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=300)
    docs = ",".join("({'_id': 'e%d', 's': :s})" % i for i in range(DOCS))
    body = json.dumps({"statement": "INSERT INTO et_docs DOCUMENTS " + docs + " ON ID CONFLICT DO NOTHING",
                       "args": {"s": "a" * 25 + "b"}}).encode()
    if execute(conn, KEY_PILE, body) != 200:
        sys.exit("seeding failed")


def pile_loop(stop_at, counts):
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
    while time.monotonic() < stop_at:
        status = execute(conn, KEY_PILE, HEAVY)
        with lock:
            counts[status] = counts.get(status, 0) + 1


def phase(name, pile):
    stop_at = time.monotonic() + SECONDS
    counts = {}
    threads = [threading.Thread(target=pile_loop, args=(stop_at, counts), daemon=True) for _ in range(pile)]
    for t in threads:
        t.start()
    time.sleep(1 if pile else 0)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
    lat, errors = [], 0
    while time.monotonic() < stop_at:
        t = time.perf_counter()
        if execute(conn, KEY_OTHER, HEAVY) != 200:
            errors += 1
        lat.append((time.perf_counter() - t) * 1000)
        time.sleep(0.05)
    for t in threads:
        t.join(timeout=130)
    lat.sort()
    out = {"phase": name, "count": len(lat), "errors": errors, "p50": round(statistics.median(lat), 1),
           "p90": round(lat[min(len(lat) - 1, int(len(lat) * 0.9))], 1), "max": round(lat[-1], 1), "pile_answers": counts}
    print(json.dumps(out), flush=True)
    return out


lock = threading.Lock()
seed()
alone = phase("alone", 0)
piled = phase("pile", PILE)
print(json.dumps({"p50_ratio_pile_over_alone": round(piled["p50"] / alone["p50"], 2)}))
