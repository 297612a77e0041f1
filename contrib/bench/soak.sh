#!/bin/bash
# A long run of the daemons under what a home router's bond carries, watching for growth.
#
#   sudo contrib/bench/soak.sh BRAID MINUTES [RATE] [KEEP_DIR]
#
# Two namespaces (sa: client, sb: server) joined by two veth pairs shaped at 20 Mbit/s with
# tbf, `braid up` at both ends with PET (no rates typed; header compression on, the default).
# Through the tunnel, soak_traffic.py opens RATE (default 40) new TCP connections a second, each
# from a new port (one in eight reset instead of closed), RATE UDP queries a second, each from a
# new socket, and 5 s of bulk TCP every 10 s. So a 60-minute run carries over 140,000 TCP and
# as many UDP flows, each of which the bond sees once.
#
# Meanwhile the paths come and go:
# - every 120 s (from 60 s): `braid path down two` for 10 s, then `up`;
# - every 180 s (from 120 s): path one's link is taken down (`ip link set .. down`) for 5 s;
# - at half time the client daemon is stopped (SIGTERM) and started again (SOAK_RESTARTS=N:
#   N times, evenly spaced, instead of once).
#
# Every 10 s it samples each daemon's resident memory (VmRSS), its open file descriptors and
# threads, and writes them with the status's session counters to soak.csv. It prints the
# traffic's 10 s lines, then a summary: the server's memory at 5 minutes, at half time and at
# the end; the client's at 5 minutes and before its (first) restart; failed TCP exchanges and lost UDP
# queries; and whether both daemons answered `braid status` at the end. With KEEP_DIR, each
# sample also appends both daemons' `braid status --json` (with `t`) to c-status.jsonl and
# s-status.jsonl there, and the configs and logs stay, with c-fail.log and s-fail.log (each
# failed exchange as the traffic's client and server saw it, `ss -tino` of a connection that
# hung; soak_traffic.py) and events.log (each path event and restart, in Unix seconds, to set
# beside them and the daemons' logs, c.log and s.log, whose lines carry it too).
# With SOAK_ACCEL=1 both ends set `[tcp] accelerate = true`, so the TCP rides pTCP connections
# (and the status samples carry their committed bytes, `ptcp_unacked_bytes`/`ptcp_window_bytes`).
# Needs root, python3, tc (tbf); nft too with SOAK_ACCEL. docs/benchmarks.md, "A soak", has the
# figures.
set -u
BIN=$(readlink -f "$1"); MIN=$2; RATE=${3:-40}; KEEP=${4:-}
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/bed.sh"
D=${KEEP:-$(mktemp -d /tmp/braid-soak.XXXXXX)}
mkdir -p "$D"
SECS=$((MIN * 60))
cleanup() {
  pkill -f "soak_traffic.py" 2>/dev/null
  pkill -f "up -c $D/" 2>/dev/null; sleep 0.5
  ip netns del sa 2>/dev/null; ip netns del sb 2>/dev/null
  [ -z "$KEEP" ] && rm -rf "$D"
}
trap cleanup EXIT
ip netns del sa 2>/dev/null; ip netns del sb 2>/dev/null
ip netns add sa; ip netns add sb
ip -n sa link set lo up; ip -n sb link set lo up
PATHS=""
for i in 1 2; do
  ip link add sa$i type veth peer name sb$i
  ip link set sa$i netns sa; ip link set sb$i netns sb
  ip -n sa addr add 10.95.$i.1/24 dev sa$i; ip -n sb addr add 10.95.$i.2/24 dev sb$i
  ip -n sa link set sa$i up; ip -n sb link set sb$i up
  tc -n sa qdisc add dev sa$i root tbf rate 20mbit burst 32k latency 50ms
  tc -n sb qdisc add dev sb$i root tbf rate 20mbit burst 32k latency 50ms
  name=$([ $i = 1 ] && echo one || echo two)
  PATHS="$PATHS[[path]]\nname = \"$name\"\nlocal = \"10.95.$i.1\"\nremote = \"10.95.$i.2:7000\"\n"
done
bed_configs "$BIN" "$D" "$PATHS" 'scheduler = "pet"\n'
if [ -n "${SOAK_ACCEL:-}" ]; then
  printf '[tcp]\naccelerate = true\n' >> "$D/c.toml"
  printf '[tcp]\naccelerate = true\n' >> "$D/s.toml"
fi
# Each line the daemons log, after the Unix time it came (their own lines carry none).
stamp() { while IFS= read -r l; do echo "t=$(date +%s.%N | cut -c1-14) $l"; done; }
start_client() { ip netns exec sa "$BIN" up -c "$D/c.toml" 2>&1 | stamp >> "$D/c.log" & }
ip netns exec sb "$BIN" up -c "$D/s.toml" 2>&1 | stamp > "$D/s.log" &
sleep 0.3
start_client
sleep 3
SPID=$(pgrep -f "up -c $D/s.toml"); CPID=$(pgrep -f "up -c $D/c.toml")
FAILS=(); SFAIL=()
[ -n "$KEEP" ] && FAILS=("$D/c-fail.log") && SFAIL=("$D/s-fail.log")
event() { [ -n "$KEEP" ] && echo "t=$(date +%s.%N | cut -c1-14) $*" >> "$D/events.log"; }
ip netns exec sb python3 "$HERE/soak_traffic.py" serve 10.77.0.1 ${SFAIL[@]+"${SFAIL[@]}"} > /dev/null 2>&1 &
sleep 0.5
ip netns exec sa python3 "$HERE/soak_traffic.py" churn 10.77.0.1 "$SECS" "$RATE" ${FAILS[@]+"${FAILS[@]}"} | tee "$D/traffic.txt" &
TRAFFIC=$!

mem() { awk '/^VmRSS/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
fds() { ls "/proc/$1/fd" 2>/dev/null | wc -l; }
thr() { awk '/^Threads/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
counters() {
  "$BIN" status --json -s "$1" 2>/dev/null | python3 -c "
import json, sys
v = json.load(sys.stdin)
s = v['peers'][0]['session'] if v.get('peers') else {}
keys = ('delivered_packets', 'lost_packets', 'receiver_dropped', 'retransmitted_packets')
print(','.join(str(s.get(k, '')) for k in keys))" 2>/dev/null || echo ",,,"
}
echo "t_s,server_rss_kb,server_fds,server_threads,client_rss_kb,client_fds,client_threads,server_delivered,server_lost,server_receiver_dropped,server_resent,client_delivered,client_lost,client_receiver_dropped,client_resent" > "$D/soak.csv"
T0=$(date +%s)
RESTARTS=${SOAK_RESTARTS:-1}
RESTARTED=0; S5=""; SHALF=""; C5=""; CPRE=""
while kill -0 $TRAFFIC 2>/dev/null; do
  sleep 10
  t=$(( $(date +%s) - T0 ))
  echo "$t,$(mem $SPID),$(fds $SPID),$(thr $SPID),$(mem $CPID),$(fds $CPID),$(thr $CPID),$(counters "$D/s.sock"),$(counters "$D/c.sock")" >> "$D/soak.csv"
  if [ -n "$KEEP" ]; then
    for e in c s; do
      "$BIN" status --json -s "$D/$e.sock" 2>/dev/null | python3 -c "import json,sys; v=json.load(sys.stdin); v['t']=$t; print(json.dumps(v))" >> "$D/$e-status.jsonl" 2>/dev/null
    done
  fi
  [ -z "$S5" ] && [ $t -ge 300 ] && S5=$(mem $SPID) && C5=$(mem $CPID)
  if [ $t -ge 60 ] && [ $(( (t - 60) % 120 )) -lt 10 ]; then
    "$BIN" path down two -s "$D/c.sock" > /dev/null; event "path two down"
    ( sleep 10; "$BIN" path up two -s "$D/c.sock" > /dev/null; event "path two up" ) &
  fi
  if [ $t -ge 120 ] && [ $(( (t - 120) % 180 )) -lt 10 ]; then
    ip -n sa link set sa1 down; event "link one down"
    ( sleep 5; ip -n sa link set sa1 up; event "link one up" ) &
  fi
  if [ $RESTARTED -lt $RESTARTS ] && [ $t -ge $((SECS * (RESTARTED + 1) / (RESTARTS + 1))) ]; then
    [ $RESTARTED = 0 ] && SHALF=$(mem $SPID) && CPRE=$(mem $CPID)
    echo "restarting the client at ${t} s"
    event "client stopped"
    kill -TERM $CPID; while kill -0 $CPID 2>/dev/null; do sleep 0.05; done
    start_client; event "client started"; sleep 0.5; CPID=$(pgrep -f "up -c $D/c.toml"); RESTARTED=$((RESTARTED + 1))
  fi
done
wait $TRAFFIC
SEND=$(mem $SPID); CEND=$(mem $CPID)
ok=yes
"$BIN" status -s "$D/s.sock" > /dev/null 2>&1 || ok="no (server)"
"$BIN" status -s "$D/c.sock" > /dev/null 2>&1 || ok="no (client)"
echo "server rss_kb: at 5 min ${S5:-?}, at the first restart ${SHALF:-?}, at the end $SEND"
echo "client rss_kb: at 5 min ${C5:-?}, before its first restart ${CPRE:-?}, at the end (restarted $RESTARTED times) $CEND"
echo "both daemons answer status at the end: $ok"
echo "samples: $D/soak.csv"
