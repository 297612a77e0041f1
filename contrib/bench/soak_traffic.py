#!/usr/bin/env python3
"""Traffic for contrib/bench/soak.sh: what a home router's bond carries for hours.

  soak_traffic.py serve ADDR            # TCP 5002 (request/response), UDP 5003 (echo), TCP 5004 (bulk sink)
  soak_traffic.py churn ADDR SECS RATE  # RATE new TCP connections and RATE new UDP sockets a second

`churn` opens each TCP connection from a new ephemeral port, sends 1-16 kB, reads the 4-64 kB
answer and closes it; one in eight is reset instead (SO_LINGER 0: no FIN, as when a NAT forgets
a flow). Each UDP query goes from a new socket (a new source port, as a DNS resolver's) and
waits up to 1 s for its echo. Every 10 s it also sends 5 s of bulk TCP to port 5004. Each line it
prints is one 10 s interval: `t=.. tcp_ok=.. tcp_fail=.. udp_ok=.. udp_lost=.. bulk_mbit=..`;
the last line sums the run.
"""
import os, random, socket, struct, sys, threading, time

TCP_PORT, UDP_PORT, BULK_PORT = 5002, 5003, 5004


def read_up_to(c, n):
    """Read until `n` bytes came or the peer closed; how many came."""
    got = 0
    while got < n:
        b = c.recv(min(65536, n - got))
        if not b:
            break
        got += len(b)
    return got


def serve(addr):
    def listen(port, handler):
        ls = socket.socket()
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind((addr, port))
        ls.listen(512)
        while True:
            c, _ = ls.accept()
            threading.Thread(target=handler, args=(c,), daemon=True).start()

    def answer(c):
        c.settimeout(10)
        try:
            head = b''
            while len(head) < 8:
                b = c.recv(8 - len(head))
                if not b:
                    return
                head += b
            want, back = struct.unpack('!II', head)
            if read_up_to(c, want) == want:
                c.sendall(b'r' * back)
        except OSError:
            pass
        finally:
            c.close()

    def udp():
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((addr, UDP_PORT))
        while True:
            data, peer = s.recvfrom(2048)
            s.sendto(data, peer)

    def drain(c):
        c.settimeout(30)
        try:
            while c.recv(1 << 16):
                pass
        except OSError:
            pass
        c.close()

    for f in (lambda: listen(TCP_PORT, answer), udp, lambda: listen(BULK_PORT, drain)):
        threading.Thread(target=f, daemon=True).start()
    while True:
        time.sleep(3600)


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.n = {'tcp_ok': 0, 'tcp_fail': 0, 'udp_ok': 0, 'udp_lost': 0, 'bulk_bytes': 0}

    def add(self, k, v=1):
        with self.lock:
            self.n[k] += v

    def take(self):
        with self.lock:
            n, self.n = self.n, {k: 0 for k in self.n}
        return n


def churn(addr, secs, rate):
    tally = Tally()
    end = time.monotonic() + secs
    rng = random.Random(os.getpid())

    def one_tcp():
        want, back = rng.randint(1, 16) * 1024, rng.randint(4, 64) * 1024
        reset = rng.random() < 0.125
        try:
            c = socket.create_connection((addr, TCP_PORT), timeout=5)
            c.settimeout(5)
            c.sendall(struct.pack('!II', want, back) + b'q' * want)
            got = read_up_to(c, back)
            if reset:
                c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0))
            c.close()
            tally.add('tcp_ok' if got == back else 'tcp_fail')
        except OSError:
            tally.add('tcp_fail')

    def one_udp():
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(1)
        msg = os.urandom(rng.randint(40, 1200))
        try:
            s.sendto(msg, (addr, UDP_PORT))
            data, _ = s.recvfrom(2048)
            tally.add('udp_ok' if data == msg else 'udp_lost')
        except OSError:
            tally.add('udp_lost')
        s.close()

    def spawner(work):
        gap = 1.0 / rate
        nxt = time.monotonic()
        while nxt < end:
            threading.Thread(target=work, daemon=True).start()
            nxt += gap
            time.sleep(max(0.0, nxt - time.monotonic()))

    def bulk():
        buf = b'b' * (1 << 16)
        while time.monotonic() < end - 5:
            t0 = time.monotonic()
            try:
                c = socket.create_connection((addr, BULK_PORT), timeout=5)
                while time.monotonic() - t0 < 5:
                    tally.add('bulk_bytes', c.send(buf))
                c.close()
            except OSError:
                pass
            time.sleep(max(0.0, 10 - (time.monotonic() - t0)))

    for f in (lambda: spawner(one_tcp), lambda: spawner(one_udp), bulk):
        threading.Thread(target=f, daemon=True).start()
    total = {}
    t0 = time.monotonic()
    while time.monotonic() < end + 6:
        time.sleep(10)
        n = tally.take()
        for k, v in n.items():
            total[k] = total.get(k, 0) + v
        print(f"t={time.monotonic() - t0:.0f} tcp_ok={n['tcp_ok']} tcp_fail={n['tcp_fail']} "
              f"udp_ok={n['udp_ok']} udp_lost={n['udp_lost']} "
              f"bulk_mbit={n['bulk_bytes'] * 8 / 10 / 1e6:.1f}", flush=True)
    print(f"total tcp_ok={total['tcp_ok']} tcp_fail={total['tcp_fail']} "
          f"udp_ok={total['udp_ok']} udp_lost={total['udp_lost']} "
          f"bulk_gb={total['bulk_bytes'] / 1e9:.2f}", flush=True)


if __name__ == '__main__':
    if sys.argv[1] == 'serve':
        serve(sys.argv[2])
    else:
        churn(sys.argv[2], float(sys.argv[3]), float(sys.argv[4]))
