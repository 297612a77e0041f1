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
cleanup() {
  pkill -f "up -c $D/" 2>/dev/null; pkill -f "bulk_tcp.py sink" 2>/dev/null; sleep 0.5
  ip netns del fa 2>/dev/null; ip netns del fb 2>/dev/null; rm -rf "$D"
}
trap cleanup EXIT
ip netns del fa 2>/dev/null; ip netns del fb 2>/dev/null
ip netns add fa; ip netns add fb
for i in 1 2; do
  ip link add fa$i type veth peer name fb$i
  ip link set fa$i netns fa; ip link set fb$i netns fb
  ip -n fa addr add 10.9$i.$i.1/24 dev fa$i; ip -n fb addr add 10.9$i.$i.2/24 dev fb$i
  ip -n fa link set fa$i up; ip -n fb link set fb$i up
  tc -n fa qdisc add dev fa$i root tbf rate 100mbit burst 64k latency 20ms
  tc -n fb qdisc add dev fb$i root tbf rate 100mbit burst 64k latency 20ms
done
ip -n fa link set lo up; ip -n fb link set lo up
CK=$($BIN genkey); CP=$(echo "$CK" | $BIN pubkey); SK=$($BIN genkey); SP=$(echo "$SK" | $BIN pubkey)
cat > $D/s.toml <<E2
role = "server"
private_key = "$SK"
peer_public_key = "$CP"
listen = "0.0.0.0:7000"
[interface]
name = "braid0"
address = ["10.77.0.1/30"]
[control]
socket = "$D/s.sock"
E2
cat > $D/c.toml <<E2
role = "client"
private_key = "$CK"
peer_public_key = "$SP"
[interface]
name = "braid0"
address = ["10.77.0.2/30"]
[control]
socket = "$D/c.sock"
[[path]]
name = "one"
local = "10.91.1.1"
remote = "10.91.1.2:7000"
rate_mbit = 100
[[path]]
name = "two"
local = "10.92.2.1"
remote = "10.92.2.2:7000"
rate_mbit = 100
E2
ip netns exec fb $BIN up -c $D/s.toml > $D/s.log 2>&1 &
sleep 0.3
ip netns exec fa $BIN up -c $D/c.toml > $D/c.log 2>&1 &
sleep 2
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
