"""The wire layer of scripts/sync-client.py: bigpeer-sync.v1 message schemas (PROTOCOL.md §3, §4)
checked on every server message, the document hash of §4.3, one session's credit bookkeeping and
ping answering (§5, §6), and the peer's replica of one collection (CRDT states, sync_crdt.py).
Written from docs/PROTOCOL.md and docs/CRDT.md only."""
import asyncio
import time

import cbor2
import websockets

import sync_crdt as crdt

STEP_TIMEOUT = 15.0
SUBPROTOCOL = "bigpeer-sync.v1"
MIN_CREDIT = 65536
UINT64 = (1 << 64) - 1


class Deviation(Exception):
    """The server did something PROTOCOL.md / CRDT.md do not allow, or not what we expected."""


def need(cond, what):
    if not cond:
        raise Deviation(what)


def log(msg):
    print(f"sync-client: {msg}", flush=True)


# ---- message schemas (PROTOCOL.md §3, §4) -----------------------------------------------------

def is_uint(x, limit=UINT64):
    return isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= limit


def is_value(v, depth=0):
    if depth > 32:
        return False
    if v is None or isinstance(v, (bool, str)):
        return True
    if isinstance(v, int):
        return -(1 << 63) <= v < (1 << 63)
    if isinstance(v, float):
        return True
    if isinstance(v, list):
        return all(is_value(x, depth + 1) for x in v)
    if isinstance(v, dict):
        return all(isinstance(k, str) and is_value(x, depth + 1) for k, x in v.items())
    return False


def is_doc_id(v):
    return isinstance(v, str) or (isinstance(v, dict) and is_value(v))


def check_entry(e, where, payload):
    need(isinstance(e, dict), f"{where}: entry is not a map")
    need(isinstance(e.get("c"), str) and 1 <= len(e["c"].encode()) <= 1024, f"{where}: bad collection {e.get('c')!r}")
    need(is_doc_id(e.get("id")), f"{where}: bad document id {e.get('id')!r}")
    need(e.get("kind") in ("upsert", "delete"), f"{where}: bad kind {e.get('kind')!r}")
    need(("delta" in e) != ("state" in e), f"{where}: entry must carry exactly one of delta/state")
    key = "state" if "state" in e else "delta"
    need(isinstance(e[key], bytes), f"{where}: {key} is not a byte string")
    need(payload is None or key == payload, f"{where}: expected {payload}, got {key}")


SCHEMAS = {
    "welcome": lambda m: is_uint(m.get("v")) and is_uint(m.get("site")) and isinstance(m.get("session"), str)
    and 1 <= len(m["session"].encode()) <= 64 and is_uint(m.get("hb")) and is_uint(m.get("max"))
    and is_uint(m.get("credit")) and ("ttl" not in m or is_uint(m["ttl"])),
    "refuse": lambda m: is_uint(m.get("code")) and isinstance(m.get("reason"), str),
    "sub_error": lambda m: is_uint(m.get("id"), 0xFFFFFFFF) and isinstance(m.get("msg"), str),
    "docs": lambda m: is_uint(m.get("id"), 0xFFFFFFFF) and isinstance(m.get("docs"), list),
    "synced": lambda m: is_uint(m.get("id"), 0xFFFFFFFF) and is_uint(m.get("cp")),
    "changes": lambda m: is_uint(m.get("txn")) and isinstance(m.get("docs"), list) and len(m["docs"]) >= 1,
    "checkpoint": lambda m: is_uint(m.get("txn")),
    "ack": lambda m: is_uint(m.get("seq")) and is_uint(m.get("txn")) and (
        "rejected" not in m or (isinstance(m["rejected"], list) and len(m["rejected"]) >= 1 and all(
            isinstance(r, dict) and is_uint(r.get("i")) and isinstance(r.get("msg"), str) for r in m["rejected"]))),
    "credit": lambda m: is_uint(m.get("bytes")) and m["bytes"] >= 1,
    "ping": lambda m: is_uint(m.get("n")),
    "pong": lambda m: is_uint(m.get("n")),
    "bye": lambda m: is_uint(m.get("code")) and isinstance(m.get("reason"), str) and len(m["reason"].encode()) <= 123,
    # the answer to an `auth` (credentials refreshed in the session); `ttl`: ms they stay valid
    "auth_ok": lambda m: "ttl" not in m or is_uint(m["ttl"]),
    "renew": lambda m: is_uint(m.get("ttl")),  # sent only to peers with "renew" in hello.caps
    # the answer to `want` for documents the server has no row for; only to peers with "gone" in hello.caps
    "gone": lambda m: isinstance(m.get("docs"), list) and 1 <= len(m["docs"]) <= 1000 and all(
        isinstance(d, dict) and isinstance(d.get("c"), str) and 1 <= len(d["c"].encode()) <= 1024 and is_doc_id(d.get("id"))
        for d in m["docs"]),
    "presence": lambda m: isinstance(m.get("recs"), list) and 1 <= len(m["recs"]) <= 64 and all(map(is_presence_record, m["recs"])),
}


def is_presence_record(r):
    """A presence record (PROTOCOL.md §4.14); this client only checks and counts them."""
    def key(k):
        return isinstance(k, bytes) and 1 <= len(k) <= 256
    return (isinstance(r, dict) and key(r.get("pk")) and all(is_uint(r.get(f)) for f in ("ep", "seq", "ttl", "hops"))
            and r["hops"] <= 16 and r["ttl"] >= 1 and all(isinstance(r.get(f), str) for f in ("name", "os", "sdk"))
            and isinstance(r.get("cloud"), bool) and isinstance(r.get("meta"), dict) and isinstance(r.get("idmeta"), dict)
            and isinstance(r.get("links"), list) and len(r["links"]) <= 64
            and all(isinstance(lk, dict) and key(lk.get("pk")) and lk.get("type") in ("WebSocket", "AccessPoint", "Bluetooth")
                    for lk in r["links"]))


def decode_message(raw):
    need(isinstance(raw, bytes), f"text WebSocket message from the server: {raw!r:.80}")
    try:
        m = cbor2.loads(raw)
    except Exception as exc:
        raise Deviation(f"server message is not CBOR ({exc}): {raw[:40].hex()}") from None
    need(cbor2.dumps(m, canonical=True) == raw, f"server message is not deterministic CBOR: {raw[:40].hex()}")
    need(isinstance(m, dict) and all(isinstance(k, str) for k in m), "server message is not a map with text keys")
    t = m.get("t")
    need(t in SCHEMAS, f"unexpected message type from the server: {t!r}")
    need(SCHEMAS[t](m), f"`{t}` does not match its schema: {m!r:.300}")
    if t in ("docs", "changes"):
        for i, e in enumerate(m["docs"]):
            check_entry(e, f"{t}.docs[{i}]", "state" if t == "docs" else None)
    return m


def strict_equal(a, b):
    """Equality that tells int from float from bool (1 != 1.0 != True)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(strict_equal(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(strict_equal(x, y) for x, y in zip(a, b))
    return a == b


def id_key(doc_id):
    return cbor2.dumps(doc_id, canonical=True)


def document_hash(collection, doc_id):
    """64-bit FNV-1a over UTF-8(collection) || 0x00 || deterministic CBOR(id) (PROTOCOL.md §4.3)."""
    h = 0xCBF29CE484222325
    for b in collection.encode() + b"\0" + id_key(doc_id):
        h = ((h ^ b) * 0x100000001B3) & UINT64
    return h


# ---- session ----------------------------------------------------------------------------------

class Session:
    """One bigpeer-sync.v1 session: sends canonical CBOR, receives and validates, keeps both credits,
    answers pings, and hands every other message to the caller."""

    def __init__(self, ws, credit, max_size):
        self.ws = ws
        self.max_size = max_size  # hello.max: the server must split docs/changes to fit (§8)
        self.download_credit = credit  # what the server may still send (may go negative by one message)
        self.consumed_ungranted = 0
        self.upload_credit = 0
        self.pings_answered = 0
        self.credit_granted = 0
        self.credit_stalls = 0
        self.presence_records = 0

    async def send(self, msg):
        raw = cbor2.dumps(msg, canonical=True)
        if msg["t"] == "up":
            need(self.upload_credit > 0, "internal: up without positive upload credit")
            self.upload_credit -= len(raw)
        await self.ws.send(raw)
        return raw

    async def recv(self, step, timeout=STEP_TIMEOUT, quiet_ok=False):
        """The next message that is not a ping or a credit (both handled here), within `timeout` s; on timeout a
        Deviation, or None when quiet_ok (a quiet period is what the caller wanted)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                if left <= 0:
                    raise asyncio.TimeoutError
                raw = await asyncio.wait_for(self.ws.recv(), left)
            except asyncio.TimeoutError:
                if quiet_ok:
                    return None
                raise Deviation(f"{step}: timeout ({timeout:.0f} s) waiting for the server") from None
            except websockets.ConnectionClosed as exc:
                raise Deviation(f"{step}: connection closed by the server: {exc}") from None
            need(len(raw) <= self.max_size, f"{step}: a {len(raw)}-byte message above our hello.max {self.max_size}")
            m = decode_message(raw)
            t = m["t"]
            if t == "ping":
                await self.send({"t": "pong", "n": m["n"]})
                self.pings_answered += 1
                continue
            if t == "credit":
                self.upload_credit += m["bytes"]
                continue
            if t == "presence":  # gossip (§4.14): control traffic, no credit; this client only counts it
                self.presence_records += len(m["recs"])
                continue
            if t == "bye":
                raise Deviation(f"{step}: server said bye {m['code']}: {m['reason']}")
            if t == "refuse":
                raise Deviation(f"{step}: server refused: {m['code']} {m['reason']}")
            if t in ("docs", "changes"):
                need(self.download_credit > 0,
                     f"{step}: server sent `{t}` ({len(raw)} bytes) with no positive credit left ({self.download_credit})")
                self.download_credit -= len(raw)
                m["_size"] = len(raw)
            return m

    async def consumed(self, size):
        """Grant credit back for an applied data message. Lazily: only once the server is out of
        credit, so that a large initial sync really exercises the pause (PROTOCOL.md §6)."""
        self.consumed_ungranted += size
        if self.download_credit <= 0:
            self.credit_stalls += 1
            await self.grant()

    async def grant(self):
        if self.consumed_ungranted:
            await self.send({"t": "credit", "bytes": self.consumed_ungranted})
            self.download_credit += self.consumed_ungranted
            self.credit_granted += self.consumed_ungranted
            self.consumed_ungranted = 0


class Replica:
    """The peer's copies of the documents of one collection (decoded CRDT states)."""

    def __init__(self, collection):
        self.collection = collection
        self.docs = {}  # id_key -> decoded state

    def apply(self, entry, where):
        need(entry["c"] == self.collection, f"{where}: document of collection {entry['c']!r}")
        k = id_key(entry["id"])
        try:
            if "state" in entry:
                st = crdt.decode_state(entry["state"])
                need(strict_equal(st["id"], entry["id"]), f"{where}: state _id {st['id']!r} != entry id {entry['id']!r}")
                if k in self.docs:
                    crdt.merge(self.docs[k], {"ranges": {s: (None, t) for s, t in st["vv"].items()}, "root": st["root"]})
                else:
                    self.docs[k] = st
            else:
                need(k in self.docs, f"{where}: delta for {entry['id']!r}, a document we do not hold")
                crdt.merge(self.docs[k], crdt.decode_delta(entry["delta"]))
        except crdt.CRDTFormatError as exc:
            raise Deviation(f"{where}: {entry['id']!r}: {exc}") from None
        value = crdt.materialize(self.docs[k])
        need((value is None) == (entry["kind"] == "delete"),
             f"{where}: kind {entry['kind']} but the document {'does not exist' if value is None else 'exists'}")
        return value

    def values(self):
        out = {}
        for k, st in self.docs.items():
            v = crdt.materialize(st)
            if v is not None:
                out[k] = v
        return out


def compare_docs(step, got, expected):
    want = {id_key(d["_id"]): d for d in expected}
    missing = [want[k]["_id"] for k in want if k not in got]
    extra = [got[k]["_id"] for k in got if k not in want]
    need(not missing and not extra, f"{step}: missing documents {missing[:5]}, unexpected {extra[:5]}")
    for k, d in want.items():
        need(strict_equal(got[k], d), f"{step}: document {d['_id']!r}: got {got[k]!r}, expected {d!r}")


