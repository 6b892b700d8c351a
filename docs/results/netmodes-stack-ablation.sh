#!/bin/bash
# Where a 64-byte datagram's cost goes on veth (issue 12's ">= 3x" question), with
# peregrine's own `io send|recv` in mode host (two namespaces on one veth, built with
# `ip`, default offloads): each sender path into a PACKET_MMAP (TPACKET_V3) receiver,
# first with the receiving stack left as it is (the datagram goes on to UDP, finds no
# socket, the kernel tries an ICMP port unreachable), then with an nftables netdev
# ingress rule that drops the datagrams right after the packet tap (the tap still sees
# them: only the stack's work is taken away). Then socket to socket.
# Sender on CPU 0, receiver on CPU 1; 1M datagrams unpaced per row.
# Run as root from the repository: bash docs/results/netmodes-stack-ablation.sh
# (output: docs/results/netmodes-stack-ablation.txt). PERF=mmap|udp records the
# sending CPU with perf instead (the report in the .txt was made that way).
set -u
P=${P:-./target/release/peregrine}
N=${N:-1000000}
A=pgx-a B=pgx-b
cleanup() { ip netns del $A 2>/dev/null; ip netns del $B 2>/dev/null; }
trap cleanup EXIT
cleanup
ip netns add $A && ip netns add $B
ip link add va netns $A type veth peer name vb netns $B
ip -n $A addr add 198.18.0.1/24 dev va && ip -n $B addr add 198.18.0.2/24 dev vb
for n in $A $B; do ip -n $n link set lo up; done
ip -n $A link set va up && ip -n $B link set vb up
ip netns exec $A ping -c1 -W1 198.18.0.2 >/dev/null
out=$(mktemp -d)
row() { # sender-path receiver-path stack|drop
  if [ "$3" = drop ]; then
    ip netns exec $B nft -f - <<NFT
table netdev pgx { chain in { type filter hook ingress device vb priority 0; udp dport 9 drop; }; }
NFT
  fi
  ip netns exec $B taskset -c 1 $P io recv --path "$2" --iface vb --listen 198.18.0.2:9 \
    --count "$N" --duration 20s --json >"$out/r.json" &
  local rp=$!
  sleep 0.5
  ip netns exec $A taskset -c 0 $P io send --path "$1" --to 198.18.0.2:9 --payload 64 \
    --count "$N" --json >"$out/s.json"
  wait $rp
  python3 - "$@" "$out" <<'PY'
import json, sys
a = sys.argv[1:4]; d = sys.argv[4]
s = json.load(open(d + '/s.json')); r = json.load(open(d + '/r.json'))
print('%-6s -> %-5s %-6s sent %7d pps  received %7d of %d (%7d pps)  sender CPU %5d ns/datagram' % (
    a[0], a[1], a[2], s['sent'] / s['elapsed_s'], r['packets'], s['sent'],
    r['packets'] / max(r['span_s'], 1e-9), s['cpu_s'] * 1e9 / max(s['sent'], 1)))
PY
  ip netns exec $B nft delete table netdev pgx 2>/dev/null || true
}
if [ -n "${PERF:-}" ]; then
  ip netns exec $B taskset -c 1 $P io recv --path mmap --iface vb --listen 198.18.0.2:9 \
    --count "$N" --duration 20s --json >/dev/null &
  sleep 0.5
  perf record -o "perf-$PERF.data" -C 0 -g -- ip netns exec $A taskset -c 0 $P io send \
    --path "$PERF" --to 198.18.0.2:9 --payload 64 --count "$N" >/dev/null
  wait
  exit
fi
for sp in udp mmsg mmap afxdp; do row $sp mmap stack; done
for sp in udp mmsg mmap afxdp; do row $sp mmap drop; done
row udp udp stack
row mmsg mmsg stack
row afxdp afxdp stack
