#!/usr/bin/env python3
"""TCP for contrib/bench/police-kernel.sh.
`police_tcp.py sink ADDR PORT SECS [tcp|mptcp]` accepts one connection and prints the Mbit/s it
read in the SECS after its first byte; `police_tcp.py send ADDR PORT SECS CC [tcp|mptcp [BIND]]`
writes for SECS with congestion control CC (set on the socket, so the namespace's default does
not matter), from address BIND if given."""
import socket, sys, time
IPPROTO_MPTCP = 262
mode, addr, port, secs = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
def stream(proto):
    return socket.socket(socket.AF_INET, socket.SOCK_STREAM, IPPROTO_MPTCP if proto == 'mptcp' else 0)
if mode == 'sink':
    l = stream(sys.argv[5] if len(sys.argv) > 5 else 'tcp')
    l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind((addr, port)); l.listen(1)
    c, _ = l.accept()
    c.settimeout(1.0)
    n = 0; t0 = None
    while True:
        try:
            b = c.recv(1 << 16)
        except socket.timeout:
            b = None
        now = time.monotonic()
        if b:
            if t0 is None: t0 = now
            if now - t0 <= secs: n += len(b)
        if b == b'' or (t0 is not None and now - t0 > secs):
            break
    print(f"{n * 8 / secs / 1e6:.2f}")
else:
    c = stream(sys.argv[6] if len(sys.argv) > 6 else 'tcp')
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, sys.argv[5].encode())
    if len(sys.argv) > 7:
        c.bind((sys.argv[7], 0))
    c.settimeout(2.0)
    c.connect((addr, port))
    buf = b'x' * (1 << 16); t0 = time.monotonic()
    while time.monotonic() - t0 < secs + 1:
        try:
            c.send(buf)
        except socket.timeout:
            continue
        except OSError:
            break
    c.close()
