# The two-path bed of contrib/bench's scripts, sourced by them: namespaces fa (client) and fb
# (server) joined by veth pairs 10.91.1.0/24 and 10.92.2.0/24, shaped at 100 Mbit/s with tbf
# each way, and `braid up` at both ends (SRR, rates given, tunnel 10.77.0.2 -> 10.77.0.1).
#
#   bed_up BRAID DIR    # sets SP (the server's public key); configs and logs in DIR
#   bed_down DIR        # stops the daemons and removes the namespaces and DIR
bed_up() {
  local bin=$1 d=$2 i
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
  bed_configs "$bin" "$d" '[[path]]\nname = "one"\nlocal = "10.91.1.1"\nremote = "10.91.1.2:7000"\nrate_mbit = 100\n[[path]]\nname = "two"\nlocal = "10.92.2.1"\nremote = "10.92.2.2:7000"\nrate_mbit = 100\n'
  ip netns exec fb "$bin" up -c "$d/s.toml" > "$d/s.log" 2>&1 &
  sleep 0.3
  ip netns exec fa "$bin" up -c "$d/c.toml" > "$d/c.log" 2>&1 &
  sleep 2
}

# bed_configs BRAID DIR PATHS [BOND]: a fresh key pair each, the server's config in DIR/s.toml
# (tunnel 10.77.0.1, control socket DIR/s.sock) and the client's in DIR/c.toml (10.77.0.2,
# DIR/c.sock) with the [[path]] tables PATHS and the [bond] lines BOND (printf escapes); sets SP
# (the server's public key).
bed_configs() {
  local bin=$1 d=$2 ck cp sk
  ck=$($bin genkey); cp=$(echo "$ck" | $bin pubkey); sk=$($bin genkey); SP=$(echo "$sk" | $bin pubkey)
  printf 'role = "server"\nprivate_key = "%s"\npeer_public_key = "%s"\nlisten = "0.0.0.0:7000"\n[interface]\nname = "braid0"\naddress = ["10.77.0.1/30"]\n[control]\nsocket = "%s/s.sock"\n' \
    "$sk" "$cp" "$d" > "$d/s.toml"
  printf "role = \"client\"\nprivate_key = \"%s\"\npeer_public_key = \"%s\"\nstate_dir = \"%s\"\n[interface]\nname = \"braid0\"\naddress = [\"10.77.0.2/30\"]\n[control]\nsocket = \"%s/c.sock\"\n${4:+[bond]\\n$4}$3" \
    "$ck" "$SP" "$d" "$d" > "$d/c.toml"
  # They hold private keys: braid warns of a key file others may read.
  chmod 600 "$d/s.toml" "$d/c.toml"
}

bed_down() {
  pkill -f "up -c $1/" 2>/dev/null; sleep 0.5
  ip netns del fa 2>/dev/null; ip netns del fb 2>/dev/null; rm -rf "$1"
}
