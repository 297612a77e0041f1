#!/bin/bash
# Samples the lab client's TCP state (`ss -tin`: cwnd, ssthresh, rtt, retransmissions) every
# 100 ms while a `braid lab run` is up, one line per sample with a wall-clock time. Start it just
# before the run; it waits for the client namespace and stops when the namespace is gone.
#   examples/lab/sample-tcp.sh OUT.txt & sudo braid lab run examples/lab/bag.toml ...; wait
# Its forks (ip netns exec, ss) load the machine a little: on this 2-core machine that was
# enough to show how PET's estimates depended on when the daemon read its sockets
# (docs/benchmarks.md, "Kernel receive timestamps").
set -u
OUT=${1:?usage: sample-tcp.sh OUT.txt [PORT]}
PORT=${2:-5201}
: > "$OUT"
NS=
for _ in $(seq 1 400); do
  NS=$(ip netns list | awk '/-client/{print $1}' | head -1)
  [ -n "$NS" ] && break
  sleep 0.05
done
[ -n "$NS" ] || { echo "no lab client namespace appeared" >&2; exit 1; }
while ip netns list | grep -q "^$NS"; do
  T=$(date +%s.%N)
  L=$(ip netns exec "$NS" ss -tin state established "( dport = :$PORT )" 2>/dev/null | grep -o 'rto:.*' | head -1)
  [ -n "$L" ] && echo "$T $L" >> "$OUT"
  sleep 0.1
done
