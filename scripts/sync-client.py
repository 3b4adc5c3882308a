#!/usr/bin/env python3
"""Independent BigPeer sync client (protocol bigpeer-sync.v1), written from docs/PROTOCOL.md and
docs/CRDT.md §12 only, to prove the documents are enough to build a peer. Needs `websockets` and
`cbor2` (PyPI); see scripts/python-sync-client.sh for the conformance run that drives it.

    sync-client.py --url ws://127.0.0.1:PORT --key API_KEY check \
        --collection pycars --expect seed.json --upload new.json --update update.json \
        --live live.json --ready-file /tmp/ready

`check` runs one session through every part of the protocol, then a resumed one (steps of
`Check.run`): hello -> welcome; sub (WHERE + args) -> docs... -> synced, every state decoded per
CRDT.md §12 and compared with --expect (exact values and JSON types); up (the --upload document
and the --update field change as CRDT deltas of this client's own site id and HLC clock) -> ack
without rejections; a bad sub -> sub_error; want -> full state equal to our copy; ping -> pong;
--idle seconds without sending (the server's heartbeat ping is answered); --ready-file, then the
--live / --live-deleted documents must arrive as `changes` (deltas merged into our copies, full
states, deletes); upload credit returned; bye -> close 1000; with --resume a second session with
`cp` and `have` gets exactly the live changes again.

Download credit is granted as messages are consumed, lazily (once the server is out of it), so
a seed larger than 64 KiB makes the server pause; a data message that arrives without positive
credit is a deviation. Every server message is checked against its CDDL schema and for
deterministic CBOR. Any deviation exits 1 with a message naming the step.
"""
import argparse
import asyncio
import json
import os
import random
import sys
import time

import cbor2
import websockets

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sync_crdt as crdt  # noqa: E402

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
    and is_uint(m.get("credit")),
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
}


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


# ---- the check --------------------------------------------------------------------------------

class Check:
    """The `check` command, one method per step; every step fails with a Deviation naming it."""

    def __init__(self, args):
        self.args = args
        self.coll = args.collection
        self.expected = self.load(args.expect) or []
        self.upload = self.load(args.upload)
        self.update = self.load(args.update)
        self.live = self.load(args.live) or []
        self.live_deleted = self.load(args.live_deleted) or []
        self.rng = random.SystemRandom()
        self.site = self.rng.getrandbits(64) or 1
        self.clock = 0
        self.replica = Replica(self.coll)
        self.own_new = {}  # id_key -> the value of each new document we uploaded
        self.last_txn = 0
        self.echoes = 0

    @staticmethod
    def load(path):
        if not path:
            return None
        with open(path) as f:
            return json.load(f)

    async def next(self, step, timeout=STEP_TIMEOUT, quiet_ok=False):
        """The next message for `step`, after checkpoints (checked monotonic) and echoes of our own
        new documents (PROTOCOL.md §4.6 says there are none: see --tolerate-own-upload-echo)."""
        while True:
            m = await self.s.recv(step, timeout, quiet_ok)
            if m is None:
                return None
            if m["t"] in ("checkpoint", "changes"):
                need(m["txn"] >= self.last_txn, f"{step}: `{m['t']}` txn {m['txn']} went back from {self.last_txn}")
                self.last_txn = m["txn"]
            if m["t"] == "checkpoint":
                continue
            if m["t"] == "changes" and all(id_key(e["id"]) in self.own_new and "state" in e for e in m["docs"]):
                ids = [e["id"] for e in m["docs"]]
                need(self.args.tolerate_own_upload_echo,
                     f"{step}: the server echoed our own uploaded new document(s) {ids} as full state in changes "
                     f"txn {m['txn']} (PROTOCOL.md §4.6: uploaded documents are held and not echoed)")
                for i, e in enumerate(m["docs"]):
                    value = self.replica.apply(e, f"echo docs[{i}]")
                    need(strict_equal(value, self.own_new[id_key(e["id"])]), f"{step}: echo of {e['id']!r} is {value!r}")
                await self.s.consumed(m["_size"])
                self.echoes += 1
                log(f"WARNING (known server bug, tolerated): own new document(s) {ids} echoed as full state, "
                    f"changes txn {m['txn']} ({m['_size']} bytes)")
                continue
            return m

    def subscription(self):
        """sub 1: every document of the collection that has a color (all the driver writes do), with
        a named argument so that `args` is exercised too."""
        return {"t": "sub", "id": 1, "q": f"SELECT * FROM {self.coll} WHERE color != :none", "args": {"none": "(none)"}}

    async def connect(self):
        url = self.args.url.rstrip("/") + "/api/v4/sync"
        try:
            ws = await asyncio.wait_for(websockets.connect(url, subprotocols=[SUBPROTOCOL], compression=None,
                                                           max_size=4 * self.args.max, ping_interval=None), STEP_TIMEOUT)
        except Exception as exc:
            raise Deviation(f"connect {url}: {exc}") from None
        self.ws = ws
        self.s = Session(ws, self.args.credit, self.args.max)
        need(ws.subprotocol == SUBPROTOCOL, f"server selected subprotocol {ws.subprotocol!r}")
        return ws

    async def run(self):
        ws = await self.connect()
        try:
            await self.handshake()
            await self.initial_sync()
            if self.upload or self.update:
                await self.upload_changes()
            await self.bad_subscription()
            if self.update:
                await self.want()
            await self.ping()
            if self.args.idle:
                await self.idle()
            if self.live or self.live_deleted:
                await self.live_changes()
            need(self.s.upload_credit == self.welcome["credit"],
                 f"credit: upload credit {self.s.upload_credit} after all acks, expected {self.welcome['credit']} (§6)")
            await self.close()
        finally:
            if ws.state is not websockets.protocol.State.CLOSED:
                await ws.close(4004)
        if self.args.resume:
            ws = await self.connect()
            try:
                await self.handshake()
                await self.resume()
                await self.close()
            finally:
                if ws.state is not websockets.protocol.State.CLOSED:
                    await ws.close(4004)

    async def resume(self):  # §4.3 `cp` + `have`, §4.5: no docs, synced at once, then only later changes
        before = self.replica.values()
        held = self.replica.docs  # tombstones included: we hold them too
        have = b"".join(h.to_bytes(8, "big") for h in sorted(document_hash(self.coll, cbor2.loads(k)) for k in held))
        top = self.last_txn
        await self.s.send(dict(self.subscription(), cp=self.cp, have=have))
        m = await self.next("resume")
        need(m["t"] == "synced" and m["id"] == 1 and m["cp"] == self.cp,
             f"resume: expected synced with cp {self.cp} and no docs, got {m!r:.200}")
        self.last_txn = self.cp
        seen = set()
        while self.last_txn < top:  # the changes between our checkpoint and where session 1 ended
            m = await self.next(f"resume (at txn {self.last_txn}, session 1 ended at {top})")
            need(m["t"] == "changes", f"resume: unexpected `{m['t']}`: {m!r:.200}")
            for i, e in enumerate(m["docs"]):
                self.replica.apply(e, f"resume changes txn {m['txn']} docs[{i}]")
                need("delta" in e, f"resume: {e['id']!r} came as a full state although it is in `have`")
                seen.add(id_key(e["id"]))
            await self.s.consumed(m["_size"])
        await self.s.grant()
        live = {id_key(d["_id"]) for d in self.live} | {id_key(i) for i in self.live_deleted}
        ours = set(self.own_new) | ({id_key(self.update["_id"])} if self.update else set())
        need(seen == live, f"resume: changes for {[cbor2.loads(k) for k in seen]}, expected the live writes "
                           f"{[cbor2.loads(k) for k in live]} (our own uploads are not sent back)")
        need(not (seen & ours - live), "resume: our own upload was sent back")
        after = self.replica.values()
        need(after.keys() == before.keys() and all(strict_equal(after[k], before[k]) for k in after),
             "resume: re-merging the changes after our checkpoint changed our documents")
        log(f"resume from cp {self.cp} with `have` ({len(have) // 8} hashes): synced at once, then the "
            f"{len(seen)} live changes again as deltas up to txn {self.last_txn}, our own upload not sent back")

    async def handshake(self):  # §4.1, §4.2; nothing else may be sent before welcome
        await self.s.send({"t": "hello", "v": 1, "site": self.site, "key": self.site.to_bytes(8, "big"),
                           "name": "python-sync-client", "meta": {"client": "scripts/sync-client.py"},
                           "cred": {"apiKey": self.args.key}, "credit": self.args.credit, "max": self.args.max})
        w = await self.next("handshake")
        need(w["t"] == "welcome", f"handshake: expected welcome, got {w['t']}")
        need(w["v"] == 1 and w["site"] not in (0, self.site), f"handshake: bad welcome {w!r}")
        need(w["max"] >= MIN_CREDIT and w["credit"] >= 1, f"handshake: welcome max/credit too small: {w!r}")
        self.welcome = w
        self.s.upload_credit = w["credit"]
        log(f"welcome: session {w['session']}, server site {w['site']:#x}, hb {w['hb']} ms, "
            f"upload credit {w['credit']}, max {w['max']}; our site {self.site:#x}")

    async def initial_sync(self):  # §4.3, §4.5, §6
        await self.s.send(self.subscription())
        ndocs = nmsgs = 0
        while True:
            m = await self.next("initial sync")
            if m["t"] == "synced":
                need(m["id"] == 1, f"initial sync: synced for subscription {m['id']}")
                break
            need(m["t"] == "docs", f"initial sync: unexpected `{m['t']}` before synced: {m!r:.200}")
            need(m["id"] == 1, f"initial sync: docs for subscription {m['id']}")
            for i, e in enumerate(m["docs"]):
                need(e["kind"] == "upsert", f"initial sync: docs[{i}] kind {e['kind']}")
                self.replica.apply(e, f"docs[{i}]")
            ndocs += len(m["docs"])
            nmsgs += 1
            await self.s.consumed(m["_size"])
        await self.s.grant()
        self.cp = self.last_txn = m["cp"]
        compare_docs("initial sync", self.replica.values(), self.expected)
        log(f"initial sync: {ndocs} documents in {nmsgs} docs messages, all decoded and as expected; synced cp "
            f"{self.cp}; credit granted {self.s.credit_granted} bytes, server ran out of credit {self.s.credit_stalls} times")

    async def upload_changes(self):  # §4.8: CRDT deltas of our own site and clock (CRDT.md §2, §10, §12)
        entries = []
        if self.upload:
            self.clock = crdt.hlc_now(int(time.time() * 1000), self.clock)
            fields = {k: v for k, v in self.upload.items() if k != "_id"}
            delta = crdt.encode_new_document_delta(self.site, self.clock, fields)
            entries.append({"c": self.coll, "id": self.upload["_id"], "delta": delta})
        if self.update:
            k = id_key(self.update["_id"])
            need(k in self.replica.docs, f"upload: --update names {self.update['_id']!r}, not delivered by the initial sync")
            self.clock = crdt.hlc_now(int(time.time() * 1000), self.clock)
            delta = crdt.encode_set_field_delta(self.replica.docs[k], self.site, self.clock,
                                                self.update["field"], self.update["value"])
            entries.append({"c": self.coll, "id": self.update["_id"], "delta": delta})
        raw = await self.s.send({"t": "up", "seq": 1, "docs": entries})
        if self.upload:  # from now on an echo of it is recognised (and is a deviation unless tolerated)
            self.own_new[id_key(self.upload["_id"])] = self.upload
        m = await self.next("upload")
        need(m["t"] == "ack", f"upload: unexpected `{m['t']}` before ack: {m!r:.200}")
        need(m["seq"] == 1, f"upload: ack for seq {m['seq']}")
        need("rejected" not in m, f"upload: server rejected entries: {m.get('rejected')}")
        need(m["txn"] > self.cp, f"upload: ack txn {m['txn']} not after the synced checkpoint {self.cp}")
        for e in entries:  # apply our own deltas locally; a new document starts empty (CRDT.md §10)
            self.replica.docs.setdefault(id_key(e["id"]), crdt.empty_state(e["id"]))
            self.replica.apply({"c": self.coll, "id": e["id"], "kind": "upsert", "delta": e["delta"]}, "own upload")
        got = self.replica.values()
        if self.upload:
            k = id_key(self.upload["_id"])
            need(strict_equal(got.get(k), self.upload), f"upload: local copy {got.get(k)!r} != {self.upload!r}")
        if self.update:
            v = got[id_key(self.update["_id"])]
            need(strict_equal(v.get(self.update["field"]), self.update["value"]), f"upload: update not applied: {v!r}")
        log(f"upload: {len(entries)} deltas ({len(raw)} bytes `up`) acknowledged in txn {m['txn']}")

    async def bad_subscription(self):  # §4.3, §4.4: sub_error, the session stays up
        await self.s.send({"t": "sub", "id": 2, "q": f"SELECT * FROM {self.coll} ORDER BY _id"})
        m = await self.next("sub_error")
        need(m["t"] == "sub_error" and m["id"] == 2, f"sub_error: expected sub_error for id 2, got {m!r:.200}")
        log(f"sub_error for a SELECT with ORDER BY: {m['msg']!r}")

    async def want(self):  # §4.7: the full state of a held document equals our copy
        await self.s.send({"t": "want", "docs": [{"c": self.coll, "id": self.update["_id"]}]})
        m = await self.next("want")
        need(m["t"] == "changes" and len(m["docs"]) == 1 and "state" in m["docs"][0],
             f"want: expected changes with one full state, got {m!r:.200}")
        e = m["docs"][0]
        need(strict_equal(e["id"], self.update["_id"]), f"want: state of {e['id']!r}")
        try:
            fresh = crdt.decode_state(e["state"])
        except crdt.CRDTFormatError as exc:
            raise Deviation(f"want: {exc}") from None
        ours = self.replica.values()[id_key(self.update["_id"])]
        need(strict_equal(crdt.materialize(fresh), ours), f"want: server state {crdt.materialize(fresh)!r} != our copy {ours!r}")
        need(self.site in fresh["vv"], "want: our upload is not in the document's version vector")
        await self.s.consumed(m["_size"])
        await self.s.grant()
        log(f"want: full state of {e['id']!r} ({len(e['state'])} bytes) equals our copy; its version vector has our site")

    async def ping(self):  # §4.10
        n = self.rng.getrandbits(32)
        await self.s.send({"t": "ping", "n": n})
        m = await self.next("ping")
        need(m["t"] == "pong" and m["n"] == n, f"ping: expected pong {n}, got {m!r:.200}")

    async def idle(self):  # §5: after hb without hearing from us the server pings; we answer and stay up
        before, end = self.s.pings_answered, time.monotonic() + self.args.idle
        while time.monotonic() < end:
            m = await self.next("idle", timeout=end - time.monotonic(), quiet_ok=True)
            need(m is None, f"idle: unexpected `{m and m['t']}` while idle: {m!r:.200}")
        need(self.s.pings_answered > before,
             f"idle: no ping from the server within {self.args.idle} s (hb {self.welcome['hb']} ms)")
        log(f"idle {self.args.idle:g} s: answered {self.s.pings_answered - before} server ping(s), still connected")

    async def live_changes(self):  # §4.6: the driver writes through REST once we are ready
        if self.args.ready_file:
            with open(self.args.ready_file, "w") as f:
                f.write("ready\n")
        pending = {id_key(d["_id"]): d for d in self.live}
        pending.update({id_key(i): None for i in self.live_deleted})  # None: must arrive deleted
        while pending:
            waiting = [cbor2.loads(k) for k in pending]
            m = await self.next(f"live changes (waiting for {waiting})")
            need(m["t"] == "changes", f"live: unexpected `{m['t']}`: {m!r:.200}")
            for i, e in enumerate(m["docs"]):
                value = self.replica.apply(e, f"changes txn {m['txn']} docs[{i}]")
                k = id_key(e["id"])
                if k in pending and strict_equal(value, pending[k]):
                    log(f"live: {e['id']!r} arrived ({e['kind']}) as a {'delta' if 'delta' in e else 'full state'} "
                        f"in changes txn {m['txn']} ({m['_size']} bytes)")
                    del pending[k]
            await self.s.consumed(m["_size"])
        await self.s.grant()

    async def close(self):  # §4.12, §7
        await self.s.send({"t": "bye", "code": 1000, "reason": "done"})
        try:
            await asyncio.wait_for(self.ws.close(1000, "done"), STEP_TIMEOUT)
        except asyncio.TimeoutError:
            raise Deviation("close: no close frame from the server within 15 s") from None
        need(self.ws.close_code == 1000, f"close: server answered close code {self.ws.close_code} ({self.ws.close_reason!r})")
        log(f"closed cleanly (1000); answered {self.s.pings_answered} server ping(s)"
            + (f"; tolerated {self.echoes} echo(es) of our own upload" if self.echoes else ""))


# ---- violations: refusals and close codes (PROTOCOL.md §4.2, §4.11, §5, §7) -------------------

class Outcome:
    """What one misbehaving connection must end with."""

    def __init__(self, refuse=None, close=None, message=None):
        self.refuse, self.close, self.message = refuse, close, message


async def violation_case(args, name, first, after_welcome, outcome, wait):
    """Connects, sends `first` (a message dict, or raw bytes/str), then `after_welcome` once welcome
    came, and checks the outcome: a `refuse` with a code, a close code, or a message predicate."""
    url = args.url.rstrip("/") + "/api/v4/sync"
    ws = await asyncio.wait_for(websockets.connect(url, subprotocols=[SUBPROTOCOL], compression=None,
                                                   ping_interval=None), STEP_TIMEOUT)
    got = []
    try:
        if first is not None:
            await ws.send(first if isinstance(first, (bytes, str)) else cbor2.dumps(first, canonical=True))
        end = time.monotonic() + wait
        while time.monotonic() < end:
            try:
                raw = await asyncio.wait_for(ws.recv(), end - time.monotonic())
            except asyncio.TimeoutError:
                break
            except websockets.ConnectionClosed:
                break
            m = decode_message(raw)
            got.append(m)
            if m["t"] == "welcome":
                for x in after_welcome:
                    await ws.send(x if isinstance(x, (bytes, str)) else cbor2.dumps(x, canonical=True))
            elif outcome.message and outcome.message(m):
                return f"{name}: {m['t']} {m.get('msg') or m.get('rejected') or ''}"
        if outcome.message:
            raise Deviation(f"violations: {name}: the expected message did not come; got {[g['t'] for g in got]}")
        if outcome.refuse is not None:
            r = [g for g in got if g["t"] == "refuse"]
            need(r and r[0]["code"] == outcome.refuse, f"violations: {name}: expected refuse {outcome.refuse}, got {got!r:.200}")
        else:
            need(not any(g["t"] == "refuse" for g in got), f"violations: {name}: unexpected refuse {got!r:.200}")
        code = ws.close_code
        need(code == outcome.close, f"violations: {name}: close code {code} ({ws.close_reason!r}), expected {outcome.close}")
        return f"{name}: {'refuse + ' if outcome.refuse else ''}close {code} {ws.close_reason!r}"
    finally:
        await ws.close()


async def violations(args):
    site = random.SystemRandom().getrandbits(64) or 1

    def hello(**kw):
        h = {"t": "hello", "v": 1, "site": site, "key": b"violations", "name": "violations", "meta": {},
             "cred": {"apiKey": args.key}, "credit": MIN_CREDIT, "max": MIN_CREDIT}
        h.update(kw)
        return {k: v for k, v in h.items() if v is not None}

    # The server's own site id, from a normal handshake.
    url = args.url.rstrip("/") + "/api/v4/sync"
    async with websockets.connect(url, subprotocols=[SUBPROTOCOL], compression=None, ping_interval=None,
                                  open_timeout=STEP_TIMEOUT) as ws:
        await ws.send(cbor2.dumps(hello(), canonical=True))
        try:
            w = decode_message(await asyncio.wait_for(ws.recv(), STEP_TIMEOUT))
        except asyncio.TimeoutError:
            raise Deviation("violations: no welcome within 15 s") from None
        need(w["t"] == "welcome", f"violations: handshake: {w!r:.200}")
        await ws.send(cbor2.dumps({"t": "bye", "code": 1000, "reason": ""}, canonical=True))
    coll = args.collection
    new_doc = crdt.encode_new_document_delta(site, crdt.hlc_now(int(time.time() * 1000)), {"x": 1})
    is_sub_error = lambda m: m["t"] == "sub_error" and m["id"] == 1  # noqa: E731
    is_rejected = lambda m: m["t"] == "ack" and "rejected" in m  # noqa: E731
    cases = [  # name, first message, after welcome, outcome, seconds
        ("wrong API key", hello(cred={"apiKey": "bpk_0_0"}), [], Outcome(refuse=4001, close=4001), 3),
        ("no credentials", hello(cred=None), [], Outcome(refuse=4001, close=4001), 3),
        ("version 2", hello(v=2), [], Outcome(refuse=4002, close=4002), 3),
        ("the server's site id", hello(site=w["site"]), [], Outcome(refuse=4003, close=4003), 3),
        ("site id 0 (malformed by the CDDL)", hello(site=0), [], Outcome(close=4004), 3),
        ("credit below 64 KiB", hello(credit=1000), [], Outcome(close=4004), 3),
        ("text message", "hello", [], Outcome(close=4004), 3),
        ("non-deterministic CBOR", cbor2.dumps(dict(sorted(hello().items(), reverse=True))), [], Outcome(close=4004), 3),
        ("sub before welcome", None, [], Outcome(close=4004), 3),  # replaced below: needs two messages
        ("second hello", hello(), [hello()], Outcome(close=4004), 3),
        ("welcome sent by the peer", hello(), [w], Outcome(close=4004), 3),
        ("unknown message type", hello(), [{"t": "gossip"}], Outcome(close=4004), 3),
        ("no hello within 10 s", None, [], Outcome(close=4008), 13),
        ("duplicate sub id", hello(), [{"t": "sub", "id": 1, "q": f"SELECT * FROM {coll}"},
                                       {"t": "sub", "id": 1, "q": f"SELECT * FROM {coll}"}], Outcome(message=is_sub_error), 5),
    ]
    if args.read_only_key:
        cases.append(("up with a read-only key", hello(cred={"apiKey": args.read_only_key}),
                      [{"t": "up", "seq": 1, "docs": [{"c": coll, "id": "ro", "delta": new_doc}]}], Outcome(message=is_rejected), 5))
    if args.other_key:
        cases.append(("sub to a collection the key cannot read", hello(cred={"apiKey": args.other_key}),
                      [{"t": "sub", "id": 1, "q": f"SELECT * FROM {coll}"}], Outcome(message=is_sub_error), 5))

    async def pipelined():
        ws = await websockets.connect(url, subprotocols=[SUBPROTOCOL], compression=None, ping_interval=None)
        try:
            await ws.send(cbor2.dumps(hello(), canonical=True))
            await ws.send(cbor2.dumps({"t": "sub", "id": 1, "q": f"SELECT * FROM {coll}"}, canonical=True))
            # PROTOCOL.md §4.2: a peer MUST NOT do this. The server closes with 4004 unless it had
            # finished authenticating when the sub arrived; then it serves the sub (a race, reported
            # in docs/CONFORMANCE.md). Either is accepted here, nothing else.
            seen = []
            try:
                while "synced" not in seen:
                    raw = await asyncio.wait_for(ws.recv(), STEP_TIMEOUT)
                    m = decode_message(raw)
                    seen.append(m["t"])
                    need(m["t"] in ("welcome", "docs", "synced"), f"violations: sub before welcome: got {m!r:.200}")
                    if m["t"] == "docs":  # served: keep the initial sync going
                        await ws.send(cbor2.dumps({"t": "credit", "bytes": len(raw)}, canonical=True))
                return f"sub before welcome: served ({len(seen)} messages up to synced): the race of docs/CONFORMANCE.md"
            except websockets.ConnectionClosed:
                pass
            need(ws.close_code == 4004 and "synced" not in seen,
                 f"violations: sub before welcome: close {ws.close_code} {ws.close_reason!r} after {seen}")
            return f"sub before welcome: close 4004 {ws.close_reason!r}"
        finally:
            await ws.close()

    async def named(name, run):
        try:
            return await run
        except Deviation:
            raise
        except (OSError, asyncio.TimeoutError, websockets.WebSocketException) as exc:
            raise Deviation(f"violations: {name}: {type(exc).__name__}: {exc}") from None

    runs = [named(c[0], pipelined() if c[0] == "sub before welcome" else violation_case(args, *c)) for c in cases]
    for line in await asyncio.gather(*runs):
        log(f"violations: {line}")
    log(f"violations: all {len(runs)} cases ended as PROTOCOL.md says")


# ---- selftest: the examples of the documents, without a server ---------------------------------

def _doc_text(name):
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", name), encoding="utf-8") as f:
        return f.read()


def _annotated_hex(block):
    """Leading hex tokens of each line (the annotations after them are ignored)."""
    out = bytearray()
    for line in block.splitlines():
        for tok in line.split():
            if len(tok) % 2 or any(c not in "0123456789abcdef" for c in tok):
                break
            out += bytes.fromhex(tok)
    return bytes(out)


def selftest():
    """Checks this client against the examples of PROTOCOL.md and CRDT.md §12 (no server needed)."""
    import re
    proto = _doc_text("PROTOCOL.md")
    examples = re.findall(r"```hex example=(\S+)\n(.*?)```", proto, re.S)
    need(len(examples) >= 19, f"selftest: only {len(examples)} hex examples in PROTOCOL.md")
    for name, text in examples:
        raw = bytes.fromhex(text.replace("\n", " "))
        m = cbor2.loads(raw)
        need(cbor2.dumps(m, canonical=True) == raw, f"selftest: example {name} is not deterministic CBOR")
        if m["t"] in SCHEMAS:
            decode_message(raw)
    need(document_hash("cars", "car-1") == 0x31B33814AADBB9EF, "selftest: FNV-1a example 1 (§4.3)")
    need(document_hash("cars", {"vin": "W0L1"}) == 0xC993E1E04AB45955, "selftest: FNV-1a example 2 (§4.3)")

    text = _doc_text("CRDT.md")
    start = text.index("Example, a state")
    block = text[text.index("```", start) + 3:]
    block = block[:block.index("```")]
    state_hex, delta_hex = [p for p in block.split("\n\n") if p.strip()]
    state = crdt.decode_state(_annotated_hex(state_hex))
    need(crdt.materialize(state) == {"_id": "a", "color": "red"}, f"selftest: CRDT.md state example: {crdt.materialize(state)}")
    delta = crdt.decode_delta(_annotated_hex(delta_hex))
    crdt.merge(state, delta)
    need(crdt.materialize(state) == {"_id": "a", "color": "green"}, "selftest: CRDT.md delta example")

    site, t = 0x1234, 0x01A2030000000000
    doc = crdt.empty_state("n")
    crdt.merge(doc, crdt.decode_delta(crdt.encode_new_document_delta(site, t, {"x": 1, "y": [1.5, None]})))
    need(strict_equal(crdt.materialize(doc), {"x": 1, "y": [1.5, None], "_id": "n"}), "selftest: new-document delta")
    crdt.merge(doc, crdt.decode_delta(crdt.encode_set_field_delta(doc, site, t + 1, "x", "two")))
    need(strict_equal(crdt.materialize(doc), {"x": "two", "y": [1.5, None], "_id": "n"}), "selftest: one-field delta")
    numeric_start = cbor2.dumps([1, 1, [site], [[0, t, t]], [], {1: [0, 0, 0]}], canonical=True)
    try:
        crdt.merge(crdt.empty_state("m"), crdt.decode_delta(numeric_start))
        raise Deviation("selftest: a numeric range start for an unknown site must be a deltaGap (CRDT.md §12)")
    except crdt.CRDTFormatError:
        pass
    log(f"selftest: {len(examples)} PROTOCOL.md examples, FNV-1a examples, CRDT.md §12 example, delta round trips")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", help="ws://HOST:PORT of bigpeer serve (check)")
    p.add_argument("--key", help="API key, sent in hello.cred.apiKey (check)")
    p.add_argument("command", choices=["check", "violations", "selftest"],
                   help="check: a whole session against the server; violations: refusals and close codes; "
                   "selftest: the documents' examples, no server")
    p.add_argument("--collection", default="pycars")
    p.add_argument("--expect", help="JSON file: the documents the initial sync must deliver, exactly")
    p.add_argument("--upload", help="JSON file: a new document to upload (with _id)")
    p.add_argument("--update", help='JSON file: {"_id": ..., "field": ..., "value": ...} to upload as a change')
    p.add_argument("--live", help="JSON file: documents (full values) that must arrive as live changes")
    p.add_argument("--live-deleted", help="JSON file: ids of documents whose deletion must arrive as a live change")
    p.add_argument("--ready-file", help="created once subscribed, synced and uploaded (the driver then writes)")
    p.add_argument("--idle", type=float, default=0, help="stay idle this long before the live step; "
                   "the server must ping (use more than welcome.hb, e.g. 25)")
    p.add_argument("--resume", action="store_true", help="finally reconnect with the synced cp and `have`: "
                   "only the live changes must come again")
    p.add_argument("--credit", type=int, default=MIN_CREDIT, help="hello.credit (bytes, >= 65536)")
    p.add_argument("--max", type=int, default=MIN_CREDIT, help="hello.max (bytes, >= 65536)")
    p.add_argument("--read-only-key", help="violations: a key that may read but not write the collection")
    p.add_argument("--other-key", help="violations: a key that may not read the collection")
    p.add_argument("--tolerate-own-upload-echo", action="store_true",
                   help="accept the server sending our own uploaded new document back as a full state "
                        "(a known deviation from PROTOCOL.md §4.6; without this flag it fails the check)")
    args = p.parse_args()
    if args.command != "selftest" and not (args.url and args.key):
        p.error(f"{args.command} needs --url and --key")
    try:
        if args.command == "selftest":
            selftest()
        elif args.command == "violations":
            asyncio.run(violations(args))
        else:
            asyncio.run(Check(args).run())
    except Deviation as exc:
        print(f"sync-client: FAILED: {exc}", file=sys.stderr)
        sys.exit(1)
    except crdt.CRDTFormatError as exc:
        print(f"sync-client: FAILED: {exc}", file=sys.stderr)
        sys.exit(1)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"sync-client: FAILED: {type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(1)
    log(f"{args.command} passed")


if __name__ == "__main__":
    main()
