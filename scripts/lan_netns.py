"""Network namespaces for the LAN checks (lan_discovery_test.py, lan_mesh_test.py): namespaces,
links and bridges this process creates and removes, `bigpeer serve --lan` nodes and `bigpeer peer`
processes inside them, their logs under WORK. Multicast never reaches a real interface.

On a failure every process's whole log and output (WORK/*.log, WORK/*.out) is kept in
$BIGPEER_LAN_LOG_DIR (default /tmp/bigpeer-lan-logs-TAG-TIME; CI can upload it) and the last
$BIGPEER_LAN_TAIL_LINES lines of each (default 40) are printed.

Import it with the bigpeer binary as sys.argv[1]."""
import ctypes, json, os, shutil, subprocess, sys, tempfile, threading, time
from collections import deque

BIN = sys.argv[1]
TAG = os.environ.get("BIGPEER_NETNS_TAG", "bl") + f"{os.getpid() % 100000}"
WORK = tempfile.mkdtemp(prefix="bigpeer-lan-")
os.chmod(WORK, 0o755)
namespaces, processes = [], []


def child_env():
    """This environment without the harness's own variables: bigpeer reads BIGPEER_* as options
    and warns about each one no option reads (a line per variable in every log)."""
    harness = ("BIGPEER_BIN", "BIGPEER_NETNS_TAG", "BIGPEER_ZEROCONF_VENV", "BIGPEER_LAN_LOG_DIR", "BIGPEER_LAN_TAIL_LINES")
    return {k: v for k, v in os.environ.items() if k not in harness and not k.startswith("BIGPEER_MESH_")}


def run(*args, check=True, **kw):
    return subprocess.run(list(args), check=check, capture_output=True, text=True, **kw)


def ns_add(name):
    run("ip", "netns", "add", name)
    namespaces.append(name)
    run("ip", "netns", "exec", name, "ip", "link", "set", "lo", "up")
    run("ip", "netns", "exec", name, "sh", "-c",
        "echo 0 > /proc/sys/net/ipv6/conf/all/accept_dad; echo 0 > /proc/sys/net/ipv6/conf/default/accept_dad")
    return name


def stop_processes():
    for p in processes:
        if p.poll() is None:
            p.kill()
            p.wait()


def cleanup():
    stop_processes()
    for n in namespaces:
        run("ip", "netns", "del", n, check=False)
    namespaces.clear()
    processes.clear()
    shutil.rmtree(WORK, ignore_errors=True)


def reset():
    """A fresh WORK and no namespaces or processes, for another run in the same process (after cleanup)."""
    global WORK
    WORK = tempfile.mkdtemp(prefix="bigpeer-lan-")
    os.chmod(WORK, 0o755)


def keep_logs():
    """Copies every process's log and output (whole) out of WORK before it is removed; returns where."""
    kept = os.environ.get("BIGPEER_LAN_LOG_DIR") or f"/tmp/bigpeer-lan-logs-{TAG}-{time.strftime('%H%M%S')}"
    os.makedirs(kept, exist_ok=True)
    for name in sorted(os.listdir(WORK)):
        if name.endswith((".log", ".out")):
            shutil.copy(os.path.join(WORK, name), os.path.join(kept, name))
    return kept


class Failed(SystemExit):
    """A failed check (exit status 1): the logs are kept and WORK is cleaned up already."""


def fail(message):
    print(f"==> {os.path.basename(sys.argv[0])}: FAILED: {message}", flush=True)
    stop_processes()  # their logs are complete from here on
    kept = keep_logs()
    lines = int(os.environ.get("BIGPEER_LAN_TAIL_LINES", "40"))
    for name in sorted(os.listdir(kept)):
        with open(os.path.join(kept, name), errors="replace") as f:
            tail = deque(f, maxlen=lines)
        print(f"--- {name} (last {len(tail)} lines):\n" + "".join(tail), flush=True)
    print(f"==> every process's whole log and output: {kept}", flush=True)
    # Again at the end: CI shows a run's last lines, and the logs above push the first copy out.
    print(f"==> {os.path.basename(sys.argv[0])}: FAILED: {message}", flush=True)
    cleanup()
    raise Failed(1)


LIBC = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNET = 0x40000000


def setns(fd):
    if LIBC.setns(fd, CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "setns")


def in_ns(ns, fn):
    """Runs fn with this thread in namespace ns (sockets made meanwhile belong there, and threads
    started meanwhile, such as python-zeroconf's, run there)."""
    fd = os.open(f"/var/run/netns/{ns}", os.O_RDONLY)
    home = os.open(f"/proc/self/task/{threading.get_native_id()}/ns/net", os.O_RDONLY)
    try:
        setns(fd)
        return fn()
    finally:
        setns(home)
        os.close(fd)
        os.close(home)


def serve(ns, name, device, group, http_port, extra=()):
    log = open(os.path.join(WORK, f"{name}.log"), "w")
    p = subprocess.Popen(["ip", "netns", "exec", ns, BIN, "serve", "--port", str(http_port), "--threads", "1", "--insecure-dev",
                          "--data-dir", os.path.join(WORK, name), "--log-level", "info",
                          "--lan", "--device-name", device, "--sync-group", str(group), *extra], stdout=log, stderr=subprocess.STDOUT,
                         env=child_env())
    processes.append(p)
    return p


def rest(ns, port, method, path, body=None):
    args = ["ip", "netns", "exec", ns, "curl", "-sf", f"http://127.0.0.1:{port}{path}"]
    if body is not None:
        args += ["-H", "Content-Type: application/json", "-d", json.dumps(body)]
    r = run(*args, check=False)
    return json.loads(r.stdout) if r.returncode == 0 and r.stdout else None


def crew_ids(ns, port):
    r = rest(ns, port, "POST", "/api/v4/store/execute", {"statement": "SELECT * FROM crew ORDER BY _id"})
    return [d["_id"] for d in r["items"]] if r else None


def wait_log(name, text, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        content = open(os.path.join(WORK, f"{name}.log")).read()
        if text in content:
            return content
        time.sleep(0.05)
    fail(f"{name}: no '{text}' within {timeout} s")


def bridge(hub, name="br0"):
    """A bridge in namespace hub with multicast snooping off (mDNS reaches every port)."""
    run("ip", "netns", "exec", hub, "ip", "link", "add", name, "type", "bridge", "mcast_snooping", "0")
    run("ip", "netns", "exec", hub, "ip", "link", "set", name, "up")


def attach(ns, hub, bridge_name, iface, address):
    """A veth from ns (named iface, with address) to a port of hub's bridge."""
    port = iface + "p"
    run("ip", "link", "add", iface, "netns", ns, "type", "veth", "peer", "name", port, "netns", hub)
    run("ip", "netns", "exec", ns, "ip", "addr", "add", address, "dev", iface)
    run("ip", "netns", "exec", ns, "ip", "link", "set", iface, "up")
    run("ip", "netns", "exec", hub, "ip", "link", "set", port, "master", bridge_name)
    run("ip", "netns", "exec", hub, "ip", "link", "set", port, "up")


def wire(a, a_iface, a_address, b, b_iface, b_address):
    """A veth pair straight from namespace a to namespace b."""
    run("ip", "link", "add", a_iface, "netns", a, "type", "veth", "peer", "name", b_iface, "netns", b)
    for n, dev, address in ((a, a_iface, a_address), (b, b_iface, b_address)):
        run("ip", "netns", "exec", n, "ip", "addr", "add", address, "dev", dev)
        run("ip", "netns", "exec", n, "ip", "link", "set", dev, "up")


class Peer:
    """A `bigpeer peer` process in a namespace that keeps running: statements go in on stdin, its
    JSON lines (results, synced changes, presence) collect in WORK/NAME.out, its log in NAME.log."""

    def __init__(self, ns, name, args):
        self.name = name
        self.out_path = os.path.join(WORK, f"{name}.out")
        out, log = open(self.out_path, "w"), open(os.path.join(WORK, f"{name}.log"), "w")
        self.process = subprocess.Popen(["ip", "netns", "exec", ns, BIN, "peer", "--data", os.path.join(WORK, name), "--name", name, *args],
                                        stdin=subprocess.PIPE, stdout=out, stderr=log, text=True, env=child_env())
        processes.append(self.process)

    def execute(self, statement):
        self.process.stdin.write(statement + "\n")
        self.process.stdin.flush()

    def lines(self):
        out = []
        for line in open(self.out_path).read().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
        return out

    def output(self):
        return open(self.out_path).read()

    def log(self):
        return open(os.path.join(WORK, f"{self.name}.log")).read()


def eventually(what, check, timeout=30):
    """Waits until check() is truthy; fails with `what` (and check's last value) when it is not."""
    deadline = time.time() + timeout
    value = None
    while time.time() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    fail(f"{what} within {timeout} s (last: {value!r})")
