#!/usr/bin/env bash
# Builds what the Kubernetes tests need from the registries (issue 26), once,
# into the project's cache (PEREGRINE_CACHE, default /var/cache/peregrine:
# outside the clone, so every clone on this machine, CI's too, finds it warm):
#   k8s/v1.34.0/bin: kubelet kube-apiserver kube-controller-manager
#                    kube-scheduler kubectl (from the Go module proxy)
#   cni/v1.10.0/bin: the CNI reference plugins; tools/bin: cnitool, crictl
# A finished piece leaves a stamp file and is not rebuilt. The steps are the
# ones ../shared/docs/K8S-NOTES.md records for this machine.
set -euo pipefail
cache=${PEREGRINE_CACHE:-/var/cache/peregrine}
# The image's Go toolchain, where a login shell would find it.
command -v go >/dev/null 2>&1 || export PATH=$PATH:/usr/local/go/bin
export GOPATH=$cache/go GOMODCACHE=$cache/go/mod GOCACHE=$cache/go/build
export GOFLAGS=-modcacherw GOTOOLCHAIN=local
K8S=v1.34.0 CNI=v1.10.0 CNITOOL=v1.3.1 CRICTL=v1.37.0
mkdir -p "$cache"

# `build.sh cni`: only the CNI reference plugins and the tools (what the
# CNI tests need: a minute cold), not Kubernetes (~11 minutes cold).
only=${1:-all}
k8s_bin=$cache/k8s/$K8S/bin
if [ "$only" != cni ] && [ ! -e "$k8s_bin/.done" ]; then
    # The module zip has no staging/ and no vendor/: use the published
    # k8s.io/* modules of the same minor version instead.
    src=$(go mod download -json "k8s.io/kubernetes@$K8S" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
    work=$cache/k8s/$K8S/src
    rm -rf "$work" && mkdir -p "$work" && cp -r "$src"/. "$work" && chmod -R u+w "$work"
    rm -rf "$work/vendor" "$work/go.work" "$work/go.work.sum"
    python3 - "$work/go.mod" "${K8S#v1.}" <<'PY'
import re, sys
path, minor = sys.argv[1], sys.argv[2]
text = open(path).read()
text = re.sub(r'^\s*k8s\.io/\S+ => \./staging/\S+\n', '', text, flags=re.M)
text = re.sub(r'^(replace \(\n)\)\n', '', text, flags=re.M)
text = re.sub(r'(k8s\.io/\S+) v0\.0\.0(?=\s)', r'\1 v0.' + minor, text)
open(path, 'w').write(text)
PY
    mkdir -p "$k8s_bin"
    minor=${K8S#v1.}; minor=${minor%%.*}
    (cd "$work" && CGO_ENABLED=0 GOFLAGS="-mod=mod -modcacherw" go build -p 2 -ldflags "-s -w \
        -X k8s.io/component-base/version.gitVersion=$K8S \
        -X k8s.io/component-base/version.gitMajor=1 \
        -X k8s.io/component-base/version.gitMinor=$minor" \
        -o "$k8s_bin/" ./cmd/kubelet ./cmd/kube-apiserver ./cmd/kube-controller-manager \
        ./cmd/kube-scheduler ./cmd/kubectl)
    rm -rf "$work"
    touch "$k8s_bin/.done"
fi

cni_bin=$cache/cni/$CNI/bin
if [ ! -e "$cni_bin/.done" ]; then
    dir=$(go mod download -json "github.com/containernetworking/plugins@$CNI" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
    mkdir -p "$cni_bin"
    (cd "$dir" && CGO_ENABLED=0 go build -o "$cni_bin/" ./plugins/...)
    touch "$cni_bin/.done"
fi

tools=$cache/tools/bin
if [ ! -e "$tools/.done-$CNITOOL-$CRICTL" ]; then
    mkdir -p "$tools"
    GOBIN=$tools CGO_ENABLED=0 go install "github.com/containernetworking/cni/cnitool@$CNITOOL"
    GOBIN=$tools CGO_ENABLED=0 go install "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL"
    touch "$tools/.done-$CNITOOL-$CRICTL"
fi
echo "kubernetes $K8S: $k8s_bin; CNI plugins $CNI: $cni_bin; cnitool, crictl: $tools"
