#!/bin/bash
# The smallest live-frame sender there is, as a yardstick for `peregrine bench gen`:
# one BPF_PROG_RUN (BPF_F_TEST_XDP_LIVE_FRAMES) thread whose program only
# redirects a fixed 60-byte frame to the veth, and a one-line XDP_DROP program
# on the peer; delivery is read from veth's own xdp_drops counter.
# Usage (root, after scripts/setup.sh): bash docs/results/prototype/run.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
P=${P:-$here/../../../target/release/peregrine}
tmp=$(mktemp -d)
trap '"$P" lab down proto >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
sed 's/name = "pair"/name = "proto"/' "$here/../../../crates/lab/topologies/pair.toml" > "$tmp/proto.toml"
"$P" lab up "$tmp/proto.toml" >/dev/null
idx=$(ip netns exec pg-proto-a cat /sys/class/net/eth0/ifindex)
cat > "$tmp/redir.bpf.c" <<C
#include <linux/bpf.h>
static long (*bpf_redirect)(__u32 ifindex, __u64 flags) = (void *) 23;
__attribute__((section("xdp"), used)) int redir(struct xdp_md *ctx) { return bpf_redirect($idx, 0); }
char LICENSE[] __attribute__((section("license"), used)) = "GPL";
C
cat > "$tmp/drop.bpf.c" <<'C'
#include <linux/bpf.h>
__attribute__((section("xdp"), used)) int drop(struct xdp_md *ctx) { return XDP_DROP; }
char LICENSE[] __attribute__((section("license"), used)) = "GPL";
C
inc="-I/usr/include/$(uname -m)-linux-gnu"
clang -O2 -target bpf $inc -c "$tmp/redir.bpf.c" -o "$tmp/redir.bpf.o"
clang -O2 -target bpf $inc -c "$tmp/drop.bpf.c" -o "$tmp/drop.bpf.o"
gcc -O2 "$here/live.c" -o "$tmp/live" -lbpf
ip -n pg-proto-b link set dev eth0 xdpdrv obj "$tmp/drop.bpf.o" sec xdp
drops() { ip netns exec pg-proto-b ethtool -S eth0 | awk '/rx_queue_0_xdp_drops/ {print $2}'; }
for batch in 64 128 256; do
    before=$(drops)
    ip netns exec pg-proto-a taskset -c 0 "$tmp/live" "$batch" "$tmp/redir.bpf.o"
    echo "delivered (peer's xdp_drops): $(( $(drops) - before ))"
done
