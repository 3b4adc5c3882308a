"""Small peers meshing on the LAN (issue #19), run by scripts/lan-discovery.sh: a node and small
peers (`bigpeer peer --lan --listen`) in network namespaces, found by mDNS alone.

    hub bridge 10.96.0.0/24:  node   peer-1   peer-2   intruder
                                                 |
    veth 10.96.1.0/24:                        peer-3
                                                 |
    veth 10.96.2.0/24:                        peer-4

  1. Discovery and one link per pair: peer-1 and peer-2 link with the node and with each other,
     and the presence graph the node answers shows exactly one connection for each pair.
  2. Sync both ways: a write on peer-1 reaches the node and peer-2; a write on the node (REST)
     reaches both peers.
  3. A three-hop chain: a write on peer-4 reaches the node through peer-3 and peer-2 (and a node
     write reaches peer-4 back), and the node's presence shows peer-4, three hops away.
  4. A denied peer: the node's --peer-policy denies the device name `intruder`; its
     `bigpeer peer --lan --sync-once` is refused with 4003 and the reason.
  5. Remote execution: POST /api/v4/sync/remote_execute on the node runs a SELECT on its two
     directly connected small peers: peer-1 allows remote queries and answers with its items,
     peer-2 does not and answers with an error; PEERS WHERE deviceName picks one peer.
Exits non-zero on the first failure; every process's whole log is kept then (lan_netns.py).

To chase a flaky case: BIGPEER_MESH_CASES=chain runs only the checks named (a comma list of
discovery, sync, chain, policy, remote; the links are always waited for, and the node's write the
chain carries back is made when `sync` is not run), and BIGPEER_MESH_RUNS=N runs it all N times,
each time with new namespaces, processes and peer keys (so each time the links go their own way),
stopping at the first failure (BIGPEER_MESH_KEEP_GOING=1: counting them instead)."""
import json, os, sys, time

os.environ.setdefault("BIGPEER_NETNS_TAG", "bm")
import lan_netns
from lan_netns import (TAG, Failed, Peer, attach, bridge, cleanup, eventually, fail, ns_add, rest, run, serve, wait_log, wire)

GROUP = 21
NODE_PORT = 18086
SUBSCRIBE = ["--subscribe", "SELECT * FROM notes"]


def node_ids():
    r = rest(node, NODE_PORT, "POST", "/api/v4/store/execute", {"statement": "SELECT * FROM notes ORDER BY _id"})
    return [d["_id"] for d in r["items"]] if r else []


def synced(peer, doc_id):
    """Whether `peer` printed the arrival of document doc_id through sync."""
    return any(l.get("event") == "upsert" and doc_id in json.dumps(l) for l in peer.lines())


def presence():
    return rest(node, NODE_PORT, "GET", "/api/v4/presence") or {}


def keys_by_name(graph):
    peers = [graph.get("localPeer", {})] + graph.get("remotePeers", [])
    return {p.get("deviceName"): p.get("peerKey") for p in peers}


def links_between(graph, a, b):
    """The distinct connections (ids) between the peers named a and b, as the graph lists them."""
    keys = keys_by_name(graph)
    if a not in keys or b not in keys:
        return None
    ids = set()
    for p in [graph.get("localPeer", {})] + graph.get("remotePeers", []):
        for c in p.get("connections", []):
            if {c.get("peerKeyString1"), c.get("peerKeyString2")} == {keys[a], keys[b]}:
                ids.add(c.get("id"))
    return ids


def held(peer, doc_id):
    """Whether `peer`'s store holds doc_id (a SELECT on its prompt; None: no answer within 5 s)."""
    before = len(peer.lines())
    peer.execute(f"SELECT * FROM notes WHERE _id = '{doc_id}'")
    deadline = time.time() + 5
    while time.time() < deadline:
        answers = [l for l in peer.lines()[before:] if l.get("queryType") == "select"]
        if answers:
            return bool(answers[-1].get("items"))
        time.sleep(0.05)
    return None


def arrived(peer, doc_id, what, timeout=30):
    """Waits until `peer` printed doc_id's arrival through sync; when it did not, says whether the
    document is in its store all the same (a change that arrived unannounced) or not (it never came)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if synced(peer, doc_id):
            return
        time.sleep(0.1)
    fail(f"{what} within {timeout} s (in {peer.name}'s store: {held(peer, doc_id)})")


def run_once():
    global node
    hub = ns_add(f"{TAG}h")
    node, p1, p2, p3, p4, intruder = (ns_add(f"{TAG}{n}") for n in ("n", "1", "2", "3", "4", "x"))
    bridge(hub)
    for i, n in enumerate((node, p1, p2, intruder)):
        attach(n, hub, "br0", f"{TAG}i{i}", f"10.96.0.{i + 1}/24")
    wire(p2, f"{TAG}c2", "10.96.1.1/24", p3, f"{TAG}c3", "10.96.1.2/24")
    wire(p3, f"{TAG}d3", "10.96.2.1/24", p4, f"{TAG}d4", "10.96.2.2/24")

    policy = os.path.join(lan_netns.WORK, "policy.json")
    with open(policy, "w") as f:
        json.dump({"version": 1, "default": "allow", "rules": [
            {"name": "no intruders", "action": "deny", "deviceName": "intruder", "reason": "not on this ship", "retryAfterSeconds": 600}]}, f)
    serve(node, "node", "ship-node", GROUP, NODE_PORT, ["--peer-policy", policy])
    wait_log("node", "advertised on the LAN", 90)

    common = ["--lan", "--listen", "--sync-group", str(GROUP), *SUBSCRIBE]
    peer1 = Peer(p1, "peer-1", [*common, "--allow-remote-query"])
    peer2 = Peer(p2, "peer-2", common)
    peer3 = Peer(p3, "peer-3", common)
    peer4 = Peer(p4, "peer-4", common)

    # 1. One link per pair, seen in the node's presence graph.
    started = time.time()
    eventually("the node's presence shows peer-1 and peer-2 linked with it and with each other", lambda: all(
        links_between(presence(), a, b) for a, b in (("ship-node", "peer-1"), ("ship-node", "peer-2"), ("peer-1", "peer-2"))))
    if "discovery" in CASES:
        graph = presence()
        counts = {f"{a}-{b}": len(links_between(graph, a, b)) for a, b in (("ship-node", "peer-1"), ("ship-node", "peer-2"), ("peer-1", "peer-2"))}
        if any(n != 1 for n in counts.values()):
            fail(f"links per pair: {counts}")
        print(f"==> discovery: peer-1, peer-2 and the node linked pairwise, one link each {counts}, in {time.time() - started:.1f} s", flush=True)

    # 2. Both ways.
    if "sync" in CASES:
        peer1.execute("INSERT INTO notes DOCUMENTS ({'_id': 'from-peer-1'})")
        eventually("peer-1's write on the node", lambda: "from-peer-1" in node_ids())
        arrived(peer2, "from-peer-1", "peer-1's write on peer-2")
    if "sync" in CASES or "chain" in CASES:
        rest(node, NODE_PORT, "POST", "/api/v4/store/execute", {"statement": "INSERT INTO notes DOCUMENTS ({'_id': 'from-node'})"})
    if "sync" in CASES:
        arrived(peer1, "from-node", "the node's write on peer-1")
        arrived(peer2, "from-node", "the node's write on peer-2")
        print("==> sync both ways: peer-1 -> node, peer-2; node -> peer-1, peer-2", flush=True)

    # 3. peer-4 -> peer-3 -> peer-2 -> node, and back.
    if "chain" in CASES:
        peer4.execute("INSERT INTO notes DOCUMENTS ({'_id': 'from-peer-4'})")
        started = time.time()
        eventually("peer-4's write on the node, three hops away", lambda: "from-peer-4" in node_ids(), timeout=45)
        hops = time.time() - started
        arrived(peer4, "from-node", "the node's write on peer-4", timeout=45)
        eventually("peer-4 in the node's presence", lambda: "peer-4" in keys_by_name(presence()))
        far = next(p for p in presence()["remotePeers"] if p["deviceName"] == "peer-4")
        if links_between(presence(), "ship-node", "peer-4"):
            fail("the node shows a direct link with peer-4, which cannot reach it")
        print(f"==> three-hop chain: peer-4's write on the node after {hops:.1f} s, the node's on peer-4; "
              f"presence shows peer-4 ({far['peerKey']}) as a remote peer", flush=True)

    # 4. The policy refuses the intruder.
    if "policy" in CASES:
        r = run("ip", "netns", "exec", intruder, sys.argv[1], "peer", "--data", os.path.join(lan_netns.WORK, "intruder"), "--name", "intruder",
                "--lan", "--sync-group", str(GROUP), *SUBSCRIBE, "--sync-once", "--timeout", "20", check=False)
        if r.returncode == 0 or "not on this ship" not in r.stderr:
            fail(f"the intruder was not refused: exit {r.returncode}, err {r.stderr!r}")
        wait_log("node", "sync peer denied by the connection policy", 10)
        print(f"==> denied peer refused: {r.stderr.strip().splitlines()[-1]}", flush=True)

    # 5. Remote execution on the node's two direct small peers.
    if "remote" in CASES:
        answer = rest(node, NODE_PORT, "POST", "/api/v4/sync/remote_execute",
                      {"statement": "SYNC CONTEXT (PEERS WHERE deviceName LIKE 'peer-%') SELECT * FROM notes ORDER BY _id"})
        results = {r["deviceName"]: r for r in (answer or {}).get("result", [])}
        if set(results) != {"peer-1", "peer-2"}:
            fail(f"remote_execute answered for {sorted(results)}: {answer}")
        items = [i["_id"] for i in results["peer-1"]["items"]]
        if results["peer-1"]["error"] is not None or "from-node" not in items or ("sync" in CASES and "from-peer-1" not in items):
            fail(f"peer-1's remote answer: {results['peer-1']}")
        if results["peer-2"]["error"] is None:
            fail(f"peer-2 answered although it does not allow remote queries: {results['peer-2']}")
        one = rest(node, NODE_PORT, "POST", "/api/v4/sync/remote_execute",
                   {"statement": "SYNC CONTEXT (PEERS WHERE deviceName = :name) SELECT * FROM notes", "args": {"name": "peer-1"}})
        if [r["deviceName"] for r in (one or {}).get("result", [])] != ["peer-1"]:
            fail(f"PEERS WHERE deviceName = 'peer-1': {one}")
        print(f"==> remote_execute: peer-1 answered {len(items)} items in {results['peer-1']['elapsedMilliseconds']} ms, "
              f"peer-2 refused ({results['peer-2']['error']['description']})", flush=True)


ALL_CASES = ("discovery", "sync", "chain", "policy", "remote")
CASES = [c.strip() for c in os.environ.get("BIGPEER_MESH_CASES", ",".join(ALL_CASES)).split(",") if c.strip()]
if set(CASES) - set(ALL_CASES):
    sys.exit(f"BIGPEER_MESH_CASES: unknown {sorted(set(CASES) - set(ALL_CASES))}; known: {', '.join(ALL_CASES)}")
RUNS = int(os.environ.get("BIGPEER_MESH_RUNS", "1"))
KEEP_GOING = os.environ.get("BIGPEER_MESH_KEEP_GOING") == "1"

passed = failed = 0
for i in range(RUNS):
    if RUNS > 1:
        print(f"==> run {i + 1} of {RUNS} ({', '.join(CASES)})", flush=True)
    if i > 0:
        lan_netns.reset()
    try:
        run_once()
        passed += 1
    except Failed:
        failed += 1
        if not KEEP_GOING:
            print(f"==> LAN mesh: failed on run {i + 1} after {passed} passed", flush=True)
            sys.exit(1)
    finally:
        cleanup()
if RUNS > 1:
    print(f"==> LAN mesh: {passed} passed, {failed} failed of {RUNS} runs ({', '.join(CASES)})", flush=True)
if failed:
    sys.exit(1)
print("==> LAN mesh: all checks passed", flush=True)
