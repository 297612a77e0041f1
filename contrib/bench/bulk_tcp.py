#!/usr/bin/env python3
"""Bulk TCP for contrib/bench/handshake-flood.sh: `sink ADDR PORT` reads until EOF; `send ADDR PORT SECS`
writes for SECS and prints the goodput in Mbit/s."""
import socket, sys, time
if sys.argv[1] == 'sink':
    l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind((sys.argv[2], int(sys.argv[3]))); l.listen(1)
    c, _ = l.accept()
    while c.recv(1 << 16): pass
else:
    c = socket.create_connection((sys.argv[2], int(sys.argv[3])), timeout=10)
    buf = b'x' * (1 << 16); t0 = time.monotonic(); n = 0; secs = float(sys.argv[4])
    while time.monotonic() - t0 < secs:
        n += c.send(buf)
    c.close()
    print(f"{n * 8 / secs / 1e6:.1f}")
