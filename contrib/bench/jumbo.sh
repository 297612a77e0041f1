#!/usr/bin/env bash
# One TCP flow through `braid up` over one unshaped veth path of MTU MTU (1500, or 9000 for
# jumbo frames): the goodput, and the CPU both daemons used. benchmarks.md, "Jumbo frames".
#
#   sudo contrib/bench/jumbo.sh target/release/braid 9000 [SECS]
set -euo pipefail
BIN=$(realpath "$1"); MTU=$2; SECS=${3:-10}
HERE=$(dirname "$(realpath "$0")")
D=$(mktemp -d /tmp/braid-jumbo.XXXX)
cleanup() {
  pkill -f "up -c $D/" 2>/dev/null || true; pkill -f "bulk_tcp.py sink" 2>/dev/null || true
  sleep 0.5; ip netns del ja 2>/dev/null || true; ip netns del jb 2>/dev/null || true; rm -rf "$D"
}
trap cleanup EXIT
ip netns del ja 2>/dev/null || true; ip netns del jb 2>/dev/null || true
ip netns add ja; ip netns add jb
ip link add ja1 type veth peer name jb1
ip link set ja1 netns ja; ip link set jb1 netns jb
ip -n ja addr add 10.93.1.1/24 dev ja1; ip -n jb addr add 10.93.1.2/24 dev jb1
ip -n ja link set ja1 mtu "$MTU" up; ip -n jb link set jb1 mtu "$MTU" up
ip -n ja link set lo up; ip -n jb link set lo up
ck=$($BIN genkey); cp=$(echo "$ck" | $BIN pubkey); sk=$($BIN genkey); sp=$(echo "$sk" | $BIN pubkey)
printf 'role = "server"\nprivate_key = "%s"\npeer_public_key = "%s"\nlisten = "0.0.0.0:7000"\n[interface]\nname = "braid0"\naddress = ["10.77.0.1/30"]\n[control]\nsocket = "%s/s.sock"\n' \
  "$sk" "$cp" "$D" > "$D/s.toml"
printf 'role = "client"\nprivate_key = "%s"\npeer_public_key = "%s"\nstate_dir = "%s"\n[interface]\nname = "braid0"\naddress = ["10.77.0.2/30"]\n[control]\nsocket = "%s/c.sock"\n[[path]]\nname = "one"\nlocal = "10.93.1.1"\nremote = "10.93.1.2:7000"\nrate_mbit = 1000\nmtu = %s\n' \
  "$ck" "$sp" "$D" "$D" "$MTU" > "$D/c.toml"
ip netns exec jb "$BIN" up -c "$D/s.toml" > "$D/s.log" 2>&1 &
sleep 0.3
ip netns exec ja "$BIN" up -c "$D/c.toml" > "$D/c.log" 2>&1 &
sleep 2
ip netns exec jb python3 "$HERE/bulk_tcp.py" sink 10.77.0.1 5001 &
sleep 0.3
cpu() { "$BIN" status --json -s "$D/$1.sock" | python3 -c 'import json,sys; v=json.load(sys.stdin); print(v["cpu_user_s"]+v["cpu_system_s"], v["mtu"])'; }
read -r c0 cm < <(cpu c); read -r s0 sm < <(cpu s)
G=$(ip netns exec ja python3 "$HERE/bulk_tcp.py" send 10.77.0.1 5001 "$SECS")
read -r c1 _ < <(cpu c); read -r s1 _ < <(cpu s)
python3 -c "print(f'path mtu $MTU, TUN mtu client $cm server $sm: $G Mbit/s; CPU s per s: client {($c1-$c0)/$SECS:.2f}, server {($s1-$s0)/$SECS:.2f}')"
