#!/usr/bin/env bash
# Regenerates the TandemDeployment CRD YAML, the deepcopy code and the
# operator's ClusterRole from the kubebuilder markers in the operator's
# module (control/operator: api/v1alpha1 and the operator package), with a
# pinned controller-gen run from the Go module proxy (not a go.mod
# dependency). OUT, OBJECT_OUT and RBAC_OUT override the output directories
# (TestCRDUpToDate generates into temp dirs and compares); relative ones are
# taken from the repository root.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
abs() { case "$1" in /*) echo "$1" ;; *) echo "$root/$1" ;; esac; }
CONTROLLER_GEN="sigs.k8s.io/controller-tools/cmd/controller-gen@v0.23.0"
OUT=$(abs "${OUT:-deploy/crd}")
RBAC_OUT=$(abs "${RBAC_OUT:-deploy/operator}")
OBJECT_OUT=${OBJECT_OUT:+$(abs "$OBJECT_OUT")}
# controller-gen loads the packages of the module it runs in.
cd control/operator
go run "$CONTROLLER_GEN" object paths=./api/... ${OBJECT_OUT:+output:object:dir=$OBJECT_OUT}
go run "$CONTROLLER_GEN" crd paths=./api/... output:crd:dir="$OUT"
# The operator's ClusterRole, from the +kubebuilder:rbac markers.
go run "$CONTROLLER_GEN" rbac:roleName=tandem-operator paths=. output:rbac:dir="$RBAC_OUT"
# The Helm chart installs the same files (Helm's crds/ directory, and the
# ClusterRole among its templates).
cd "$root"
if [ "$OUT" = "$root/deploy/crd" ]; then
	cp deploy/crd/*.yaml deploy/helm/tandem-operator/crds/
	cp deploy/operator/role.yaml deploy/helm/tandem-operator/templates/clusterrole.yaml
fi
