#!/usr/bin/env python3
"""Independent BigPeer sync client (protocol bigpeer-sync.v1), written from docs/PROTOCOL.md and
docs/CRDT.md §12 only, to prove the documents are enough to build a peer. Needs `websockets` and
`cbor2` (PyPI); see scripts/python-sync-client.sh for the conformance run that drives it. Modules
beside it: sync_wire.py (message schemas, session, replica), sync_crdt.py (CRDT states and
deltas), sync_violations.py (the `violations` and `selftest` commands).

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
from sync_violations import selftest, violations  # noqa: E402
from sync_wire import (MIN_CREDIT, STEP_TIMEOUT, SUBPROTOCOL, Deviation, Replica, Session,  # noqa: E402
                       compare_docs, document_hash, id_key, log, need, strict_equal)

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
        # Documents the server created while we watched: their change-log row carries no delta, so
        # on resume they come as full states even though we hold them (PROTOCOL.md §4.6).
        self.server_created = set()
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
                # A held document that leaves the subscription (here: deleted; the subscription has
                # no WHERE) comes as its current full state (PROTOCOL.md §4.6); anything else held
                # must come as a delta.
                need("delta" in e or e["kind"] == "delete" or id_key(e["id"]) in self.server_created,
                     f"resume: {e['id']!r} came as a full state although it is in `have`, still matches, and the server did not create it")
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
        # Each rejected entry with its document and the server's reason (PROTOCOL.md §4.8; a `msg`
        # beginning "not permitted" is final: the credentials' scope or write rules refuse it).
        need("rejected" not in m, "upload: server rejected entries: " + "; ".join(
            f"{entries[r['i']]['c']} {entries[r['i']]['id']!r}: {r['msg']}" if r.get("i", -1) < len(entries) else repr(r)
            for r in m.get("rejected", [])))
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
                k = id_key(e["id"])
                if "state" in e and k not in self.replica.docs:
                    self.server_created.add(k)
                value = self.replica.apply(e, f"changes txn {m['txn']} docs[{i}]")
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
