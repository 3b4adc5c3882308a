#!/usr/bin/env python3
"""Holds N idle WebSocket connections to ws://127.0.0.1:PORT/PATH, answering the server's Pings.

    ws-idle-clients.py PORT COUNT SECONDS [PATH]

Upgrades COUNT connections (in batches inside the listen backlog), prints "open N", answers
every Ping with a masked Pong for SECONDS, prints "result pinged=P closed=C" (connections that
got at least one Ping / that the server closed), then holds the sockets until stdin closes.
Used by Tests/WebSocketTests/IdleConnectionsTests.swift (a child process, so the 10,000 client
sockets do not count against the test process's descriptor limit).
"""
import os
import selectors
import socket
import struct
import sys
import time

port, count, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
path = sys.argv[4] if len(sys.argv) > 4 else "/ws"
request = (f"GET {path} HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n").encode()
socks = []
leftovers = []  # bytes that arrived after the 101 in the same read (e.g. an early Ping)
for start in range(0, count, 500):
    batch = []
    for _ in range(min(500, count - start)):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(request)
        batch.append(s)
    for s in batch:
        s.settimeout(10)
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = s.recv(4096)
            if not chunk:
                sys.exit(f"connection {len(socks)} closed during the handshake")
            head += chunk
        if not head.startswith(b"HTTP/1.1 101"):
            sys.exit(f"connection {len(socks)}: {head[:40]!r}")
        s.setblocking(False)
        socks.append(s)
        leftovers.append(head.split(b"\r\n\r\n", 1)[1])
print("open", len(socks), flush=True)

sel = selectors.DefaultSelector()
for i, s in enumerate(socks):
    sel.register(s, selectors.EVENT_READ, i)
pinged, closed = set(), set()


def frames(i, s, buf):
    """Answers every complete Ping in buf; returns what is left of an incomplete frame."""
    while len(buf) >= 2 and len(buf) >= 2 + (buf[1] & 0x7F):
        opcode, n = buf[0] & 0x0F, buf[1] & 0x7F
        payload, buf = buf[2:2 + n], buf[2 + n:]
        if opcode == 0x9:  # Ping → Pong, masked with a zero key (any key is valid, RFC 6455 §5.3)
            pinged.add(i)
            s.sendall(bytes([0x8A, 0x80 | len(payload)]) + b"\0\0\0\0" + payload)
    return buf


# A Ping that arrived together with the 101 (the handshake read took both) must not be lost:
# unanswered, the server would wait for its Pong and send no other Ping in the window.
buffers = [frames(i, socks[i], leftovers[i]) for i in range(len(socks))]
deadline = time.monotonic() + seconds
while time.monotonic() < deadline:
    for key, _ in sel.select(timeout=0.1):
        i, s = key.data, key.fileobj
        try:
            data = s.recv(4096)
        except BlockingIOError:
            continue
        except OSError:
            data = b""
        if not data:
            closed.add(i)
            sel.unregister(s)
            continue
        buffers[i] = frames(i, s, buffers[i] + data)
print(f"result pinged={len(pinged)} closed={len(closed)}", flush=True)
sys.stdin.read()
