"""BigPeer CRDT document state and delta codec (docs/CRDT.md §12), written from the documents only.

Used by scripts/sync-client.py. It decodes a full document state and a delta into an absolute
model (every event's Meta as (stamp, site id, dot)), merges a delta into a state at the level of
values (last writer wins per component, counters per site, removal barriers), materializes the
document's JSON value, and encodes the two deltas a small peer needs to write: a new document and a
one-field REGISTER update.

    state = [1, 0, _id, sites, vv, reaped, root-slot]
    delta = [1, 1, sites, ranges, reaped, root-slot]
    slot  = {? 0: value, ? 1: marker, ? 2: counter, ? 3: removal, ? 4: {* name => slot}}

The merge here is value-level: it does not reproduce the server's pruning byte for byte (that is
not needed to check values), so it never re-encodes a merged state.
"""
import cbor2

FORMAT_VERSION = 1
KIND_STATE = 0
KIND_DELTA = 1
KIND_RESET = 2  # the reset delta of CRDT.md §11 (same layout); only sent to peers back after the TTL
UINT64 = (1 << 64) - 1
SLOT_KEYS = (0, 1, 2, 3, 4)


class CRDTFormatError(Exception):
    """A state or delta that does not follow the layout of docs/CRDT.md §12."""


def _need(cond, what):
    if not cond:
        raise CRDTFormatError(what)


def _uint(x, what):
    _need(isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= UINT64, f"{what}: not a uint64: {x!r}")
    return x


def _int(x, what):
    _need(isinstance(x, int) and not isinstance(x, bool) and -(1 << 64) <= x <= UINT64, f"{what}: not an integer: {x!r}")
    return x


def _number(x, what):
    """Counter bases and totals: always CBOR floats, finite (CRDT.md §12, §4)."""
    _need(isinstance(x, float), f"{what}: not a float: {x!r}")
    _need(x == x and x not in (float("inf"), float("-inf")), f"{what}: not finite")
    return x


class _Frame:
    """Resolves site indexes and dot offsets: base[site] is vv[site] (state) or range.to (delta)."""

    def __init__(self, sites, base):
        self.sites, self.base = sites, base

    def site(self, idx, what):
        _need(isinstance(idx, int) and 0 <= idx < len(self.sites), f"{what}: site index {idx!r} out of range")
        return self.sites[idx]

    def meta(self, arr, what):
        """[siteIdx, dotOffset, stampOffset] -> (stamp, site, dot)."""
        _need(isinstance(arr, list) and len(arr) >= 3, f"{what}: meta is not [site, dot, stamp]")
        site = self.site(arr[0], what)
        _need(site in self.base, f"{what}: site {site:#x} has no version vector entry / range")
        dot = self.base[site] - _uint(arr[1], f"{what} dot offset")
        _need(dot >= 0, f"{what}: dot before time zero")
        stamp = dot + _int(arr[2], f"{what} stamp offset")
        _need(0 <= stamp <= UINT64, f"{what}: stamp out of range")
        return (stamp, site, dot)


def _decode_slot(raw, frame, path):
    _need(isinstance(raw, dict) and raw, f"{path}: slot is not a non-empty map")
    slot = {}
    for key, val in raw.items():
        _need(key in SLOT_KEYS, f"{path}: unknown slot component {key!r}")
        if key == 0:  # the LWW value: [meta] | [meta, 0, value] | [meta, 1, id, len, metadata]
            _need(isinstance(val, list) and len(val) in (3, 5, 7), f"{path}: value component of {len(val)} items")
            meta = frame.meta(val, f"{path} register")
            if len(val) == 5:
                _need(val[3] == 0, f"{path}: register kind {val[3]!r} with 5 items (REGISTER is 0)")
                slot["reg"] = (meta, True, val[4])
            elif len(val) == 7:
                _need(val[3] == 1 and isinstance(val[4], str) and isinstance(val[6], dict),
                      f"{path}: not an ATTACHMENT [meta, 1, id, len, metadata]")
                token = {"_type": "attachment", "id": val[4], "len": _uint(val[5], f"{path} len"), "metadata": val[6]}
                slot["reg"] = (meta, True, token)
            else:
                slot["reg"] = (meta, False, None)  # meta only: hides older writes, never wins
        elif key == 1:
            slot["marker"] = frame.meta(val, f"{path} marker")
        elif key == 2:
            _need(isinstance(val, list) and len(val) == 2, f"{path}: counter is not [restart, contributions]")
            restart = None
            if val[0] is not None:
                r = val[0]
                _need(isinstance(r, list) and len(r) == 5 and isinstance(r[4], list), f"{path}: bad restart")
                observed = {}
                for o in r[4]:
                    _need(isinstance(o, list) and len(o) == 2, f"{path}: bad observed total")
                    observed[frame.site(o[0], path)] = _number(o[1], f"{path} observed total")
                restart = (frame.meta(r, f"{path} restart"), _number(r[3], f"{path} base"), observed)
            contrib = {}
            _need(isinstance(val[1], list), f"{path}: contributions not an array")
            for c in val[1]:
                _need(isinstance(c, list) and len(c) == 4, f"{path}: bad contribution")
                meta = frame.meta(c, f"{path} contribution")
                contrib[meta[1]] = (meta, _number(c[3], f"{path} total"))
            slot["counter"] = {"restart": restart, "contrib": contrib}
        elif key == 3:
            _need(isinstance(val, list) and len(val) == 6, f"{path}: removal is not [meta, barrier site, stamp, dot]")
            barrier = (_uint(val[4], f"{path} barrier stamp"), frame.site(val[3], path), _uint(val[5], f"{path} barrier dot"))
            slot["removal"] = (frame.meta(val, f"{path} removal"), barrier)
        else:
            _need(isinstance(val, dict), f"{path}: children is not a map")
            kids = {}
            for name, child in val.items():
                _need(isinstance(name, str) and name, f"{path}: child name {name!r} is not a non-empty string")
                kids[name] = _decode_slot(child, frame, f"{path}.{name}" if path else name)
            slot["children"] = kids
    return slot


def _decode_sites(raw):
    _need(isinstance(raw, list) and raw == sorted(raw) and len(set(raw)) == len(raw), "site table not strictly ascending")
    for s in raw:
        _uint(s, "site id")
        _need(s != 0, "site id 0")
    return raw


def _decode_vv(raw, sites, what):
    _need(isinstance(raw, list), f"{what} is not an array")
    vv = {}
    for e in raw:
        _need(isinstance(e, list) and len(e) == 2, f"{what} entry is not [site, timestamp]")
        _need(isinstance(e[0], int) and 0 <= e[0] < len(sites), f"{what}: site index out of range")
        vv[sites[e[0]]] = _uint(e[1], f"{what} timestamp")
    return vv


def _loads(data, what):
    _need(isinstance(data, (bytes, bytearray)) and data, f"{what}: empty or not bytes")
    try:
        items = cbor2.loads(data)
    except Exception as exc:  # cbor2 raises several types for malformed input
        raise CRDTFormatError(f"{what}: not CBOR: {exc}") from None
    _need(cbor2.dumps(items, canonical=True) == bytes(data), f"{what}: not deterministic CBOR")
    _need(isinstance(items, list) and items and items[0] == FORMAT_VERSION, f"{what}: not format version 1")
    return items


def decode_state(data):
    """-> {"id", "sites", "vv", "reaped", "root"}."""
    a = _loads(data, "state")
    _need(len(a) == 7 and a[1] == KIND_STATE, "state: not [1, 0, id, sites, vv, reaped, root]")
    sites = _decode_sites(a[3])
    vv = _decode_vv(a[4], sites, "version vector")
    reaped = _decode_vv(a[5], sites, "reaped version vector")
    return {"id": a[2], "sites": sites, "vv": vv, "reaped": reaped,
            "root": _decode_slot(a[6], _Frame(sites, vv), "") if a[6] else {}}


def decode_delta(data):
    """-> {"sites", "ranges": {site: (from, to)}, "reaped", "root"}."""
    a = _loads(data, "delta")
    _need(len(a) == 6 and a[1] != KIND_RESET, "delta: a reset delta (kind 2, CRDT.md §11), which this client does not merge")
    _need(len(a) == 6 and a[1] == KIND_DELTA, "delta: not [1, 1, sites, ranges, reaped, root]")
    sites = _decode_sites(a[2])
    ranges = {}
    _need(isinstance(a[3], list), "delta ranges not an array")
    for r in a[3]:
        _need(isinstance(r, list) and len(r) == 3 and isinstance(r[0], int) and 0 <= r[0] < len(sites), "bad range")
        to = _uint(r[1], "range to")
        if r[2] is None:  # the range starts at nothing: `since` had no entry for this site
            ranges[sites[r[0]]] = (None, to)
        else:
            width = _uint(r[2], "range width")
            _need(0 < width <= to, "empty range or range before time zero")
            ranges[sites[r[0]]] = (to - width, to)
    reaped = _decode_vv(a[4], sites, "reaped version vector")
    frame = _Frame(sites, {s: r[1] for s, r in ranges.items()})
    root = _decode_slot(a[5], frame, "") if a[5] else {}
    return {"sites": sites, "ranges": ranges, "reaped": reaped, "root": root}


def empty_state(doc_id):
    """Document(id:) before any write: no sites, empty version vector, empty root."""
    return {"id": doc_id, "sites": [], "vv": {}, "reaped": {}, "root": {}}


# ---- value-level merge ------------------------------------------------------------------------

def _newer(a, b):
    return a if b is None or (a is not None and a > b) else b


def _merge_slot(into, add):
    if "reg" in add and ("reg" not in into or add["reg"][0] > into["reg"][0]):
        into["reg"] = add["reg"]
    if "marker" in add:
        into["marker"] = _newer(add["marker"], into.get("marker"))
    if "removal" in add:
        old = into.get("removal")
        into["removal"] = add["removal"] if old is None or add["removal"][1] > old[1] else old
    if "counter" in add:
        cnt = into.setdefault("counter", {"restart": None, "contrib": {}})
        r = add["counter"]["restart"]
        if r is not None and (cnt["restart"] is None or r[0] > cnt["restart"][0]):
            cnt["restart"] = r
        for site, c in add["counter"]["contrib"].items():
            if site not in cnt["contrib"] or c[0] > cnt["contrib"][site][0]:
                cnt["contrib"][site] = c
    for name, child in add.get("children", {}).items():
        _merge_slot(into.setdefault("children", {}).setdefault(name, {}), child)


def merge(state, delta):
    """Merges a decoded delta into a decoded state in place (value level, see module doc)."""
    for site, (lo, hi) in delta["ranges"].items():
        have = state["vv"].get(site)
        # The server's rule: a range that starts at a timestamp needs an entry for that site.
        _need(lo is None or (have is not None and lo <= have), f"deltaGap: range of site {site:#x} starts at {lo!r}, we have {have!r}")
        state["vv"][site] = max(have or 0, hi)
    _merge_slot(state["root"], delta["root"])


# ---- materialize ------------------------------------------------------------------------------

def _counter_value(cnt, barrier):
    r = cnt["restart"]
    base, observed = (r[1], r[2]) if r else (0, {})
    total = base + sum(t - observed.get(site, 0) for site, (_m, t) in cnt["contrib"].items())
    if float(total).is_integer() and abs(total) <= 2 ** 53:
        return int(total)
    return float(total)


def _winner(slot, barrier):
    """(meta, value) of the slot's visible winner, or None. barrier: events <= it are removed."""
    if "removal" in slot:
        barrier = max(barrier, slot["removal"][1])
    best = None
    reg = slot.get("reg")
    reg_live = reg is not None and reg[0] > barrier
    if reg_live and reg[1]:
        best = (reg[0], reg[2])
    below = max(barrier, reg[0]) if reg_live else barrier  # a live register hides older writes below
    cnt = slot.get("counter")
    if cnt:
        events = [c[0] for c in cnt["contrib"].values()] + ([cnt["restart"][0]] if cnt["restart"] else [])
        live = [m for m in events if m > barrier]
        if live and (best is None or max(live) > best[0]):
            best = (max(live), _counter_value(cnt, barrier))
    marker = slot.get("marker")
    kids, newest = {}, marker if marker is not None and marker > below else None
    for name, child in slot.get("children", {}).items():
        w = _winner(child, below)
        if w is not None:
            kids[name] = w[1]
            newest = _newer(w[0], newest)
    if newest is not None and (best is None or newest > best[0]):
        best = (newest, kids)
    return best


def materialize(state):
    """The document's value with _id, or None when it does not exist (deleted / never inserted)."""
    w = _winner(state["root"], (-1, -1, -1))
    if w is None or not isinstance(w[1], dict):
        return None
    value = dict(w[1])
    value["_id"] = state["id"]
    return value


def newest_stamp(slot):
    stamps = [m[0] for m in (slot.get("reg", (None,))[0], slot.get("marker")) if m is not None]
    if "removal" in slot:
        stamps.append(slot["removal"][0][0])
    cnt = slot.get("counter")
    if cnt:
        stamps += [c[0][0] for c in cnt["contrib"].values()] + ([cnt["restart"][0][0]] if cnt["restart"] else [])
    stamps += [newest_stamp(c) for c in slot.get("children", {}).values()]
    return max(stamps, default=0)


# ---- encode the deltas a peer writes ----------------------------------------------------------

def encode_new_document_delta(site, dot, fields):
    """A new document written by one operation of `site` at HLC `dot`: root marker + one REGISTER
    per top-level field (strict typing: objects and arrays are one REGISTER each)."""
    _need(site != 0 and "_id" not in fields, "site 0 or _id among the fields")
    children = {name: {0: [0, 0, 0, 0, value]} for name, value in fields.items()}
    root = {1: [0, 0, 0], 4: children} if children else {1: [0, 0, 0]}
    return cbor2.dumps([FORMAT_VERSION, KIND_DELTA, [site], [[0, dot, None]], [], root], canonical=True)


def encode_set_field_delta(state, site, dot, field, value):
    """SET field = value (REGISTER) on an existing document, by `site` at HLC `dot`. The stamp is
    max(dot, newest stamp in the document + 1) (docs/CRDT.md §2); the range starts at what the
    document already has from `site` (0 if nothing)."""
    since = state["vv"].get(site)
    _need(since is None or dot > since, "dot not above the document's version vector entry for this site")
    stamp = max(dot, newest_stamp(state["root"]) + 1)
    reg = [0, 0, stamp - dot, 0, value]
    width = None if since is None else dot - since
    return cbor2.dumps([FORMAT_VERSION, KIND_DELTA, [site], [[0, dot, width]], [], {4: {field: {0: reg}}}],
                       canonical=True)


def hlc_now(wall_ms, last=0):
    """tick(wall): max(wall << 16, last + 1) (docs/CRDT.md §2)."""
    return max(wall_ms << 16, last + 1)
