#!/usr/bin/env bash
# Installs what peregrine needs on a fresh Debian 12 machine (run as root) and
# builds it. Idempotent: installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  clang llvm libelf-dev zlib1g-dev pkg-config libbpf-dev linux-libc-dev  # BPF build
  iproute2 ethtool iputils-ping iperf3                                    # lab tools
  nftables                                     # bench netmodes: NAT port publishing (bridge mode)
  prometheus                                   # promtool: tests check the metrics endpoints
  python3 python3-venv                         # the aioquic peer of the QUIC interop tests
  linux-perf                                   # bench quic: where the CPU goes
  systemd man-db                               # systemd-analyze verify of the agent's unit (and its man page)
  containernetworking-plugins                  # CNI tests: Debian's reference plugins (1.1.1) beside the Go-built v1.10.0
  containerd runc                              # CNI tests: containerd's CRI driven by crictl, as kubelet drives it
  iptables busybox-static openssl              # Kubernetes test cluster: kubelet's rules, the images' shell, certificates
)

if [ "$(id -u)" -ne 0 ]; then
  echo "peregrine: setup needs root (apt, BPF, network namespaces)" >&2
  exit 1
fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  # Only promtool is wanted: do not leave a Prometheus server we started running.
  if [[ " ${missing[*]} " == *" prometheus "* ]] && [ -d /run/systemd/system ]; then
    systemctl disable --now prometheus >/dev/null 2>&1 || true
  fi
fi

if ! command -v cargo >/dev/null 2>&1; then
  for c in "$HOME/.cargo/bin/cargo" /usr/local/cargo/bin/cargo; do
    [ -x "$c" ] && export PATH="$(dirname "$c"):$PATH" && break
  done
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "peregrine: no Rust toolchain (cargo) found; install Rust >= 1.85 with rustup" >&2
  exit 1
fi

# The independent QUIC/HTTP/3 peer (aioquic from PyPI, pinned) in its own
# virtual environment: Debian's Python is externally managed (PEP 668).
INTEROP_VENV=/opt/peregrine/interop-venv
if ! "$INTEROP_VENV/bin/python" -c "import aioquic" 2>/dev/null \
   || ! "$INTEROP_VENV/bin/pip" freeze 2>/dev/null | grep -qxF -f <(grep -v '^#' tests/interop/requirements.txt); then
  echo "installing the interop peer (aioquic) into $INTEROP_VENV"
  mkdir -p "$(dirname "$INTEROP_VENV")"
  /usr/bin/python3 -m venv "$INTEROP_VENV"
  "$INTEROP_VENV/bin/pip" install -q --disable-pip-version-check -r tests/interop/requirements.txt
fi

# Offline validation of deploy/kubernetes (kubernetes-validate from PyPI,
# pinned) in its own virtual environment, like the interop peer.
K8S_VENV=/opt/peregrine/k8s-venv
if ! "$K8S_VENV/bin/pip" freeze 2>/dev/null | grep -qxF -f <(grep -v '^#' tests/k8s/requirements.txt); then
  echo "installing kubernetes-validate into $K8S_VENV"
  mkdir -p "$(dirname "$K8S_VENV")"
  /usr/bin/python3 -m venv "$K8S_VENV"
  "$K8S_VENV/bin/pip" install -q --disable-pip-version-check -r tests/k8s/requirements.txt
fi

# etcd for the Kubernetes test cluster: Debian's binary only (no service),
# extracted into the project's cache.
ETCD_DIR=${PEREGRINE_CACHE:-/var/cache/peregrine}/etcd
if [ ! -x "$ETCD_DIR/usr/bin/etcd" ]; then
  echo "extracting etcd-server into $ETCD_DIR"
  # dpkg -x makes the last directory only: on a fresh machine the cache
  # itself does not exist yet.
  mkdir -p "$ETCD_DIR"
  dl=$(mktemp -d) && chmod 755 "$dl"
  (cd "$dl" && apt-get download -qq etcd-server && dpkg -x etcd-server_*.deb "$ETCD_DIR")
  rm -rf "$dl"
fi

# bpffs is not mounted at boot on the project machines.
mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf

cargo build --release --locked --workspace

# Man pages and bash completion, generated from the CLI definition.
./target/release/peregrine man --out /usr/local/share/man/man1
mkdir -p /usr/share/bash-completion/completions
./target/release/peregrine completions bash > /usr/share/bash-completion/completions/peregrine
