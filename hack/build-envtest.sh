#!/usr/bin/env bash
# Builds envtest's kube-apiserver and etcd from the Go module proxy: no machine here can download
# the release binaries, but the proxy serves the sources. The tools modules under hack/envtest-bins
# are committed (go.mod + go.sum) so the build is reproducible and checksum-verified.
# Usage: hack/build-envtest.sh [OUT_DIR]   (default bin/k8s/$K8S_VERSION). Idempotent: a second
# run with the binaries present does nothing.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
K8S_VERSION=${K8S_VERSION:-v1.36.3}
ETCD_VERSION=${ETCD_VERSION:-v3.6.8}
OUT=${1:-$ROOT/bin/k8s/$K8S_VERSION}
mkdir -p "$OUT"
export CGO_ENABLED=0 GOFLAGS=-mod=mod

# A machine-wide cache outside the checkout lets a fresh clone (CI) skip the build.
CACHE=${KVROUTER_ENVTEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kvrouter-envtest/$K8S_VERSION-$ETCD_VERSION}
if [[ -x $OUT/kube-apiserver && -x $OUT/etcd ]]; then
  echo "envtest binaries present in $OUT"
  exit 0
fi
if [[ -x $CACHE/kube-apiserver && -x $CACHE/etcd ]]; then
  cp "$CACHE/kube-apiserver" "$CACHE/etcd" "$OUT/"
  echo "envtest binaries copied from $CACHE"
  exit 0
fi

minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
v=k8s.io/component-base/version; cv=k8s.io/client-go/pkg/version
LDF="-s -w -X $v.gitVersion=$K8S_VERSION -X $v.gitMajor=1 -X $v.gitMinor=$minor -X $v.gitTreeState=clean -X $cv.gitVersion=$K8S_VERSION -X $cv.gitMajor=1 -X $cv.gitMinor=$minor"

start=$(date +%s)
if [[ ! -x $OUT/kube-apiserver ]]; then
  echo "building kube-apiserver $K8S_VERSION (cold: ~4 min on 2 cores)"
  (cd "$ROOT/hack/envtest-bins/k8s" && go build -trimpath -ldflags "$LDF" -o "$OUT/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver)
  mv "$OUT/kube-apiserver.tmp" "$OUT/kube-apiserver"
fi
if [[ ! -x $OUT/etcd ]]; then
  echo "building etcd $ETCD_VERSION"
  (cd "$ROOT/hack/envtest-bins/etcd" && go build -trimpath -ldflags "-s -w" -o "$OUT/etcd.tmp" go.etcd.io/etcd/server/v3)
  mv "$OUT/etcd.tmp" "$OUT/etcd"
fi
"$OUT/kube-apiserver" --version
# sed, not head: head exits after one line and etcd, still writing, dies of SIGPIPE (pipefail).
"$OUT/etcd" --version | sed -n 1p
mkdir -p "$CACHE" && cp "$OUT/kube-apiserver" "$OUT/etcd" "$CACHE/" || true
echo "envtest binaries built in $(( $(date +%s) - start ))s into $OUT"
