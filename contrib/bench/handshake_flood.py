#!/usr/bin/env python3
"""Send handshake initiations at RATE a second for SECS to HOST:PORT (contrib/bench/handshake-flood.sh).
MODE v5: a good mac1 (keyed by the server's public key PUB) and garbage Noise; nokey: the same with a
mac1 keyed by another key; v4: garbage, no MACs.
usage: handshake_flood.py HOST PORT RATE SECS MODE PUB [SOURCE_ADDRESS]"""
import socket, sys, time, hashlib, base64
host, port, rate, secs, mode, pub = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5], sys.argv[6]
src = sys.argv[7] if len(sys.argv) > 7 else None
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
if src: s.bind((src, 0))
s.setblocking(False)
# nokey: a mac1 keyed by some other key (an attacker who does not know the server's key).
key = hashlib.blake2s(b"mac1----" + (bytes(32) if mode == 'nokey' else base64.b64decode(pub))).digest()
def init(i):
    body = bytes([1, 0x10, 0, 0]) + i.to_bytes(4, 'big') + bytes([0x33]) * 148
    if mode in ('v5', 'nokey'):
        mac1 = hashlib.blake2s(body, key=key, digest_size=16).digest()
        return body + mac1 + bytes(16)
    return body + bytes([0x33]) * 32
pkts = [init(i) for i in range(256)]
start = time.monotonic(); sent = 0; replies = 0
batch = max(1, rate // 1000)
while True:
    now = time.monotonic() - start
    if now >= secs: break
    due = int(now * rate)
    while sent < due:
        try: s.sendto(pkts[sent & 255], (host, port))
        except BlockingIOError: pass
        sent += 1
    try:
        while True:
            s.recv(128); replies += 1
    except BlockingIOError: pass
    time.sleep(0.0005)
print(f"sent {sent} replies {replies} in {secs} s", file=sys.stderr)
