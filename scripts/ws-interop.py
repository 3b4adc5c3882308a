#!/usr/bin/env python3
"""Interop checks with the Python `websockets` library, both ways.

    python3 -m venv /tmp/ws-venv && /tmp/ws-venv/bin/pip install websockets
    /tmp/ws-venv/bin/python scripts/ws-interop.py ws://127.0.0.1:PORT[/path]   # their client, our server
    /tmp/ws-venv/bin/python scripts/ws-interop.py --no-subprotocol ws://127.0.0.1:PORT/api/v4/_echo
    /tmp/ws-venv/bin/python scripts/ws-interop.py --server CLIENT_BINARY        # their server, our client

The second form starts a `websockets` echo server on a free port and runs our client driver
(`Benchmarks/WSEcho` product `ws-interop-client`) against it, with and without deflate.

The real endpoint is `bigpeer serve --enable-echo` at /api/v4/_echo, which speaks no subprotocol:
pass --no-subprotocol there (we still offer bigpeer-sync.v1 and check the server selects none).
Benchmarks/WSEcho (`ws-echo 0`) selects bigpeer-sync.v1.
Checks, with and without permessage-deflate: text and binary echo at sizes around every length
encoding, fragmented messages, ping/pong, subprotocol selection, the close handshake with a code.
Exits non-zero on the first mismatch.
"""
import asyncio
import os
import random
import sys

import websockets
from websockets.asyncio.client import connect


EXPECTED_SUBPROTOCOL = "bigpeer-sync.v1"


async def check(url: str, compression) -> None:
    label = "deflate" if compression else "plain"
    async with connect(url, compression=compression, subprotocols=["bigpeer-sync.v1"],
                       max_size=32 * 1024 * 1024, ping_interval=None) as ws:
        assert ws.subprotocol == EXPECTED_SUBPROTOCOL, ws.subprotocol
        extensions = ws.response.headers.get("Sec-WebSocket-Extensions")
        assert bool(extensions) == bool(compression), extensions
        rng = random.Random(1)
        for size in [0, 1, 125, 126, 127, 65535, 65536, 100_000, 4 * 1024 * 1024]:
            text = "".join(rng.choice("abcκόσμε😀 ") for _ in range(size // 4))
            await ws.send(text)
            assert await ws.recv() == text, f"{label}: text of {len(text)} chars"
            data = os.urandom(size) if size % 2 else bytes([size % 251]) * size
            await ws.send(data)
            assert await ws.recv() == data, f"{label}: binary of {size} bytes"
        # Fragmented messages: websockets sends an iterable as continuation frames.
        await ws.send(["frag", "mented ", "κόσμε"])
        assert await ws.recv() == "fragmented κόσμε"
        await ws.send([b"\x00" * 1000, b"\x01" * 1000])
        assert await ws.recv() == b"\x00" * 1000 + b"\x01" * 1000
        # Many small messages in flight at once (pipelining through one read).
        for i in range(1000):
            await ws.send(f"m{i}")
        for i in range(1000):
            assert await ws.recv() == f"m{i}"
        latency = await ws.ping(b"hello")
        await asyncio.wait_for(latency, 5)
        await ws.close(code=4001, reason="interop done")
        assert ws.close_code == 4001, ws.close_code
    print(f"ok: {label}")


async def main(url: str) -> None:
    await check(url, None)
    await check(url, "deflate")
    # A version we do not speak must be refused with 426 (RFC 6455 §4.4).
    try:
        async with connect(url, additional_headers={"Sec-WebSocket-Version": "8"}):
            raise AssertionError("version 8 accepted")
    except websockets.exceptions.InvalidStatus as e:
        assert e.response.status_code in (400, 426), e.response.status_code
    print(f"websockets {websockets.__version__}: all interop checks passed")


async def serve_for(binary: str) -> None:
    from websockets.asyncio.server import serve

    async def echo(ws):
        async for message in ws:
            await ws.send(message)

    async with serve(echo, "127.0.0.1", 0, compression="deflate", subprotocols=["bigpeer-sync.v1"],
                     max_size=32 * 1024 * 1024) as server:
        port = server.sockets[0].getsockname()[1]
        for flags in ([], ["--no-deflate"]):
            proc = await asyncio.create_subprocess_exec(binary, "127.0.0.1", str(port), "/", *flags)
            assert await proc.wait() == 0, f"our client failed against websockets {websockets.__version__} {flags}"
    print(f"websockets {websockets.__version__} server: our client passed, with and without deflate")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--server":
        asyncio.run(serve_for(sys.argv[2]))
    else:
        args = sys.argv[1:]
        if args and args[0] == "--no-subprotocol":
            EXPECTED_SUBPROTOCOL = None
            args = args[1:]
        asyncio.run(main(args[0] if args else "ws://127.0.0.1:9001"))
