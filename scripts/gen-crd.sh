#!/usr/bin/env bash
# Regenerates the TandemDeployment CRD YAML, the deepcopy code and the
# operator's ClusterRole from the
# kubebuilder markers in control/api/v1alpha1, with a pinned controller-gen run from
# the Go module proxy (not a go.mod dependency). OUT, OBJECT_OUT and
# RBAC_OUT override the output directories (TestCRDUpToDate generates into
# temp dirs and compares).
set -euo pipefail
cd "$(dirname "$0")/.."
CONTROLLER_GEN="sigs.k8s.io/controller-tools/cmd/controller-gen@v0.23.0"
OUT="${OUT:-deploy/crd}"
go run "$CONTROLLER_GEN" object paths=./control/api/... ${OBJECT_OUT:+output:object:dir=$OBJECT_OUT}
go run "$CONTROLLER_GEN" crd paths=./control/api/... output:crd:dir="$OUT"
# The operator's ClusterRole, from the +kubebuilder:rbac markers.
go run "$CONTROLLER_GEN" rbac:roleName=tandem-operator paths=./control/operator/... output:rbac:dir="${RBAC_OUT:-deploy/operator}"
# The Helm chart installs the same files (Helm's crds/ directory, and the
# ClusterRole among its templates).
if [ "$OUT" = deploy/crd ]; then
	cp deploy/crd/*.yaml deploy/helm/tandem-operator/crds/
	cp deploy/operator/role.yaml deploy/helm/tandem-operator/templates/clusterrole.yaml
fi
