#!/usr/bin/env bash
# helm lint and helm template on the operator chart, with a pinned Helm
# built from the Go module proxy (not a go.mod dependency: Helm would add
# its whole dependency tree to Tandem's module graph). The binary is cached
# at ~/.cache/tandem/bin/helm-$VERSION.d/helm, where operator's
# TestHelmInstall finds it (or $TANDEM_HELM); the script prints its path
# last.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=v3.22.0
CACHE="${TANDEM_CACHE:-$HOME/.cache/tandem}"
HELM="$CACHE/bin/helm-$VERSION.d/helm"
if ! [ -x "$HELM" ] || ! "$HELM" version --short 2>/dev/null | grep -q "$VERSION"; then
	GOBIN="$(dirname "$HELM")" go install "helm.sh/helm/v3/cmd/helm@$VERSION" >&2
fi
chart=deploy/helm/tandem-operator
"$HELM" lint --strict "$chart" >&2
"$HELM" template tandem "$chart" --namespace tandem-system --include-crds >/dev/null
"$HELM" template tandem "$chart" --namespace tandem-system --set watchNamespace=serving --set leaderElect=false | grep -q -- '--namespace=serving'
echo "helm chart: lint and template ok" >&2
echo "$HELM"
