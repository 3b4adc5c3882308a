"""Opens N idle keep-alive connections (each after one request) and holds them until stdin closes.

Prints "ready <opened>" once all are open. Used by Benchmarks/http.sh to measure server memory
per idle connection (RSS before vs. after).
"""
import socket
import sys

port, count = int(sys.argv[1]), int(sys.argv[2])
socks = []
for i in range(count):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: b\r\n\r\n")
    socks.append(s)
for s in socks:  # drain each response so the connection is idle, not mid-request
    s.settimeout(10)
    s.recv(4096)
print("ready", len(socks), flush=True)
sys.stdin.read()
