#!/usr/bin/env bash
# Regenerates the committed tools modules (k8s/ and etcd/) for a version bump:
#   K8S_VERSION=v1.36.3 ETCD_VERSION=v3.6.8 hack/envtest-bins/gen-tools-modules.sh
# k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces them with ./staging paths,
# so `go install` cannot build it; a scratch module replacing each staging module with its
# published v0.X.Y tag can.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
K8S_VERSION=${K8S_VERSION:-v1.36.3}; ETCD_VERSION=${ETCD_VERSION:-v3.6.8}
STAGING=v0.${K8S_VERSION#v1.}
cd "$HERE/k8s"; rm -f go.mod go.sum
kmod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')
goline=$(grep -m1 '^go ' "$kmod")
{ printf 'module envtestbins/k8s\n\n%s\n\nreplace (\n' "$goline"
  comm -12 <(awk '/^require \(/{r=1;next} r&&/^\)/{r=0} r&&$2=="v0.0.0"{print $1}' "$kmod" | sort -u) \
           <(awk '$2=="=>" && $3 ~ /^\.\/staging\//{print $1}' "$kmod" | sort -u) |
    while read -r m; do printf '\t%s => %s %s\n' "$m" "$m" "$STAGING"; done
  printf ')\n'; } > go.mod
go get -tool "k8s.io/kubernetes/cmd/kube-apiserver@$K8S_VERSION"
cd "$HERE/etcd"; rm -f go.mod go.sum
printf 'module envtestbins/etcd\n\ngo 1.24.0\n' > go.mod
go get -tool "go.etcd.io/etcd/server/v3@$ETCD_VERSION"
