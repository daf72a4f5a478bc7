#!/usr/bin/env bash
# Builds one Kubernetes component (kube-apiserver, kube-controller-manager)
# from the Go module proxy and caches the binary at
# ~/.cache/tandem/bin/<component>-$VERSION, for the tests that need a real
# control plane (see internal/kubetest). The build happens in a throwaway
# module outside the repository so that k8s.io/kubernetes never enters
# Tandem's go.mod.
#
#   scripts/build-kube.sh kube-apiserver            # TANDEM_KUBE_APISERVER
#   scripts/build-kube.sh kube-controller-manager   # TANDEM_KUBE_CONTROLLER_MANAGER
#
# k8s.io/kubernetes is not meant to be imported: its go.mod requires every
# staging module (k8s.io/api, k8s.io/apiserver, ...) at v0.0.0 and replaces
# them with ./staging/src/... paths, which a module consumer cannot see. The
# consumer therefore replaces each staging module with its published v0.X.Y
# tag (https://github.com/kubernetes/kubernetes/issues/79384).
#
# Cost on 2 cores, the first time: kube-apiserver about 7.5 minutes and
# 3 GB of memory; kube-controller-manager about 4 more minutes once
# kube-apiserver's packages are in the build cache. A cached binary is
# reused (a version check only).
set -euo pipefail
COMPONENT="${1:?usage: build-kube.sh kube-apiserver|kube-controller-manager}"
case "$COMPONENT" in
kube-apiserver | kube-controller-manager) ;;
*) echo "build-kube.sh: unknown component $COMPONENT" >&2; exit 2 ;;
esac
VERSION="${KUBE_VERSION:-v1.37.2}"
# v1.X.Y of kubernetes pairs with v0.X.Y of its staging modules.
STAGING="v0.${VERSION#v1.}"
CACHE="${TANDEM_CACHE:-$HOME/.cache/tandem}"
BIN="$CACHE/bin/$COMPONENT-$VERSION"
if [ -x "$BIN" ] && "$BIN" --version 2>/dev/null | grep -q "$VERSION"; then
	echo "$BIN"
	exit 0
fi
WORK="$CACHE/build/$COMPONENT-$VERSION"
mkdir -p "$WORK" "$CACHE/bin"
cd "$WORK"
cat >go.mod <<MOD
module tandem.local/$COMPONENT-build

go 1.25

require k8s.io/kubernetes $VERSION
MOD
cat >tools.go <<GO
//go:build tools

package tools

import _ "k8s.io/kubernetes/cmd/$COMPONENT"
GO
export GOFLAGS=-mod=mod
# The staging list comes from kubernetes's own go.mod: every
# "k8s.io/X => ./staging/src/k8s.io/X" replace line.
modfile=$(go mod download -json "k8s.io/kubernetes@$VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
[ -n "$modfile" ] || { echo "could not download k8s.io/kubernetes@$VERSION" >&2; exit 1; }
staging=$(sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\1#p' "$modfile" | sort -u)
[ -n "$staging" ] || { echo "no staging modules found in $modfile" >&2; exit 1; }
for m in $staging; do
	go mod edit -replace "$m=$m@$STAGING"
done
echo "replaced $(echo "$staging" | wc -l) staging modules with $STAGING" >&2
go mod tidy >&2
# The version string the binary reports comes from ldflags, as kubernetes's
# own build does (hack/lib/version.sh).
ld="-s -w -X k8s.io/component-base/version.gitVersion=$VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$(echo "$VERSION" | cut -d. -f2)"
CGO_ENABLED=0 go build -trimpath -ldflags "$ld" -o "$BIN.tmp" "k8s.io/kubernetes/cmd/$COMPONENT" >&2
mv "$BIN.tmp" "$BIN"
echo "$BIN"
