#!/usr/bin/env python3
"""Traffic for contrib/bench/soak.sh: what a home router's bond carries for hours.

  soak_traffic.py serve ADDR [FAILLOG]           # TCP 5002 (request/response), UDP 5003 (echo), TCP 5004 (bulk sink)
  soak_traffic.py churn ADDR SECS RATE [FAILLOG]  # RATE new TCP connections and RATE new UDP sockets a second

`churn` opens each TCP connection from a new ephemeral port, sends 1-16 kB, reads the 4-64 kB
answer and closes it; one in eight is reset instead (SO_LINGER 0: no FIN, as when a NAT forgets
a flow). Each UDP query goes from a new socket (a new source port, as a DNS resolver's) and
waits up to 1 s for its echo. Every 10 s it also sends 5 s of bulk TCP to port 5004. Each line it
prints is one 10 s interval: `t=.. tcp_ok=.. tcp_fail=.. udp_ok=.. udp_lost=.. bulk_mbit=..`;
the last line sums the run.

With FAILLOG, each failed exchange is also a line there, to be set beside the daemons' events:
`t=.. tcp port=.. phase=connect|send|recv got=../.. reset=.. took=.. err=..` (t in Unix
seconds when the exchange began, port the connection's local port), followed for a connection that hung in `recv` by
the kernel's `ss -tino` view of it taken before it was closed; `t=.. udp port=.. err=..` for a
lost query. The server's side logs `t=.. serve peer=.. got=../.. err=..` for an exchange it could not finish.
"""
import os, random, socket, struct, subprocess, sys, threading, time

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


class FailLog:
    """Lines about failed exchanges, appended to a file (or dropped without one)."""

    def __init__(self, path):
        self.lock = threading.Lock()
        self.f = open(path, 'a', buffering=1) if path else None

    def write(self, line):
        if self.f:
            with self.lock:
                self.f.write(line + '\n')


def ss_of(port):
    """The kernel's view of the TCP sockets on local port `port` (`ss -tino`)."""
    try:
        out = subprocess.run(['ss', '-tino', 'sport', '=', f':{port}'], capture_output=True,
                             text=True, timeout=5).stdout.strip().splitlines()[1:]
    except (OSError, subprocess.SubprocessError) as e:
        out = [f'ss failed: {e}']
    return '\n'.join('    ' + l for l in out)


def serve(addr, faillog=None):
    log = FailLog(faillog)

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
        want, got = 8, 0
        try:
            peer = c.getpeername()
        except OSError:
            peer = '?'
        try:
            head = b''
            while len(head) < 8:
                b = c.recv(8 - len(head))
                if not b:
                    if head:
                        log.write(f't={time.time():.3f} serve peer={peer} got={len(head)}/8 err=closed')
                    return
                head += b
            want, back = struct.unpack('!II', head)
            got = read_up_to(c, want)
            if got == want:
                c.sendall(b'r' * back)
            else:
                log.write(f't={time.time():.3f} serve peer={peer} got={got}/{want} err=closed')
        except OSError as e:
            log.write(f't={time.time():.3f} serve peer={peer} got={got}/{want} err={e!r}')
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


def churn(addr, secs, rate, faillog=None):
    tally = Tally()
    log = FailLog(faillog)
    end = time.monotonic() + secs
    rng = random.Random(os.getpid())

    def one_tcp():
        want, back = rng.randint(1, 16) * 1024, rng.randint(4, 64) * 1024
        reset = rng.random() < 0.125
        t0, wall = time.monotonic(), time.time()
        phase, got, port, c = 'connect', 0, 0, None
        try:
            c = socket.socket()
            c.settimeout(5)
            c.connect((addr, TCP_PORT))
            port = c.getsockname()[1]
            phase = 'send'
            c.sendall(struct.pack('!II', want, back) + b'q' * want)
            phase = 'recv'
            got = read_up_to(c, back)
            if reset:
                c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0))
            err = None if got == back else 'closed'
        except OSError as e:
            err = repr(e)
        if err is None:
            tally.add('tcp_ok')
        else:
            tally.add('tcp_fail')
            line = (f't={wall:.3f} tcp port={port} phase={phase} got={got}/{back} '
                    f'reset={int(reset)} took={time.monotonic() - t0:.3f} err={err}')
            if phase != 'connect' and port:
                line += '\n' + ss_of(port)
            log.write(line)
        if c is not None:
            c.close()

    def one_udp():
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(1)
        msg = os.urandom(rng.randint(40, 1200))
        wall = time.time()
        try:
            s.sendto(msg, (addr, UDP_PORT))
            data, _ = s.recvfrom(2048)
            ok = data == msg
            err = 'mismatch'
        except OSError as e:
            ok, err = False, repr(e)
        tally.add('udp_ok' if ok else 'udp_lost')
        if not ok:
            log.write(f't={wall:.3f} udp port={s.getsockname()[1]} err={err}')
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
        serve(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None)
    else:
        churn(sys.argv[2], float(sys.argv[3]), float(sys.argv[4]),
              sys.argv[5] if len(sys.argv) > 5 else None)
