"""LAN discovery checks for scripts/lan-discovery.sh: BigPeer nodes and peers in network namespaces
joined by a bridge (multicast snooping off), python-zeroconf as the independent implementation.

  1. python-zeroconf finds a node's NAME._bigpeer._tcp.local. with its SRV port, TXT v/pk/g/role
     and its address; `bigpeer lan browse` finds a service python-zeroconf registers.
  2. Two nodes started with the same device name: exactly one renames (NAME (2)).
  3. SIGTERM: the goodbye (TTL 0 records for the instance) is on the wire within 1 s.
  4. `bigpeer peer --lan --sync-once` finds the node of its sync group and syncs a document;
     the time from its start to the end of the sync is printed (goal < 1.5 s).
  5. With 20 % of mDNS datagrams dropped on arrival in both namespaces (nftables `numgen random`;
     this kernel has no netem) while a new node probes and announces and a peer browses: the
     node is still found and synced with, and its name is not taken as a conflict.
  6. An IPv6-only link (link-local addresses alone): the peer dials the node at
     tcp://[fe80::…%25IFINDEX]:4040 and syncs.
  7. Two nodes of one sync group (`bigpeer serve --lan --lan-subscribe ...`) find each other:
     exactly one dials (the lower peer key), a document written on either reaches the other,
     and `GET /api/v4/upstream` shows one dialling link and one accepting side.
Small peers linking with each other (`bigpeer peer --lan --listen`) are checked by lan_mesh_test.py.
Exits non-zero on the first failure."""
import json, os, signal, socket, subprocess, sys, time
from zeroconf import DNSIncoming, IPVersion, ServiceBrowser, ServiceInfo, ServiceListener, Zeroconf

from lan_netns import BIN, TAG, WORK, cleanup, crew_ids, fail, in_ns, ns_add, processes, rest, run, serve, wait_log

class Collect(ServiceListener):
    def __init__(self):
        self.added, self.removed = {}, {}

    def add_service(self, zc, type_, name):
        self.added[name] = zc.get_service_info(type_, name, timeout=3000)

    def remove_service(self, zc, type_, name):
        self.removed[name] = time.time()

    def update_service(self, zc, type_, name):
        pass


try:
    a, b, c, hub = ns_add(f"{TAG}a"), ns_add(f"{TAG}b"), ns_add(f"{TAG}c"), ns_add(f"{TAG}h")
    run("ip", "netns", "exec", hub, "ip", "link", "add", "br0", "type", "bridge", "mcast_snooping", "0")
    run("ip", "netns", "exec", hub, "ip", "link", "set", "br0", "up")
    for i, n in enumerate([a, b, c]):
        inner, port = f"{TAG}i{i}", f"{TAG}p{i}"
        run("ip", "link", "add", inner, "netns", n, "type", "veth", "peer", "name", port, "netns", hub)
        run("ip", "netns", "exec", n, "ip", "addr", "add", f"10.99.0.{i + 1}/24", "dev", inner)
        run("ip", "netns", "exec", n, "ip", "link", "set", inner, "up")
        run("ip", "netns", "exec", hub, "ip", "link", "set", port, "master", "br0")
        run("ip", "netns", "exec", hub, "ip", "link", "set", port, "up")

    # 1. A node in A, seen by python-zeroconf in B.
    serve(a, "node-a", "ship-node", 7, 18080)
    wait_log("node-a", "advertised on the LAN", 60)
    zc = in_ns(b, lambda: Zeroconf(ip_version=IPVersion.All))
    seen = Collect()
    ServiceBrowser(zc, "_bigpeer._tcp.local.", seen)
    deadline = time.time() + 15
    while time.time() < deadline and "ship-node._bigpeer._tcp.local." not in seen.added:
        time.sleep(0.05)
    info = seen.added.get("ship-node._bigpeer._tcp.local.")
    if info is None:
        fail("python-zeroconf did not find ship-node._bigpeer._tcp.local.")
    props = {k.decode(): (v.decode() if v is not None else None) for k, v in info.properties.items()}
    if info.port != 4040 or props.get("v") != "1" or props.get("g") != "7" or props.get("role") != "node" or len(props.get("pk", "")) != 16:
        fail(f"SRV/TXT: port {info.port}, TXT {props}")
    if "10.99.0.1" not in info.parsed_addresses():
        fail(f"addresses {info.parsed_addresses()}")
    print(f"==> python-zeroconf found ship-node: port {info.port}, TXT {props}, addresses {info.parsed_addresses()}", flush=True)

    # ... and `bigpeer lan browse` in B finds a service python-zeroconf registers in C.
    zc_c = in_ns(c, lambda: Zeroconf(ip_version=IPVersion.V4Only))
    zc_c.register_service(ServiceInfo("_bigpeer._tcp.local.", "zeroconf-peer._bigpeer._tcp.local.", port=4555,
                                      properties={"v": "1", "pk": "00aa", "g": "7", "role": "peer"},
                                      addresses=[socket.inet_aton("10.99.0.3")], server="zc-host.local."))
    out = run("ip", "netns", "exec", b, BIN, "lan", "browse", "--timeout", "4").stdout
    events = [json.loads(line) for line in out.splitlines() if line.strip()]
    zc_peer = [e for e in events if e.get("name") == "zeroconf-peer" and e["event"] in ("found", "updated")]
    if not zc_peer or zc_peer[-1]["port"] != 4555 or "10.99.0.3" not in zc_peer[-1]["addresses"] or not zc_peer[-1]["bigpeer"]:
        fail(f"bigpeer lan browse did not find python-zeroconf's service: {events}")
    print(f"==> bigpeer lan browse found python-zeroconf's zeroconf-peer: {zc_peer[-1]}", flush=True)
    zc_c.unregister_all_services()
    zc_c.close()

    # 2. A second node with the same device name in C: exactly one of the two renames.
    serve(c, "node-c", "ship-node", 7, 18081)
    wait_log("node-c", "advertised on the LAN", 60)
    time.sleep(1)
    names = []
    for n in ("node-a", "node-c"):
        lines = [l for l in open(os.path.join(WORK, f"{n}.log")) if "advertised on the LAN" in l]
        names.append(lines[-1].split("name=")[1].split(" type=")[0])
    if sorted(names) != ["ship-node", "ship-node (2)"]:
        fail(f"same-name nodes ended as {names}")
    deadline = time.time() + 10
    while time.time() < deadline and "ship-node (2)._bigpeer._tcp.local." not in seen.added:
        time.sleep(0.05)
    if "ship-node (2)._bigpeer._tcp.local." not in seen.added:
        fail(f"python-zeroconf did not see the renamed node: {list(seen.added)}")
    print(f"==> same device name: the nodes advertise {names}", flush=True)

    # 3. SIGTERM the renamed one: its goodbye is on the wire within 1 s.
    renamed = processes[1] if names[1] == "ship-node (2)" else processes[0]
    renamed_ns = c if renamed is processes[1] else a
    sniffer = in_ns(b, lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
    sniffer.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sniffer.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sniffer.bind(("0.0.0.0", 5353))
    sniffer.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, socket.inet_aton("224.0.0.251") + socket.inet_aton("10.99.0.2"))
    sniffer.settimeout(0.1)
    sent = time.time()
    renamed.send_signal(signal.SIGTERM)
    goodbye = None
    while time.time() < sent + 3 and goodbye is None:
        try:
            data, _ = sniffer.recvfrom(9000)
        except socket.timeout:
            continue
        message = DNSIncoming(data)
        if any(r.name == "ship-node (2)._bigpeer._tcp.local." and r.ttl == 0 for r in message.answers()):
            goodbye = time.time() - sent
    sniffer.close()
    if goodbye is None or goodbye > 1.0:
        fail(f"goodbye after SIGTERM: {goodbye}")
    renamed.wait(timeout=15)
    print(f"==> SIGTERM: goodbye on the wire after {goodbye * 1000:.0f} ms", flush=True)
    zc.close()

    # 4. A small peer in B finds the remaining node of group 7 and syncs a document from it.
    survivor_ns = a if renamed_ns == c else c
    survivor_port = 18080 if survivor_ns == a else 18081
    body = json.dumps({"statement": "INSERT INTO notes DOCUMENTS ({'_id': 'over-the-lan'})"})
    r = run("ip", "netns", "exec", survivor_ns, "curl", "-sf", f"http://127.0.0.1:{survivor_port}/api/v4/store/execute",
            "-H", "Content-Type: application/json", "-d", body, check=False)
    if r.returncode != 0:
        fail(f"REST insert on the node: {r.stderr}")
    started = time.time()
    peer = run("ip", "netns", "exec", b, BIN, "peer", "--data", os.path.join(WORK, "peer"), "--lan", "--sync-group", "7",
               "--subscribe", "SELECT * FROM notes", "--sync-once", "--timeout", "20", check=False)
    elapsed = time.time() - started
    if peer.returncode != 0 or "over-the-lan" not in peer.stdout:
        fail(f"bigpeer peer --lan: exit {peer.returncode}, out {peer.stdout!r}, err {peer.stderr!r}")
    print(f"==> bigpeer peer --lan: {peer.stderr.strip()}; synced in {elapsed:.2f} s (start to end of --sync-once, "
          f"including its 0.75 s quiet period)", flush=True)

    # 5. 20 % loss on arrival of mDNS in the browsing and the advertising namespace.
    for n in (b, c):
        run("ip", "netns", "exec", n, "nft", "add", "table", "inet", "lossy")
        run("ip", "netns", "exec", n, "nft", "add", "chain", "inet", "lossy", "input", "{ type filter hook input priority 0; }")
        run("ip", "netns", "exec", n, "nft", "add", "rule", "inet", "lossy", "input", "udp", "dport", "5353", "numgen", "random", "mod", "100", "<", "20", "drop")
    serve(c, "node-lossy", "lossy-node", 9, 18082)
    wait_log("node-lossy", "advertised on the LAN", 60)
    lossy_name = [l for l in open(os.path.join(WORK, "node-lossy.log")) if "advertised on the LAN" in l][-1].split("name=")[1].split(" type=")[0]
    if lossy_name != "lossy-node":
        fail(f"under loss the node took the name {lossy_name!r}")
    body = json.dumps({"statement": "INSERT INTO notes DOCUMENTS ({'_id': 'through-loss'})"})
    run("ip", "netns", "exec", c, "curl", "-sf", "http://127.0.0.1:18082/api/v4/store/execute", "-H", "Content-Type: application/json", "-d", body)
    started = time.time()
    peer = run("ip", "netns", "exec", b, BIN, "peer", "--data", os.path.join(WORK, "peer-lossy"), "--lan", "--sync-group", "9",
               "--subscribe", "SELECT * FROM notes", "--sync-once", "--timeout", "30", check=False)
    if peer.returncode != 0 or "through-loss" not in peer.stdout:
        fail(f"under 20 % loss, bigpeer peer --lan: exit {peer.returncode}, out {peer.stdout!r}, err {peer.stderr!r}")
    print(f"==> 20 % mDNS loss: {peer.stderr.strip()}; synced in {time.time() - started:.2f} s", flush=True)

    # 6. Two more namespaces on a veth pair with no IPv4 at all: link-local IPv6 only.
    d, e = ns_add(f"{TAG}d"), ns_add(f"{TAG}e")
    run("ip", "link", "add", f"{TAG}vd", "netns", d, "type", "veth", "peer", "name", f"{TAG}ve", "netns", e)
    run("ip", "netns", "exec", d, "ip", "link", "set", f"{TAG}vd", "up")
    run("ip", "netns", "exec", e, "ip", "link", "set", f"{TAG}ve", "up")
    serve(d, "node-v6", "v6-node", 11, 18083)
    wait_log("node-v6", "advertised on the LAN", 60)
    body = json.dumps({"statement": "INSERT INTO notes DOCUMENTS ({'_id': 'over-link-local'})"})
    run("ip", "netns", "exec", d, "curl", "-sf", "http://127.0.0.1:18083/api/v4/store/execute", "-H", "Content-Type: application/json", "-d", body)
    peer = run("ip", "netns", "exec", e, BIN, "peer", "--data", os.path.join(WORK, "peer-v6"), "--lan", "--sync-group", "11",
               "--subscribe", "SELECT * FROM notes", "--sync-once", "--timeout", "30", check=False)
    if peer.returncode != 0 or "over-link-local" not in peer.stdout or "%25" not in peer.stderr:
        fail(f"IPv6 link-local only: exit {peer.returncode}, out {peer.stdout!r}, err {peer.stderr!r}")
    print(f"==> IPv6 link-local only: {peer.stderr.strip()}", flush=True)

    # 7. Two nodes of sync group 13 on a link of their own: they pair up by themselves.
    f, g = ns_add(f"{TAG}f"), ns_add(f"{TAG}g")
    run("ip", "link", "add", f"{TAG}vf", "netns", f, "type", "veth", "peer", "name", f"{TAG}vg", "netns", g)
    for n, dev, address in ((f, f"{TAG}vf", "10.98.0.1/24"), (g, f"{TAG}vg", "10.98.0.2/24")):
        run("ip", "netns", "exec", n, "ip", "addr", "add", address, "dev", dev)
        run("ip", "netns", "exec", n, "ip", "link", "set", dev, "up")
    mesh = ["--lan-subscribe", "SELECT * FROM crew", "--lan-link-grace", "5"]
    serve(f, "mesh-f", "mesh-f", 13, 18084, mesh)
    serve(g, "mesh-g", "mesh-g", 13, 18085, mesh)
    for name in ("mesh-f", "mesh-g"):
        wait_log(name, "advertised on the LAN", 60)
    rest(f, 18084, "POST", "/api/v4/store/execute", {"statement": "INSERT INTO crew DOCUMENTS ({'_id': 'from-f'})"})
    rest(g, 18085, "POST", "/api/v4/store/execute", {"statement": "INSERT INTO crew DOCUMENTS ({'_id': 'from-g'})"})
    started = time.time()
    while time.time() < started + 30 and not (crew_ids(f, 18084) == crew_ids(g, 18085) == ["from-f", "from-g"]):
        time.sleep(0.1)
    if not (crew_ids(f, 18084) == crew_ids(g, 18085) == ["from-f", "from-g"]):
        fail(f"two nodes of one group did not replicate: f {crew_ids(f, 18084)}, g {crew_ids(g, 18085)}")
    replicated = time.time() - started

    # Each node lists the other once in lanLinks, one dialling (connected) and one accepting. The
    # dialler may link before the other side's browser has seen its advertisement (a loaded
    # machine), so this is waited for, not read once.
    dialled, deadline = None, time.time() + 30
    while dialled is None:
        statuses = [rest(f, 18084, "GET", "/api/v4/upstream"), rest(g, 18085, "GET", "/api/v4/upstream")]
        links = [s["lanLinks"] if s else None for s in statuses]
        if all(l is not None and len(l) == 1 for l in links):
            dialling = [l[0] for l in links if l[0]["dials"] and l[0]["state"] == "connected"]
            accepting = [l[0] for l in links if not l[0]["dials"] and l[0]["state"] == "accepting"]
            if len(dialling) == 1 and len(accepting) == 1:
                dialled = dialling[0]
                break
        if time.time() > deadline:
            fail(f"not exactly one link within 30 s: lanLinks {links}")
        time.sleep(0.1)
    linking = sum(open(os.path.join(WORK, f"{n}.log")).read().count("linking with a LAN node") for n in ("mesh-f", "mesh-g"))
    if linking != 1:
        fail(f"{linking} links dialled between two nodes")
    print(f"==> two nodes of one group: one link ({dialled['deviceName']} dialled at {dialled['url']}), "
          f"both documents on both in {replicated:.2f} s", flush=True)

    print("==> LAN discovery: all checks passed", flush=True)
finally:
    cleanup()
