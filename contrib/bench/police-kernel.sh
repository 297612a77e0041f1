#!/bin/bash
# One TCP upload through braid (PET) over four real kernel links that police instead of
# queueing: the kernel's tbf, 8/4/2/1 Mbit/s, 16 KiB buckets and `limit 3000` (about two
# packets may wait; this kernel has no `police` action, so a tiny tbf queue stands in for one).
#
# Where the policers sit (POLICE_AT):
# - `router` (the default): in a third namespace between client and server, each way, as an
#   ISP's policer sits a hop away. The endpoints' links take no GSO (`gso_max_segs 1`), so
#   braid's batches of datagrams reach the policers one by one, as they would off a wire.
# - `endpoint`: tbf on the endpoints' own links. The kernel hands tbf each GSO batch whole,
#   and tbf splits it into its two-packet queue at once, so any batch of more than two
#   datagrams loses the rest, tokens or not: a link with a two-packet buffer behind a fast
#   one, harsher than any policer (one TCP flow alone on the 8 Mbit/s link: 1.46 Mbit/s with
#   CUBIC, 0.08 with BBR).
#
#   sudo [POLICE_AT=router|endpoint] [POLICE_VARIANT=braid|mptcp|single] \
#     contrib/bench/police-kernel.sh BRAID CC [SECS] [KEEP_DIR]
#
# POLICE_VARIANT (with `router` only, but `braid`): `braid` (the default) bonds the four
# links; `mptcp` is one kernel MPTCP connection with a subflow on each link; `single` is one
# TCP connection on the 8 Mbit/s link alone.
#
# BRAID: the braid binary. CC: the sender's congestion control (cubic, bbr, reno). SECS: the
# upload's length (20). KEEP_DIR: keep configs, logs and a status poll every 0.5 s there
# (status.jsonl and server-status.jsonl, one `braid status --json` of the client and of the
# server a line, with `t` added), the sender's `ss -ti` (ss.txt) and the links' qdisc counters
# (qdisc.txt), each every 0.5 s or so. Prints one line: CC, goodput in Mbit/s (bytes the
# sink read over SECS), the sender's TCP retransmissions, and the client's PET estimates at
# the end. Needs root, python3, tc (tbf). docs/benchmarks.md, "Policers on real kernel
# links", has the figures.
set -u
BIN=$(readlink -f "$1"); CC=$2; SECS=${3:-20}; KEEP=${4:-}; AT=${POLICE_AT:-router}
VARIANT=${POLICE_VARIANT:-braid}
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/bed.sh"
D=${KEEP:-$(mktemp -d /tmp/braid-police.XXXXXX)}
mkdir -p "$D"
RATES=(8 4 2 1)
cleanup() {
  pkill -f "police_tcp.py" 2>/dev/null
  pkill -f "up -c $D/" 2>/dev/null; sleep 0.5
  ip netns del pa 2>/dev/null; ip netns del pb 2>/dev/null; ip netns del pr 2>/dev/null
  [ -z "$KEEP" ] && rm -rf "$D"
}
trap cleanup EXIT
ip netns del pa 2>/dev/null; ip netns del pb 2>/dev/null; ip netns del pr 2>/dev/null
ip netns add pa; ip netns add pb
ip -n pa link set lo up; ip -n pb link set lo up
if [ "$AT" = router ]; then
  ip netns add pr; ip -n pr link set lo up
  ip netns exec pr sysctl -qw net.ipv4.ip_forward=1
fi
police() { tc -n "$1" qdisc replace dev "$2" root tbf rate "$3"mbit burst 16kb limit 3000; }
PATHS=""
for i in 1 2 3 4; do
  r=${RATES[$((i-1))]}
  if [ "$AT" = router ]; then
    # The endpoints' links take no GSO, so braid's batches leave them as single datagrams,
    # and meet the policer one by one, as at a policer a hop away.
    ip link add pa$i type veth peer name ra$i; ip link add rb$i type veth peer name pb$i
    ip link set pa$i netns pa; ip link set ra$i netns pr; ip link set rb$i netns pr; ip link set pb$i netns pb
    ip -n pa link set pa$i gso_max_segs 1; ip -n pb link set pb$i gso_max_segs 1
    ip -n pa addr add 10.93.$i.1/24 dev pa$i; ip -n pr addr add 10.93.$i.254/24 dev ra$i
    ip -n pr addr add 10.94.$i.254/24 dev rb$i; ip -n pb addr add 10.94.$i.2/24 dev pb$i
    for l in "pa pa$i" "pr ra$i" "pr rb$i" "pb pb$i"; do set -- $l; ip -n $1 link set $2 up; done
    ip -n pa route add 10.94.$i.0/24 via 10.93.$i.254 dev pa$i
    ip -n pa rule add from 10.93.$i.1 table $((100 + i))
    ip -n pa route add 10.94.0.0/16 via 10.93.$i.254 dev pa$i table $((100 + i))
    ip -n pb route add 10.93.$i.0/24 via 10.94.$i.254 dev pb$i
    police pr rb$i $r; police pr ra$i $r
    # What comes in on path i leaves on path i, whatever server address it is for (MPTCP's
    # subflows all go to path 1's).
    ip -n pr rule add from 10.93.$i.0/24 table $((100 + i))
    ip -n pr route add 10.94.0.0/16 via 10.94.$i.2 dev rb$i table $((100 + i))
    ip netns exec pb sysctl -qw net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.pb$i.rp_filter=0
    remote=10.94.$i.2
  else
    ip link add pa$i type veth peer name pb$i
    ip link set pa$i netns pa; ip link set pb$i netns pb
    ip -n pa addr add 10.93.$i.1/24 dev pa$i; ip -n pb addr add 10.93.$i.2/24 dev pb$i
    ip -n pa link set pa$i up; ip -n pb link set pb$i up
    police pa pa$i $r; police pb pb$i $r
    remote=10.93.$i.2
  fi
  PATHS="$PATHS[[path]]\nname = \"p$i\"\nlocal = \"10.93.$i.1\"\nremote = \"$remote:7000\"\n"
done
if [ "$VARIANT" = braid ]; then
  bed_configs "$BIN" "$D" "$PATHS" 'scheduler = "pet"\n'
  ip netns exec pb "$BIN" up -c "$D/s.toml" > "$D/s.log" 2>&1 &
  sleep 0.3
  ip netns exec pa "$BIN" up -c "$D/c.toml" > "$D/c.log" 2>&1 &
  sleep 3
  DST=10.77.0.1; SRC=""; PROTO=tcp
else
  [ "$AT" = router ] || { echo "POLICE_VARIANT=$VARIANT needs POLICE_AT=router" >&2; exit 2; }
  DST=10.94.1.2; SRC=10.93.1.1; PROTO=tcp
  if [ "$VARIANT" = mptcp ]; then
    PROTO=mptcp
    for n in pa pb; do ip -n $n mptcp endpoint flush; ip -n $n mptcp limits set subflows 4 add_addr_accepted 4; done
    for i in 2 3 4; do ip -n pa mptcp endpoint add 10.93.$i.1 dev pa$i subflow; done
  fi
fi
ip netns exec pb python3 "$HERE/police_tcp.py" sink $DST 5001 "$SECS" $PROTO > "$D/sink.out" &
SINK=$!
sleep 0.3
if [ -n "$KEEP" ]; then
  (
    t0=$(date +%s.%N)
    while sleep 0.5; do
      t=$(python3 -c "import time; print(round(time.time() - $t0, 2))")
      $BIN status --json -s "$D/c.sock" 2>/dev/null | python3 -c "import json,sys; v=json.load(sys.stdin); v['t']=$t; print(json.dumps(v))" >> "$D/status.jsonl" 2>/dev/null
      $BIN status --json -s "$D/s.sock" 2>/dev/null | python3 -c "import json,sys; v=json.load(sys.stdin); v['t']=$t; print(json.dumps(v))" >> "$D/server-status.jsonl" 2>/dev/null
      { echo "t=$t"; ip netns exec pa ss -tin dst $DST; } >> "$D/ss.txt" 2>/dev/null
      { echo "t=$t"; for n in pa pr pb; do tc -n $n -s qdisc show 2>/dev/null; done; } >> "$D/qdisc.txt"
    done
  ) &
  POLL=$!
fi
R0=$(ip netns exec pa nstat -az TcpRetransSegs | awk '/TcpRetransSegs/ {print $2}')
ip netns exec pa python3 "$HERE/police_tcp.py" send $DST 5001 "$SECS" "$CC" $PROTO $SRC
sleep 1
[ -n "$KEEP" ] && kill $POLL 2>/dev/null
R1=$(ip netns exec pa nstat -az TcpRetransSegs | awk '/TcpRetransSegs/ {print $2}')
EST=$($BIN status --json -s "$D/c.sock" 2>/dev/null | python3 -c "
import json,sys
v=json.load(sys.stdin)
print('/'.join('%.2f' % ((p.get('pet_estimate_bps') or 0) / 1e6) for p in v['peers'][0]['session']['paths']))" 2>/dev/null)
wait $SINK
echo "variant=$VARIANT at=$AT cc=$CC goodput_mbit=$(cat "$D/sink.out") tcp_retransmits=$((R1 - R0)) pet_estimates_mbit=$EST"
