#!/usr/bin/env bash
# Builds the images the CRI and Kubernetes tests import into containerd (no
# registry here): OCI archives under $PEREGRINE_CACHE/images, rebuilt when
# their sources change.
#   pause.tar  peregrine.local/pause:1  the pod sandbox (deploy/images/pause)
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
echo "images: $out"
