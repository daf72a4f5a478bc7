// Package operator is `tandem operator`: a controller-runtime manager that
// reconciles each TandemDeployment (control/operator/api/v1alpha1) into its children, every
// one owned by the object (owner reference, controller=true) so that the
// garbage collector deletes them with it:
//
//   - ServiceAccount <name>, Role <name>-discovery and its RoleBinding: the
//     least RBAC the kube discovery backend needs;
//   - ConfigMap <name>-config: the generated configuration, one entry per
//     pool, and the KV fingerprint;
//   - Deployment and Service <name>-frontend;
//   - Deployment <name>-<pool> per pool and the headless Service
//     <name>-workers whose EndpointSlices carry the workers' readiness.
//
// Every pod template carries the KV fingerprint (annotation
// tandem.dev/kv-fingerprint and the workers' --kv-config-fingerprint), so
// a change of any KV-relevant field rolls every pool, and during the
// rollout a prefill and a decode worker started from two generations of
// the object are never paired by the frontend (kv_layout_mismatch: the
// workers publish the fingerprint in their record's KV layout) instead of
// exchanging KV they cannot read.
//
// Status: Ready / Progressing / Degraded conditions, per-pool replicas and
// ready replicas from the Deployments, and the frontend's /health
// diagnostics.
package operator
