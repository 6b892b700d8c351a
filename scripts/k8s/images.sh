#!/usr/bin/env bash
# Builds the images the CRI and Kubernetes tests import into containerd (no
# registry here): OCI archives under $PEREGRINE_CACHE/images, rebuilt when
# their sources change.
#   pause.tar      peregrine.local/pause:1        the pod sandbox (deploy/images/pause)
#   peregrine.tar  peregrine.local/peregrine:dev  the agent and the CNI plugin from the
#                  project's release build (target/release/peregrine, peregrine-cni;
#                  debug sections stripped), exactly the shared libraries ldd lists
#                  for them and the loader, and Debian's busybox-static as /bin/busybox
#                  with its applets as links (sh, cp, ping, nc, ...): what the
#                  DaemonSet's initContainer and the test cluster's pods run.
#                  Rebuilt when the binaries change (stamped by their sha256).
#   iperf3.tar     peregrine.local/iperf3:1       Debian's iperf3 (the package setup.sh
#                  installs), its ldd libraries and the loader, and busybox.
set -euo pipefail
cd "$(dirname "$0")/../.."
cache=${PEREGRINE_CACHE:-/var/cache/peregrine}
out=$cache/images
mkdir -p "$out"
stamp() { sha256sum "$@" | sha256sum | cut -c1-16; }

s=$(stamp deploy/images/pause/pause.c scripts/k8s/oci_image.py)
if [ ! -e "$out/pause.tar" ] || [ "$(cat "$out/pause.stamp" 2>/dev/null)" != "$s" ]; then
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    mkdir -p "$work/root"
    gcc -static -Os -o "$work/root/pause" deploy/images/pause/pause.c
    strip "$work/root/pause"
    python3 scripts/k8s/oci_image.py "$work/root" peregrine.local/pause:1 "$out/pause.tar.tmp" /pause
    mv "$out/pause.tar.tmp" "$out/pause.tar"
    echo "$s" > "$out/pause.stamp"
fi

# The rest of a rootfs at $1 for the binaries $2...: exactly what the dynamic
# linker loads for them (ldd's paths: libraries and the loader, copied to the
# same paths), and busybox with its applets as links.
rootfs() {
    local root=$1; shift
    mkdir -p "$root/bin" "$root/tmp" "$root/run" "$root/etc" "$root/var"
    chmod 1777 "$root/tmp"
    ln -sfn ../run "$root/var/run"
    for lib in $(ldd "$@" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' | sort -u); do
        mkdir -p "$root$(dirname "$lib")"
        cp -L "$lib" "$root$lib"
    done
    cp /bin/busybox "$root/bin/busybox"
    for a in $(/bin/busybox --list); do
        [ -e "$root/bin/$a" ] || ln -s busybox "$root/bin/$a"
    done
}

bins=(target/release/peregrine target/release/peregrine-cni)
for b in "${bins[@]}"; do
    [ -x "$b" ] || { echo "images.sh: no $b: cargo build --release --workspace first" >&2; exit 1; }
done
[ -x /bin/busybox ] && /bin/busybox --list >/dev/null \
    || { echo "images.sh: no /bin/busybox: apt-get install busybox-static (scripts/setup.sh)" >&2; exit 1; }
s=$(stamp "${bins[@]}" /bin/busybox scripts/k8s/oci_image.py scripts/k8s/images.sh)
if [ ! -e "$out/peregrine.tar" ] || [ "$(cat "$out/peregrine.stamp" 2>/dev/null)" != "$s" ]; then
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    root=$work/root
    mkdir -p "$root/bin"
    for b in "${bins[@]}"; do
        strip --strip-debug -o "$root/bin/$(basename "$b")" "$b"
    done
    rootfs "$root" "${bins[@]}"
    python3 scripts/k8s/oci_image.py "$root" peregrine.local/peregrine:dev "$out/peregrine.tar.tmp" /bin/peregrine
    mv "$out/peregrine.tar.tmp" "$out/peregrine.tar"
    echo "$s" > "$out/peregrine.stamp"
    rm -rf "$work"
fi

[ -x /usr/bin/iperf3 ] || { echo "images.sh: no /usr/bin/iperf3: apt-get install iperf3 (scripts/setup.sh)" >&2; exit 1; }
s=$(stamp /usr/bin/iperf3 /bin/busybox scripts/k8s/oci_image.py scripts/k8s/images.sh)
if [ ! -e "$out/iperf3.tar" ] || [ "$(cat "$out/iperf3.stamp" 2>/dev/null)" != "$s" ]; then
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    mkdir -p "$work/root/usr/bin"
    cp /usr/bin/iperf3 "$work/root/usr/bin/iperf3"
    rootfs "$work/root" /usr/bin/iperf3
    python3 scripts/k8s/oci_image.py "$work/root" peregrine.local/iperf3:1 "$out/iperf3.tar.tmp" /usr/bin/iperf3
    mv "$out/iperf3.tar.tmp" "$out/iperf3.tar"
    echo "$s" > "$out/iperf3.stamp"
    rm -rf "$work"
fi
echo "images: $out"
