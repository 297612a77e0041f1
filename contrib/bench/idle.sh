#!/bin/bash
# What an idle bond costs on its links: the bytes and datagrams two paths carry while nothing
# goes through the tunnel.
#
#   sudo contrib/bench/idle.sh BRAID [SECS]
#
# The two-path bed of bed.sh (namespaces fa and fb), `braid up` at both ends, then 10 s for
# the bond to go idle (it does after 5 s without data); then counts what the client's two veth ends
# send and receive over SECS (default 20) and prints, per path: datagrams a second each way,
# bytes a second both ways (IP level), and GB a month at that rate. Needs root, python3.
# docs/benchmarks.md, "An idle bond probes once a second", has the figures.
set -u
BIN=$(readlink -f "$1"); SECS=${2:-20}
HERE=$(cd "$(dirname "$0")" && pwd)
D=$(mktemp -d /tmp/braid-idle.XXXXXX)
. "$HERE/bed.sh"
trap 'bed_down "$D"' EXIT
bed_up "$BIN" "$D"
sleep 10
count() { # NS DEV -> tx_packets rx_packets tx_bytes rx_bytes
  local s=/sys/class/net/$2/statistics
  ip netns exec "$1" cat $s/tx_packets $s/rx_packets $s/tx_bytes $s/rx_bytes | tr '\n' ' '
}
a1=$(count fa fa1); a2=$(count fa fa2)
sleep "$SECS"
b1=$(count fa fa1); b2=$(count fa fa2)
python3 - "$SECS" "$a1" "$b1" "$a2" "$b2" <<'EOF'
import sys
secs = float(sys.argv[1])
for i, (a, b) in enumerate([(sys.argv[2], sys.argv[3]), (sys.argv[4], sys.argv[5])]):
    d = [int(y) - int(x) for x, y in zip(a.split(), b.split())]
    # Ethernet frames on the veth: 14 bytes of header each, not on a real link's IP budget.
    ip_bytes = d[2] + d[3] - 14 * (d[0] + d[1])
    rate = ip_bytes / secs
    print(f"path {i + 1}: {d[0] / secs:.1f} datagrams/s out, {d[1] / secs:.1f} in, "
          f"{rate:.0f} bytes/s both ways (IP), {rate * 86400 * 30 / 1e9:.2f} GB a month")
EOF
"$BIN" status -s "$D/c.sock" | head -2
