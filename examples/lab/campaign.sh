#!/usr/bin/env bash
# The lab campaign behind docs/benchmarks.md's current figures: every tunnel scenario with
# braid (TCP through the tunnel), pTCP, MPTCP and the sum of single-path TCP flows, with the
# namespaces' default congestion control (BBR) and with CUBIC; the BAG scenario; PET and
# adaptive SRR with CUBIC under loss. About 20 minutes. Run as root on a quiet machine from the
# repository root after `cargo build --release`:
#   sudo examples/lab/campaign.sh out/campaign [PART...]
# PARTs (default all but the accelerated ones): bbr cubic bag measured; accel and accel-cubic
# run braid plain and with `[tcp] accelerate` (TCP over pTCP inside the session, the
# braid_accel variant) beside MPTCP on every scenario (BBR, or CUBIC for all of them and the
# micro-flows). One JSON per run in the output directory; a line
# per run on stdout (goodput Mbit/s, in brackets over the sum, and the longest stall in ms).
set -euo pipefail
B=${BRAID:-./target/release/braid}
O=${1:-out/campaign}
shift || true
PARTS=${*:-bbr cubic bag measured}
mkdir -p "$O"
run() { # name scenario args...
  local name=$1 scen=$2
  shift 2
  echo "== $name (load $(cut -d' ' -f1-3 /proc/loadavg))"
  "$B" lab run "examples/lab/$scen.toml" "$@" --json "$O/$name.json" --quiet >/dev/null
  python3 - "$O/$name.json" <<'P'
import json, sys
d = json.load(open(sys.argv[1]))
v = d['variants']
s = v.get('sum', {}).get('goodput_mbit')
print('  ', ' '.join(f"{k}={x['goodput_mbit']:.2f}" + (f"({x['goodput_mbit'] / s:.3f})" if s else '')
                    + f" stall={x.get('max_stall_ms', 0):.0f}" for k, x in v.items()))
P
}
for part in $PARTS; do
  case $part in
    bbr | cubic)
      cc=()
      [ "$part" = cubic ] && cc=(--congestion-control cubic)
      for s in two-path three-path three-path-lossy outage; do
        run "$s-$part" "$s" --variants braid,ptcp,mptcp,sum ${cc[@]+"${cc[@]}"}
      done ;;
    bag) run bag-bbr bag --variants braid,ptcp,mptcp,sum ;;
    accel | accel-cubic)
      cc=()
      [ "$part" = accel-cubic ] && cc=(--congestion-control cubic)
      for s in two-path three-path three-path-lossy outage bag; do
        run "$s-$part" "$s" --variants braid,braid_accel,mptcp,sum ${cc[@]+"${cc[@]}"}
      done ;;
    measured)
      run lossy-cubic-pet three-path-lossy --variants braid --congestion-control cubic --scheduler pet
      run lossy-cubic-adaptive three-path-lossy --variants braid --congestion-control cubic --bond adaptive=true ;;
    *) echo "unknown part $part (bbr, cubic, bag, measured, accel, accel-cubic)" >&2; exit 2 ;;
  esac
done
