#!/usr/bin/env bash
# helm lint and helm template on the operator chart, with a pinned Helm run
# from the Go module proxy (not a go.mod dependency: Helm would add its
# whole dependency tree to Tandem's module graph).
set -euo pipefail
cd "$(dirname "$0")/.."
HELM="helm.sh/helm/v3/cmd/helm@v3.22.0"
chart=deploy/helm/tandem-operator
go run "$HELM" lint --strict "$chart"
go run "$HELM" template tandem "$chart" --namespace tandem-system --include-crds >/dev/null
go run "$HELM" template tandem "$chart" --namespace tandem-system --set watchNamespace=serving --set leaderElect=false | grep -q -- '--namespace=serving'
echo "helm chart: lint and template ok"
