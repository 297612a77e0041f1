#!/bin/bash
# How long a tunnel is out when its client daemon restarts.
#
#   sudo contrib/bench/restart.sh BRAID [ROUNDS]
#
# The two-path bed of handshake-flood.sh (namespaces fa, fb; veth shaped at 100 Mbit/s), braid up
# at both ends. Each round stops the client daemon (SIGTERM), starts it again, and at once
# starts a probe in the client's namespace that connects to the server's tunnel address every
# 20 ms, sends 64 kB and reads the 64 kB the server sends back (data both ways, so both
# directions of the striped tunnel must work: SYNs and pure ACKs bypass the resequencer). It
# prints the time from the new daemon's start to the first exchange that completed, or "none
# in 10 s". Data goes both ways once before the first round.
# Needs root and python3.
set -u
BIN=$1; ROUNDS=${2:-3}
D=$(mktemp -d /tmp/braid-restart.XXXXXX)
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/bed.sh"
cleanup() {
  [ -n "${LISTENER:-}" ] && kill $LISTENER 2>/dev/null
  bed_down "$D"
}
trap cleanup EXIT
bed_up "$BIN" "$D"
# A listener that reads 64 kB from each connection, sends 64 kB back and closes it, forever.
ip netns exec fb python3 -c "
import socket
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(('10.77.0.1', 5001)); l.listen(64)
while True:
    c, _ = l.accept(); c.settimeout(2)
    try:
        got = 0
        while got < 65536:
            b = c.recv(65536)
            if not b: break
            got += len(b)
        if got == 65536: c.sendall(b'x' * 65536)
    except OSError: pass
    c.close()
" > /dev/null 2>&1 &
LISTENER=$!
sleep 0.5
probe() {
  ip netns exec fa python3 -c "
import socket, time
t0 = float('$T0')
while time.time() - t0 < 10:
    try:
        c = socket.create_connection(('10.77.0.1', 5001), timeout=0.5)
        c.sendall(b'y' * 65536)
        got = 0
        while True:
            b = c.recv(65536)
            if not b: break
            got += len(b)
        c.close()
        if got == 65536:
            print(f'round $r: 64 kB each way {time.time() - t0:.3f} s after the new daemon started'); break
    except OSError:
        time.sleep(0.02)
else:
    print('round $r: none in 10 s')
"
}
# Data both ways first, so both ends' stripers are past sequence number zero.
r=0; T0=$(date +%s.%N); probe > /dev/null
for r in $(seq 1 $ROUNDS); do
  pkill -TERM -f "up -c $D/c.toml"
  while pgrep -f "up -c $D/c.toml" > /dev/null; do sleep 0.05; done
  T0=$(date +%s.%N)
  ip netns exec fa $BIN up -c $D/c.toml >> $D/c.log 2>&1 &
  probe
done
