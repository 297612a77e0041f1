#!/bin/bash
# A server under a flood of handshake initiations, and one TCP flow through the tunnel.
#
#   sudo contrib/bench/handshake-flood.sh BRAID MODE RATE
#
# BRAID: the braid binary. MODE: v5 (initiations with a good mac1, keyed by the server's
# public key: what a flood by someone who knows that key looks like; this release) or v4
# (garbage initiations without MACs, for a braid build from before the cookie guard) or nokey
# (mac1 keyed by another key: someone who does not know the server's key). RATE:
# initiations a second (0: none). Two namespaces (fa, fb) joined by two veth paths shaped at
# 100 Mbit/s with tbf; braid up at both ends (SRR, rates given); the flood comes from the
# client's first path address for 12 s, the TCP flow runs 10 s of it. Prints one line: the
# TCP goodput in Mbit/s (empty if the connection failed), the server daemon's CPU seconds per
# second over the flow, the flood's count, and the server's guard counters and drops.
# Needs root, python3, tc (tbf). docs/benchmarks.md, "Handshake floods", has the figures.
set -u
BIN=$1; MODE=$2; RATE=$3; SECS=10
HERE=$(cd "$(dirname "$0")" && pwd)
D=$(mktemp -d /tmp/braid-flood.XXXXXX)
. "$HERE/bed.sh"
cleanup() {
  pkill -f "bulk_tcp.py sink" 2>/dev/null
  bed_down "$D"
}
trap cleanup EXIT
bed_up "$BIN" "$D"
cpu() { $BIN status --json -s $D/s.sock | python3 -c "import json,sys; v=json.load(sys.stdin); print(v['cpu_user_s']+v['cpu_system_s'])" 2>/dev/null || echo 0; }
ip netns exec fb python3 "$HERE/bulk_tcp.py" sink 10.77.0.1 5001 &
sleep 0.3
c0=$(cpu)
if [ "$RATE" != 0 ]; then
  ip netns exec fa python3 "$HERE/handshake_flood.py" 10.91.1.2 7000 $RATE $((SECS+2)) $MODE $SP 10.91.1.1 2> $D/flood.out &
fi
sleep 1
G=$(ip netns exec fa python3 "$HERE/bulk_tcp.py" send 10.77.0.1 5001 $SECS)
c1=$(cpu)
sleep 1.5
GUARD=$($BIN status --json -s $D/s.sock | python3 -c "import json,sys; v=json.load(sys.stdin); print(v.get('handshake_guard'), v['peers'][0]['session']['dropped'])" 2>/dev/null)
echo "$MODE rate=$RATE goodput_mbit=$G server_cpu_s_per_s=$(python3 -c "print(round(($c1-$c0)/$SECS,3))") $(cat $D/flood.out 2>/dev/null) $GUARD"
