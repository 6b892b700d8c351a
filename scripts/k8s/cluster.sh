#!/usr/bin/env bash
# A single-node Kubernetes cluster on this machine, for the full-tier test
# (crates/cli/tests/k8s.rs, issue 26): etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, containerd (Debian's, with its
# CRI) and kubelet, in the host's network namespace (that is what a node
# is), every address in 198.18.0.0/15 and nothing resolved through the
# machine's DNS resolver.
#
#   cluster.sh up DIR     record what the host has, start the cluster; DIR/kubeconfig
#   cluster.sh down DIR   stop everything and put back what the cluster changed
#
# `up` runs `down` first when DIR holds the record of an earlier run (one
# that was killed): its processes are stopped and the host restored from
# that run's record, not from the half-changed host. The binaries come from
# the project's cache (scripts/k8s/build.sh, scripts/setup.sh for etcd) and
# the images from scripts/k8s/images.sh.
#
# What it changes and `down` restores, touching only what is the cluster's
# (other containerds, tests and the machine itself change the host meanwhile):
# sysctls (kubelet: vm.overcommit_memory, vm.panic_on_oom, kernel.panic,
# kernel.panic_on_oops, kernel.keys.*; the bridge plugin: net.ipv4.ip_forward)
# back to their recorded values; iptables chains named KUBE-*/CNI-* and rules
# naming them that appeared (KUBE-FIREWALL, KUBE-KUBELET-CANARY, ...), and an
# iptables-nft table (ip/ip6 filter, mangle, nat) that did not exist only when
# nothing but empty built-in chains is left in it; our sandboxes' and
# containers' k8s.io cgroups (by id, from our containerd's root) and k8s.io
# itself when it is new and empty; mounts under DIR and containerd's state
# dir, our pods' network namespaces, /run/netns's shared mount if we made it;
# the bridge peregrine0 and its ports; the node IP on lo; /run/peregrine/agent
# (the DaemonSet's hostPath), /var/log/containers and /var/log/pods if they
# did not exist, kubelet's /var/lib/kubelet/device-plugins/kubelet.sock (a
# fixed path) and /var/lib/kubelet if it did not exist and is empty then;
# libcni's cache entries of our network (peregrine-*),
# directories that did not exist and are empty (/var/lib/cni, /run/containerd,
# /opt/containerd, /run/peregrine); the host namespace's router when it had
# none before (the agent leaves the data plane when it stops).
set -euo pipefail
cmd=${1:?usage: cluster.sh up|down DIR}
DIR=${2:?usage: cluster.sh up|down DIR}
cache=${PEREGRINE_CACHE:-/var/cache/peregrine}
root=$(cd "$(dirname "$0")/../.." && pwd)
K8S=$cache/k8s/v1.34.0/bin
ETCD=$cache/etcd/usr/bin/etcd
CNI=$cache/cni/v1.10.0/bin
CRICTL=$cache/tools/bin/crictl
PEREGRINE=${PEREGRINE_BIN:-$root/target/release/peregrine}
NODE=peregrine-node
NODE_IP=198.18.250.1
SVC_CIDR=198.18.248.0/24
SVC_IP=198.18.248.1
POD_CIDR=198.18.240.0/24
STATE=/run/pg-k8s
BRIDGE=peregrine0
SOCK=$STATE/containerd.sock
B=$DIR/before
SYSCTLS="vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.ipv4.ip_forward net.ipv6.conf.all.forwarding"

log() { echo "cluster: $*" >&2; }

# A process we started (DIR/pids: "name pid"), if it still runs it.
alive() { [ -r "/proc/$2/cmdline" ] && tr '\0' ' ' < "/proc/$2/cmdline" | grep -q -- "$1"; }

stop() { # name: SIGTERM, then SIGKILL after 10 s
    local name=$1 pid
    pid=$(awk -v n="$name" '$1 == n { print $2 }' "$DIR/pids" 2>/dev/null | tail -1)
    [ -n "$pid" ] || return 0
    local exe
    exe=$(awk -v n="$name" '$1 == n { print $3 }' "$DIR/pids" | tail -1)
    alive "$exe" "$pid" || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 100); do alive "$exe" "$pid" || return 0; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    for _ in $(seq 50); do alive "$exe" "$pid" || return 0; sleep 0.1; done
}

# Pids whose command line names $1 (our containerd's socket: its shims).
pids_naming() {
    local p
    for p in /proc/[0-9]*; do
        tr '\0' ' ' < "$p/cmdline" 2>/dev/null | grep -qF -- "$1" && echo "${p#/proc/}"
    done
    return 0
}

# Whether a router runs in this (the host's) namespace.
host_router() { "$PEREGRINE" router stats --json 2>/dev/null | grep -q '"port"'; }

# containerd's k8s.io cgroups (the pods' and their containers'): the only
# cgroups the cluster makes (kubelet runs with cgroupsPerQOS false). Never
# any other: the machine's own cgroups come and go meanwhile.
cgroup_dirs() {
    find /sys/fs/cgroup -mindepth 2 -maxdepth 4 -type d 2>/dev/null \
        | { grep -E '^/sys/fs/cgroup/[^/]+/k8s\.io(/|$)' || true; } | sort
}

down() {
    [ -d "$B" ] || { log "nothing recorded in $DIR: nothing to do"; return 0; }
    # Best effort from here on: each step runs whatever the ones before did.
    set +e +o pipefail
    log "down: stopping the cluster in $DIR"
    stop kubelet
    # Our pods' network namespaces, while containerd can still name them.
    if [ -S "$SOCK" ] && grep -q '^containerd ' "$DIR/pids" 2>/dev/null; then
        for id in $(timeout -s KILL 20 "$CRICTL" -r "unix://$SOCK" -t 10s pods -q --no-trunc 2>/dev/null); do
            timeout -s KILL 20 "$CRICTL" -r "unix://$SOCK" -t 10s inspectp "$id" 2>/dev/null \
                | grep -oE '"/(var/)?run/netns/cni-[0-9a-f-]+"' | tr -d '"' | sed 's#^/var/run#/run#'
        done | sort -u >> "$DIR/netns-ours"
        # Every sandbox stopped and removed: CNI DEL for each pod, the
        # agent's last (its DELs take the pods' router ports while it runs).
        for id in $(timeout -s KILL 20 "$CRICTL" -r "unix://$SOCK" -t 10s pods -o json 2>/dev/null \
                | python3 -c 'import json,sys; [print(p["id"]) for p in json.load(sys.stdin).get("items", []) if p["metadata"]["namespace"] != "peregrine-system"]' 2>/dev/null); do
            timeout -s KILL 30 "$CRICTL" -r "unix://$SOCK" -t 20s rmp -f "$id" >/dev/null 2>&1 || true
        done
        timeout -s KILL 60 "$CRICTL" -r "unix://$SOCK" -t 20s rmp -fa >/dev/null 2>&1 || true
    fi
    stop containerd
    for p in $(pids_naming "-address $SOCK"); do kill -KILL "$p" 2>/dev/null || true; done
    for s in kube-scheduler kube-controller-manager kube-apiserver etcd; do stop "$s"; done
    # Our sandboxes and containers (their ids: containerd's CRI directories
    # under our root) and their cgroups: what still runs there (a shim
    # killed above leaves its container running) is killed, the cgroups
    # removed. Nobody else's: other containerds use k8s.io cgroups too.
    cri=$DIR/containerd/root/io.containerd.grpc.v1.cri
    ls "$cri/sandboxes" "$cri/containers" 2>/dev/null | grep -E '^[0-9a-f]{64}$' | sort -u > "$DIR/ids"
    for _ in 1 2 3; do
        while read -r id; do
            for cg in /sys/fs/cgroup/*/k8s.io/"$id"; do
                [ -d "$cg" ] || continue
                for p in $(cat "$cg/cgroup.procs" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
            done
        done < "$DIR/ids"
        sleep 0.2
    done
    # Mounts under DIR, the containerd state, and the pods' namespaces.
    for _ in 1 2 3; do
        awk '{ print $5 }' /proc/self/mountinfo | grep -E "^($DIR|$STATE)(/|$)" | sort -r | while read -r m; do
            umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
        done
    done
    sort -u "$DIR/netns-ours" 2>/dev/null | while read -r f; do
        [ -e "$f" ] || continue
        grep -qxF "$f" "$B/netns" && continue
        umount "$f" 2>/dev/null || umount -l "$f" 2>/dev/null || true
        rm -f "$f"
    done
    if [ -e "$B/netns-mount-made" ]; then
        umount /run/netns 2>/dev/null || umount -l /run/netns 2>/dev/null || true
    fi
    # The bridge and what is still attached to it (pods' veths): ours by name.
    if [ -e "$B/complete" ] && ! grep -qxF "$BRIDGE" "$B/links"; then
        for l in $(ip -o link show master "$BRIDGE" 2>/dev/null | awk -F': ' '{ print $2 }' | sed 's/@.*//'); do
            ip link del "$l" 2>/dev/null || true
        done
        ip link del "$BRIDGE" 2>/dev/null || true
    fi
    # The router and policers the agent left (it leaves the data plane when
    # it stops), when the host had none.
    # Only this (the host's) namespace's router: others' are not ours.
    # (A router whose ports all went is detached too: stale pins.)
    if [ -x "$PEREGRINE" ] && [ -e "$B/no-router" ]; then
        "$PEREGRINE" router detach >/dev/null 2>&1 || true
    fi
    # sysctls.
    [ -e "$B/complete" ] && while read -r k v; do sysctl -qw "$k=$v" 2>/dev/null || true; done < "$B/sysctls"
    # iptables: rules and chains that appeared, and tables that did not exist
    # and hold nothing else.
    python3 - "$B" <<'PY' || true
import subprocess, sys
before = sys.argv[1]
def parse(text):
    tables, cur = {}, None
    for line in text.splitlines():
        if line.startswith('*'):
            cur = line[1:]; tables[cur] = {'chains': set(), 'rules': []}
        elif line.startswith(':') and cur:
            tables[cur]['chains'].add(line[1:].split()[0])
        elif line.startswith('-A ') and cur:
            tables[cur]['rules'].append(line[3:])
    return tables
for fam, save, cmd in (('4', 'iptables-save', 'iptables'), ('6', 'ip6tables-save', 'ip6tables')):
    try:
        old = parse(open(f'{before}/iptables{fam}').read())
    except OSError:
        continue
    new = parse(subprocess.run([save], capture_output=True, text=True).stdout)
    for t, n in new.items():
        o = old.get(t, {'chains': set(), 'rules': []})
        ours = lambda x: 'KUBE-' in x or 'CNI-' in x
        for r in reversed(n['rules']):
            if r not in o['rules'] and ours(r):
                subprocess.run([cmd, '-t', t, '-D'] + __import__('shlex').split(r), capture_output=True)
        for c in sorted(c for c in n['chains'] - o['chains'] if ours(c)):
            subprocess.run([cmd, '-t', t, '-F', c], capture_output=True)
        for c in sorted(c for c in n['chains'] - o['chains'] if ours(c)):
            subprocess.run([cmd, '-t', t, '-X', c], capture_output=True)
PY
    if command -v nft >/dev/null; then
        nft list tables 2>/dev/null | sort > "$DIR/nft-now" || true
        comm -13 "$B/nft" "$DIR/nft-now" | while read -r _ fam name; do
            # Only iptables-nft's tables, with nothing but empty built-in
            # chains left: made for the KUBE-* chains.
            case "$fam $name" in
                "ip filter"|"ip mangle"|"ip nat"|"ip6 filter"|"ip6 mangle"|"ip6 nat") ;;
                *) continue ;;
            esac
            if ! nft list table "$fam" "$name" 2>/dev/null | grep -qE '^\s+(ip|ip6|meta|counter|jump|tcp|udp|oifname|iifname|ct|mark|fib|reject|accept|drop)'; then
                nft delete table "$fam" "$name" 2>/dev/null || true
            fi
        done
    fi
    # Our containers' cgroups, then k8s.io where it was not there before and
    # is empty now (rmdir removes only empty cgroups).
    while read -r id; do
        for cg in /sys/fs/cgroup/*/k8s.io/"$id"; do [ -d "$cg" ] && rmdir "$cg" 2>/dev/null; done
    done < "$DIR/ids"
    for cg in /sys/fs/cgroup/*/k8s.io; do
        [ -e "$B/complete" ] && ! grep -qxF "$cg" "$B/cgroups" && rmdir "$cg" 2>/dev/null
    done
    # Files that appeared: the agent's run directory (the DaemonSet's
    # hostPath), kubelet's links in /var/log/containers (its one fixed
    # path), libcni's cache of our network ("peregrine-*"), and directories
    # that did not exist and are empty now (others' containerds share
    # /run/containerd and /var/lib/cni).
    # (A record cut short says nothing: everything counts as existing.)
    existed() { [ ! -e "$B/complete" ] || grep -qxF "$1" "$B/existed"; }
    existed /run/peregrine/agent || rm -rf /run/peregrine/agent
    existed /var/log/containers || rm -rf /var/log/containers
    existed /var/log/pods || rm -rf /var/log/pods
    # kubelet's device plugin socket has a fixed path too, whatever --root-dir.
    rm -f /var/lib/kubelet/device-plugins/kubelet.sock
    existed /var/lib/kubelet || { find /var/lib/kubelet -depth -type d -empty -delete 2>/dev/null; }
    rm -f /var/lib/cni/results/peregrine-*
    for d in /var/lib/cni/results /var/lib/cni /run/peregrine /run/containerd /opt/containerd /var/run/kubernetes; do
        if [ -d "$d" ] && ! existed "$d"; then
            find "$d" -depth -type d -empty -delete 2>/dev/null
        fi
    done
    ip addr del "$NODE_IP/32" dev lo 2>/dev/null || true
    rm -rf "$STATE" "$DIR/containerd" "$DIR/kubelet" "$DIR/etcd"
    rm -rf "$B"
    log "down: done"
}

record() {
    mkdir -p "$B"
    : > "$DIR/pids"
    for k in $SYSCTLS; do echo "$k $(sysctl -n "$k" 2>/dev/null)"; done | awk 'NF == 2' > "$B/sysctls"
    iptables-save > "$B/iptables4" 2>/dev/null || true
    ip6tables-save > "$B/iptables6" 2>/dev/null || true
    nft list tables 2>/dev/null | sort > "$B/nft" || true
    cgroup_dirs > "$B/cgroups"
    ls -d /run/netns/cni-* 2>/dev/null > "$B/netns" || true
    ip -o link show | awk -F': ' '{ print $2 }' | sed 's/@.*//' | sort > "$B/links"
    : > "$B/existed"
    for d in /var/lib/cni /var/lib/cni/results /var/log/containers /var/log/pods /run/peregrine /run/peregrine/agent /run/containerd /opt/containerd /var/run/kubernetes /var/lib/kubelet; do
        [ -e "$d" ] && echo "$d" >> "$B/existed"
    done
    host_router || touch "$B/no-router"
    touch "$B/complete"
}

start() { # name exe args...: in its own session, logged; recorded in DIR/pids
    local name=$1; shift
    # Only stdin, stdout and stderr: an inherited descriptor (a caller's
    # `flock` on the build lock) must not live on in the cluster.
    (
        for fd in /proc/$BASHPID/fd/*; do
            fd=${fd##*/}
            [ "$fd" -gt 2 ] && eval "exec $fd>&-" 2>/dev/null
        done
        exec setsid "$@"
    ) > "$DIR/logs/$name.log" 2>&1 < /dev/null &
    echo "$name $! $1" >> "$DIR/pids"
}

wait_for() { # what seconds command...
    local what=$1 secs=$2; shift 2
    local end=$((SECONDS + secs))
    until "$@" >/dev/null 2>&1; do
        if [ $SECONDS -ge $end ]; then log "$what did not come up in ${secs}s"; return 1; fi
        sleep 0.2
    done
}

cert() { # name CN O "san list" usage
    local n=$1 cn=$2 o=$3 san=$4 usage=$5 p=$DIR/pki
    openssl genrsa -out "$p/$n.key" 2048 2>/dev/null
    openssl req -new -key "$p/$n.key" -subj "/CN=$cn${o:+/O=$o}" -out "$p/$n.csr" 2>/dev/null
    {
        echo "basicConstraints=CA:FALSE"
        echo "keyUsage=critical,digitalSignature,keyEncipherment"
        echo "extendedKeyUsage=$usage"
        [ -n "$san" ] && echo "subjectAltName=$san"
    } > "$p/$n.ext"
    openssl x509 -req -in "$p/$n.csr" -CA "$p/ca.crt" -CAkey "$p/ca.key" -CAcreateserial \
        -days 2 -sha256 -extfile "$p/$n.ext" -out "$p/$n.crt" 2>/dev/null
}

kubeconfig() { # file user cert
    cat > "$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: peregrine
  cluster:
    server: https://$NODE_IP:6443
    certificate-authority: $DIR/pki/ca.crt
users:
- name: $2
  user:
    client-certificate: $DIR/pki/$3.crt
    client-key: $DIR/pki/$3.key
contexts:
- name: peregrine
  context: {cluster: peregrine, user: $2}
current-context: peregrine
EOF
}

up() {
    for f in "$K8S/kubelet" "$K8S/kube-apiserver" "$K8S/kubectl" "$ETCD" "$CNI/bridge" "$CRICTL" \
             "$cache/images/pause.tar" "$cache/images/peregrine.tar" "$cache/images/iperf3.tar"; do
        [ -e "$f" ] || { log "missing $f (scripts/setup.sh, scripts/k8s/build.sh, scripts/k8s/images.sh)"; exit 1; }
    done
    command -v containerd >/dev/null || { log "no containerd (scripts/setup.sh)"; exit 1; }
    if [ -d "$B" ]; then
        log "an earlier run left $DIR: taking it down first"
        down
    fi
    rm -rf "$DIR"
    mkdir -p "$DIR/logs" "$DIR/pki" "$DIR/cni/bin" "$DIR/cni/net.d" "$DIR/pod-logs"
    # The record first: down may run from here on.
    mkdir -p "$B"
    : > "$DIR/pids"
    record
    ip addr add "$NODE_IP/32" dev lo
    # The pods' namespaces must be visible in the agent's container
    # (mountPropagation HostToContainer needs a shared mount).
    if ! grep -qE ' /run/netns /run/netns .*shared:' /proc/self/mountinfo; then
        mkdir -p /run/netns
        mount --bind /run/netns /run/netns && mount --make-shared /run/netns
        touch "$B/netns-mount-made"
    fi

    # Certificates: one CA; the apiserver's serving cert for the node IP
    # and the service IP; the admin's, the kubelet's and the apiserver's
    # client certs; the kubelet's serving cert; the service account key.
    local p=$DIR/pki
    openssl genrsa -out "$p/ca.key" 2048 2>/dev/null
    openssl req -x509 -new -key "$p/ca.key" -subj "/CN=peregrine-test-ca" -days 2 -out "$p/ca.crt" 2>/dev/null
    cert apiserver kube-apiserver "" "IP:$NODE_IP,IP:$SVC_IP,DNS:kubernetes,DNS:kubernetes.default" serverAuth
    cert admin admin system:masters "" clientAuth
    cert apiserver-kubelet kube-apiserver-kubelet-client system:masters "" clientAuth
    cert kubelet "system:node:$NODE" system:nodes "" clientAuth
    cert kubelet-serving "system:node:$NODE" system:nodes "IP:$NODE_IP,DNS:$NODE" serverAuth
    openssl genrsa -out "$p/sa.key" 2048 2>/dev/null
    openssl rsa -in "$p/sa.key" -pubout -out "$p/sa.pub" 2>/dev/null
    kubeconfig "$DIR/kubeconfig" admin admin
    kubeconfig "$DIR/kubelet.kubeconfig" "system:node:$NODE" kubelet

    start etcd "$ETCD" --name pg --data-dir "$DIR/etcd" \
        --listen-client-urls "http://$NODE_IP:2379" --advertise-client-urls "http://$NODE_IP:2379" \
        --listen-peer-urls "http://$NODE_IP:2380" --initial-advertise-peer-urls "http://$NODE_IP:2380" \
        --initial-cluster "pg=http://$NODE_IP:2380" --listen-metrics-urls "http://$NODE_IP:2381"
    start kube-apiserver "$K8S/kube-apiserver" \
        --etcd-servers "http://$NODE_IP:2379" \
        --bind-address "$NODE_IP" --advertise-address "$NODE_IP" --secure-port 6443 \
        --service-cluster-ip-range "$SVC_CIDR" \
        --client-ca-file "$p/ca.crt" --tls-cert-file "$p/apiserver.crt" --tls-private-key-file "$p/apiserver.key" \
        --kubelet-client-certificate "$p/apiserver-kubelet.crt" --kubelet-client-key "$p/apiserver-kubelet.key" \
        --kubelet-certificate-authority "$p/ca.crt" \
        --kubelet-preferred-address-types InternalIP \
        --service-account-issuer "https://$NODE_IP:6443" --service-account-key-file "$p/sa.pub" \
        --service-account-signing-key-file "$p/sa.key" \
        --authorization-mode Node,RBAC --allow-privileged=true --profiling=false
    sed -e "s|@ROOT@|$DIR/containerd|g" -e "s|@STATE@|$STATE|g" \
        -e "s|@BIN@|$DIR/cni/bin|g" -e "s|@NET@|$DIR/cni/net.d|g" \
        "$root/scripts/k8s/containerd.toml" > "$DIR/containerd.toml"
    # The node's base CNI plugins (what a distribution's package installs);
    # peregrine-cni and the conflist come from the DaemonSet.
    for plug in bridge host-local loopback; do ln -sf "$CNI/$plug" "$DIR/cni/bin/$plug"; done
    start containerd containerd --config "$DIR/containerd.toml"
    wait_for "containerd" 30 test -S "$SOCK"
    for img in pause peregrine iperf3; do
        timeout -s KILL 120 ctr -a "$SOCK" -n k8s.io images import "$cache/images/$img.tar" > /dev/null
    done
    wait_for "kube-apiserver" 60 "$K8S/kubectl" --kubeconfig "$DIR/kubeconfig" get --raw /readyz
    start kube-controller-manager "$K8S/kube-controller-manager" \
        --kubeconfig "$DIR/kubeconfig" --bind-address "$NODE_IP" --cert-dir "$DIR/cm" \
        --service-account-private-key-file "$p/sa.key" --root-ca-file "$p/ca.crt" \
        --cluster-signing-cert-file "$p/ca.crt" --cluster-signing-key-file "$p/ca.key" \
        --allocate-node-cidrs --cluster-cidr "$POD_CIDR" --node-cidr-mask-size 24 \
        --service-cluster-ip-range "$SVC_CIDR" --leader-elect=false --profiling=false
    start kube-scheduler "$K8S/kube-scheduler" \
        --kubeconfig "$DIR/kubeconfig" --bind-address "$NODE_IP" --cert-dir "$DIR/sched" \
        --leader-elect=false --profiling=false
    cat > "$DIR/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: $NODE_IP
healthzPort: 10248
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failCgroupV1: false
failSwapOn: false
resolvConf: ""
evictionHard: {}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
containerRuntimeEndpoint: unix://$SOCK
podLogsDir: $DIR/pod-logs
tlsCertFile: $p/kubelet-serving.crt
tlsPrivateKeyFile: $p/kubelet-serving.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $p/ca.crt}
authorization:
  mode: AlwaysAllow
EOF
    start kubelet "$K8S/kubelet" --config "$DIR/kubelet.yaml" --kubeconfig "$DIR/kubelet.kubeconfig" \
        --root-dir "$DIR/kubelet" --cert-dir "$DIR/kubelet-pki" \
        --hostname-override "$NODE" --node-ip "$NODE_IP" -v 1
    wait_for "the node $NODE" 60 "$K8S/kubectl" --kubeconfig "$DIR/kubeconfig" get node "$NODE"
    log "up: kubeconfig $DIR/kubeconfig, node $NODE ($NODE_IP), pods $POD_CIDR, services $SVC_CIDR"
}

case $cmd in
    up) up ;;
    down) down ;;
    *) echo "usage: cluster.sh up|down DIR" >&2; exit 2 ;;
esac
