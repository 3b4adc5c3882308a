#!/usr/bin/env python3
"""Echo server with the Python `websockets` library (asyncio implementation), for Benchmarks/ws.sh.

    python_ws_echo.py PORT

Echoes every message with its type on any path. permessage-deflate is the library's default
(accepted when the client offers it); 20 MiB messages like BigPeer's echo endpoint; no keep-alive
pings (the benchmark connections are never idle long enough to need them).
Needs `pip install websockets` (Benchmarks/ws.sh makes a virtualenv for it).
"""
import asyncio
import sys

from websockets.asyncio.server import serve
from websockets.exceptions import ConnectionClosed


async def echo(ws):
    try:
        async for message in ws:
            await ws.send(message)
    except ConnectionClosed:
        pass  # the load client ends its connections without a close handshake


async def main(port):
    async with serve(echo, "127.0.0.1", port, max_size=20 << 20, ping_interval=None):
        print("ready", flush=True)
        await asyncio.get_running_loop().create_future()


asyncio.run(main(int(sys.argv[1])))
