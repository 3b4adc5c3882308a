"""The `violations` and `selftest` commands of scripts/sync-client.py: misbehaving connections that
must end with the refusal or close code PROTOCOL.md gives (§4.2, §4.11, §5, §7), and the documents'
own examples checked without a server."""
import asyncio
import os
import random
import re
import time

import cbor2
import websockets

import sync_crdt as crdt
from sync_wire import (MIN_CREDIT, SCHEMAS, STEP_TIMEOUT, SUBPROTOCOL, Deviation, decode_message,
                       document_hash, log, need, strict_equal)

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
        ("sub pipelined behind hello", None, [], Outcome(close=4004), 3),  # replaced below: needs two messages
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
            # PROTOCOL.md §4.2: pipelined messages wait for the credentials check and run right
            # after `welcome`, in order: the sub must be served (welcome, docs..., synced).
            seen = []
            while "synced" not in seen:
                raw = await asyncio.wait_for(ws.recv(), STEP_TIMEOUT)
                m = decode_message(raw)
                if m["t"] == "presence":  # gossip (§4.14) may come at any time after welcome
                    continue
                seen.append(m["t"])
                need(m["t"] in ("welcome", "docs", "synced"), f"violations: sub pipelined behind hello: got {m!r:.200}")
                if m["t"] == "docs":
                    await ws.send(cbor2.dumps({"t": "credit", "bytes": len(raw)}, canonical=True))
            need(seen[0] == "welcome", f"violations: sub pipelined behind hello: {seen}")
            return f"sub pipelined behind hello: served after welcome ({len(seen)} messages up to synced)"
        finally:
            await ws.close()

    async def named(name, run):
        try:
            return await run
        except Deviation:
            raise
        except (OSError, asyncio.TimeoutError, websockets.WebSocketException) as exc:
            raise Deviation(f"violations: {name}: {type(exc).__name__}: {exc}") from None

    runs = [named(c[0], pipelined() if c[0] == "sub pipelined behind hello" else violation_case(args, *c)) for c in cases]
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


