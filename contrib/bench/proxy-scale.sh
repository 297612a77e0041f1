#!/bin/bash
# What a proxy's client count costs: one client's bulk TCP through a server that lists N clients.
#
#   sudo contrib/bench/proxy-scale.sh BRAID N [SECS] [CONNECTED]
#
# Namespaces fa (the client) and fb (the server) joined by two unshaped veth pairs, so the
# daemons' CPU is what limits the flow. The server's config lists N [[client]]s: N-1 others
# (addresses 10.77.1.1 on), then the real one (10.77.0.2), last, where a search through the
# clients in order finds it last. CONNECTED (default 0) of the others connect and stay idle:
# a `braid up` each in namespace fc, over one more veth pair; the rest never connect (random
# keys). With CONNECTED, the idle measurement starts 10 s after they are all up, so that their
# sessions have gone idle. Measures the server daemon's CPU seconds
# per second (from its `braid status`) over SECS (default 10) with no traffic, then runs SECS of
# bulk TCP up (client to server) and SECS down, and prints one line each: goodput in Mbit/s and
# the server's CPU seconds per second over the flow.
# Needs root, python3. docs/benchmarks.md, "A proxy with many clients", has the figures.
set -u
BIN=$(readlink -f "$1"); N=$2; SECS=${3:-10}; CONNECTED=${4:-0}
HERE=$(cd "$(dirname "$0")" && pwd)
D=$(mktemp -d /tmp/braid-scale.XXXXXX)
cleanup() {
  pkill -f "bulk_tcp.py sink" 2>/dev/null
  pkill -f "up -c $D/" 2>/dev/null; sleep 0.5
  ip netns del fa 2>/dev/null; ip netns del fb 2>/dev/null; ip netns del fc 2>/dev/null; rm -rf "$D"
}
trap cleanup EXIT
ip netns del fa 2>/dev/null; ip netns del fb 2>/dev/null; ip netns del fc 2>/dev/null
ip netns add fa; ip netns add fb; ip netns add fc
ip -n fa link set lo up; ip -n fb link set lo up; ip -n fc link set lo up
ip link add fc3 type veth peer name fb3
ip link set fc3 netns fc; ip link set fb3 netns fb
ip -n fc addr add 10.93.3.1/24 dev fc3; ip -n fb addr add 10.93.3.2/24 dev fb3
ip -n fc link set fc3 up; ip -n fb link set fb3 up
PATHS=""
for i in 1 2; do
  ip link add fa$i type veth peer name fb$i
  ip link set fa$i netns fa; ip link set fb$i netns fb
  ip -n fa addr add 10.9$i.$i.1/24 dev fa$i; ip -n fb addr add 10.9$i.$i.2/24 dev fb$i
  ip -n fa link set fa$i up; ip -n fb link set fb$i up
  PATHS="$PATHS[[path]]\nlocal = \"10.9$i.$i.1\"\nremote = \"10.9$i.$i.2:7000\"\nrate_mbit = 1000\n"
done
ck=$($BIN genkey); cp=$(echo "$ck" | $BIN pubkey); sk=$($BIN genkey); sp=$(echo "$sk" | $BIN pubkey)
{
  printf 'role = "server"\nprivate_key = "%s"\nlisten = "0.0.0.0:7000"\n' "$sk"
  printf '[interface]\nname = "braid0"\naddress = ["10.77.0.1/16"]\n[control]\nsocket = "%s/s.sock"\n' "$D"
  for i in $(seq 0 $((CONNECTED - 1))); do
    k=$($BIN genkey); echo "$k" > "$D/k$i"
    printf '[[client]]\nname = "idle%s"\npublic_key = "%s"\naddress = ["10.77.%s.%s"]\n' \
      "$i" "$(echo "$k" | $BIN pubkey)" $((1 + i / 250)) $((1 + i % 250))
  done
  python3 - "$N" "$CONNECTED" <<'EOF'
import base64, os, sys
for i in range(int(sys.argv[2]), int(sys.argv[1]) - 1):
    key = base64.b64encode(os.urandom(32)).decode()
    print(f'[[client]]\nname = "idle{i}"\npublic_key = "{key}"\naddress = ["10.77.{1 + i // 250}.{1 + i % 250}"]')
EOF
  printf '[[client]]\nname = "real"\npublic_key = "%s"\naddress = ["10.77.0.2"]\n' "$cp"
} > "$D/s.toml"
printf "role = \"client\"\nprivate_key = \"%s\"\npeer_public_key = \"%s\"\nstate_dir = \"%s\"\n[interface]\nname = \"braid0\"\n[control]\nsocket = \"%s/c.sock\"\n$PATHS" \
  "$ck" "$sp" "$D" "$D" > "$D/c.toml"
chmod 600 "$D/s.toml" "$D/c.toml"
ip netns exec fb "$BIN" up -c "$D/s.toml" > "$D/s.log" 2>&1 &
sleep 0.5
ip netns exec fa "$BIN" up -c "$D/c.toml" > "$D/c.log" 2>&1 &
for _ in $(seq 50); do
  ip -n fa addr show braid0 2>/dev/null | grep -q 10.77.0.2 && break
  sleep 0.2
done
for i in $(seq 0 $((CONNECTED - 1))); do
  printf 'role = "client"\nprivate_key = "%s"\npeer_public_key = "%s"\nstate_dir = "%s/st%s"\n[interface]\nname = "bi%s"\n[control]\nsocket = "%s/c%s.sock"\n[[path]]\nlocal = "10.93.3.1"\nremote = "10.93.3.2:7000"\nrate_mbit = 1000\n' \
    "$(cat "$D/k$i")" "$sp" "$D" "$i" "$i" "$D" "$i" > "$D/c$i.toml"
  chmod 600 "$D/c$i.toml"; mkdir -p "$D/st$i"
  ip netns exec fc "$BIN" up -c "$D/c$i.toml" > "$D/c$i.log" 2>&1 &
done
sleep 1
if [ "$CONNECTED" -gt 0 ]; then
  up=$($BIN status --json -s "$D/s.sock" | python3 -c "import json,sys; v=json.load(sys.stdin); print(sum(1 for p in v['peers'] if p['session']['established']))")
  echo "clients connected: $up (of $CONNECTED idle and the real one)"
  sleep 10
fi
cpu() { $BIN status --json -s "$D/s.sock" | python3 -c "import json,sys; v=json.load(sys.stdin); print(v['cpu_user_s']+v['cpu_system_s'])" 2>/dev/null || echo 0; }
run() { # NAME SINK_NS SINK_ADDR SEND_NS
  ip netns exec "$2" python3 "$HERE/bulk_tcp.py" sink "$3" 5001 &
  sleep 0.3
  local c0 c1 g
  c0=$(cpu)
  g=$(ip netns exec "$4" python3 "$HERE/bulk_tcp.py" send "$3" 5001 "$SECS")
  c1=$(cpu)
  echo "clients=$N connected=$CONNECTED $1 goodput_mbit=$g server_cpu_s_per_s=$(python3 -c "print(round(($c1-$c0)/$SECS,3))")"
  sleep 0.5
}
c0=$(cpu); sleep "$SECS"; c1=$(cpu)
echo "clients=$N connected=$CONNECTED idle server_cpu_s_per_s=$(python3 -c "print(round(($c1-$c0)/$SECS,3))")"
run up fb 10.77.0.1 fa
run down fa 10.77.0.2 fb
