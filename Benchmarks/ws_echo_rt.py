#!/usr/bin/env python3
"""Echo round trips per second over WebSocket: C connections, one 64-byte text message in flight
on each, for S seconds. Raw sockets and a selector (no library), so the client costs little per
round trip, but on a small box it is still usually the bottleneck: read the numbers as a floor.

    ws_echo_rt.py PORT [CONNECTIONS=1] [SECONDS=5] [PATH=/api/v4/_echo] [SIZE=64]
"""
import os
import selectors
import socket
import sys
import time

port = int(sys.argv[1])
conns = int(sys.argv[2]) if len(sys.argv) > 2 else 1
seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 5
path = sys.argv[4] if len(sys.argv) > 4 else "/api/v4/_echo"
size = int(sys.argv[5]) if len(sys.argv) > 5 else 64
assert size <= 125
request = (f"GET {path} HTTP/1.1\r\nHost: b\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n").encode()
payload = b"x" * size
frame = bytes([0x81, 0x80 | size]) + b"\0\0\0\0" + payload  # masked with a zero key
reply = bytes([0x81, size]) + payload

sel = selectors.DefaultSelector()
socks = []
for _ in range(conns):
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(request)
    head = b""
    while b"\r\n\r\n" not in head:
        head += s.recv(4096)
    assert head.startswith(b"HTTP/1.1 101"), head[:40]
    s.setblocking(False)
    sel.register(s, selectors.EVENT_READ, [b""])
    socks.append(s)

count = 0
for s in socks:
    s.send(frame)
start = time.monotonic()
end = start + seconds
while time.monotonic() < end:
    for key, _ in sel.select(timeout=0.5):
        buf = key.data[0] + key.fileobj.recv(65536)
        while len(buf) >= len(reply):
            assert buf[:len(reply)] == reply, buf[:8]
            buf = buf[len(reply):]
            count += 1
            key.fileobj.send(frame)
        key.data[0] = buf
elapsed = time.monotonic() - start
print(f"{conns} connection(s), {size} B text: {count / elapsed:,.0f} round trips/s ({count} in {elapsed:.1f} s)")
