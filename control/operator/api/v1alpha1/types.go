package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Pool roles.
const (
	RoleAggregated = "aggregated"
	RolePrefill    = "prefill"
	RoleDecode     = "decode"
)

// TandemDeployment serves one model: a frontend (with the router) and one
// or more worker pools, all configured from this object.
//
// The cross-field rules below are what would break serving if the server
// accepted them; each names the field it is about (fieldPath), so that
// `kubectl apply --dry-run=server` says which field is wrong.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=tdep,categories=tandem
// +kubebuilder:printcolumn:name="Model",type=string,JSONPath=`.spec.model.name`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Fingerprint",type=string,JSONPath=`.status.kvFingerprint`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type TandemDeployment struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   TandemDeploymentSpec   `json:"spec"`
	Status TandemDeploymentStatus `json:"status,omitempty"`
}

// TandemDeploymentSpec is the desired deployment.
//
// +kubebuilder:validation:XValidation:rule="self.disaggregation.mode != 'always' || (self.pools.exists(p, p.role == 'prefill') && self.pools.exists(p, p.role == 'decode'))",message="disaggregation.mode always needs a prefill pool and a decode pool",fieldPath=".disaggregation.mode"
// +kubebuilder:validation:XValidation:rule="!self.pools.exists(p, p.role == 'decode') || self.pools.exists(p, p.role == 'prefill') || self.disaggregation.mode == 'never'",message="a decode pool needs a prefill pool (or disaggregation.mode never)",fieldPath=".pools"
// +kubebuilder:validation:XValidation:rule="!self.pools.exists(p, p.role == 'prefill') || self.pools.exists(p, p.role == 'decode')",message="a prefill pool needs a decode pool to hand its KV to",fieldPath=".pools"
// +kubebuilder:validation:XValidation:rule="self.pools.all(p, !has(p.blockSize) || p.blockSize == self.kv.blockSize)",message="every pool's blockSize must equal kv.blockSize: pools with different block sizes cannot share KV",fieldPath=".pools"
// +kubebuilder:validation:XValidation:rule="self.pools.all(p, p.engine.kind != 'native' || size(self.model.source) > 0)",message="a native engine needs model.source (the model directory)",fieldPath=".model.source"
// +kubebuilder:validation:XValidation:rule="self.router.eventPlane != 'nats' || size(self.router.natsURL) > 0",message="router.eventPlane nats needs router.natsURL",fieldPath=".router.natsURL"
// +kubebuilder:validation:XValidation:rule="self.discovery.backend != 'etcd' || (has(self.discovery.etcdEndpoints) && size(self.discovery.etcdEndpoints) > 0)",message="discovery.backend etcd needs discovery.etcdEndpoints",fieldPath=".discovery.etcdEndpoints"
type TandemDeploymentSpec struct {
	// Image is the tandem image run by the frontend and by the mocker and
	// native pools.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:default="ghcr.io/tandemllm/tandem:latest"
	// +optional
	Image string `json:"image,omitempty"`

	Model ModelSpec `json:"model"`
	KV    KVSpec    `json:"kv"`

	// +kubebuilder:default={}
	// +optional
	Router RouterSpec `json:"router,omitempty"`
	// +kubebuilder:default={}
	// +optional
	Frontend FrontendSpec `json:"frontend,omitempty"`

	// Pools are the worker pools: one aggregated pool, or prefill and
	// decode pools. A pool's replicas is the field a planner patches
	// (JSON patch path /spec/pools/<index>/replicas; see
	// docs/kubernetes.md).
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=128
	Pools []PoolSpec `json:"pools"`

	// +kubebuilder:default={}
	// +optional
	Disaggregation DisaggregationSpec `json:"disaggregation,omitempty"`
	// +kubebuilder:default={}
	// +optional
	Discovery DiscoverySpec `json:"discovery,omitempty"`
}

// ModelSpec names the served model and where its tokenizer comes from.
type ModelSpec struct {
	// Name is the model name clients send ("model" in the OpenAI API).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Source is the model directory inside the pods (a Hugging Face
	// tokenizer directory or a llama2.c/GGUF model directory, e.g. on a
	// mounted volume). Empty: the built-in o200k_base tokenizer.
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:default=""
	// +optional
	Source string `json:"source,omitempty"`
	// Tokenizer overrides the tokenizer directory (default: Source).
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Tokenizer string `json:"tokenizer,omitempty"`
}

// KVSpec is the KV cache's layout, shared by every pool. These fields,
// with the model, make the KV fingerprint stamped on every pod.
type KVSpec struct {
	// BlockSize is the tokens per KV block.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1024
	BlockSize int32 `json:"blockSize"`
	// DType is the KV cache's element type.
	// +kubebuilder:validation:Enum=auto;fp32;fp16;bf16;fp8;q8_0
	// +kubebuilder:default=auto
	// +optional
	DType string `json:"dtype,omitempty"`
	// Layout is the engine's KV layout name (docs/kv-layout.md).
	// +kubebuilder:validation:MaxLength=128
	// +optional
	Layout string `json:"layout,omitempty"`
	// BytesPerToken is the KV bytes one token occupies, for transfer
	// sizing.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1073741824
	// +optional
	BytesPerToken int64 `json:"bytesPerToken,omitempty"`
}

// RouterSpec configures the frontend's router.
type RouterSpec struct {
	// +kubebuilder:validation:Enum=kv;kv-approx;round-robin;random;least-loaded
	// +kubebuilder:default=kv
	// +optional
	Mode string `json:"mode,omitempty"`
	// OverlapWeight is the kv cost's weight of cached-prefix overlap
	// against load (--router-kv-overlap-weight), as a decimal string.
	// +kubebuilder:validation:Pattern=`^[0-9]+(\.[0-9]+)?$`
	// +kubebuilder:validation:MaxLength=16
	// +optional
	OverlapWeight string `json:"overlapWeight,omitempty"`
	// EventPlane carries KV events: zmq (direct) or nats.
	// +kubebuilder:validation:Enum=zmq;nats
	// +kubebuilder:default=zmq
	// +optional
	EventPlane string `json:"eventPlane,omitempty"`
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:default=""
	// +optional
	NATSURL string `json:"natsURL,omitempty"`
}

// FrontendSpec configures the frontend Deployment.
type FrontendSpec struct {
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	// +kubebuilder:default=1
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`
}

// PoolSpec is one pool of identical workers.
type PoolSpec struct {
	// Name is unique within the object and part of the children's names.
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:MaxLength=40
	Name string `json:"name"`
	// +kubebuilder:validation:Enum=aggregated;prefill;decode
	// +kubebuilder:default=aggregated
	// +optional
	Role string `json:"role,omitempty"`
	// Replicas is the pool's size; 0 keeps the model advertised (the
	// frontend answers 503 with Retry-After) with no worker running.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10000
	Replicas int32 `json:"replicas"`
	// BlockSize, when set, must equal kv.blockSize; it exists so that a
	// pool copied from another deployment is checked, not silently
	// overridden.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1024
	// +optional
	BlockSize *int32     `json:"blockSize,omitempty"`
	Engine    EngineSpec `json:"engine"`
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`
}

// EngineSpec is what a pool's workers run.
//
// +kubebuilder:validation:XValidation:rule="!(self.kind in ['vllm', 'sglang', 'llamacpp']) || (has(self.image) && size(self.image) > 0)",message="an upstream engine (vllm, sglang, llamacpp) needs engine.image",fieldPath=".image"
// +kubebuilder:validation:XValidation:rule="self.kind != 'mocker' || !has(self.image)",message="the mocker runs in the tandem image; engine.image is only for upstream engines",fieldPath=".image"
type EngineSpec struct {
	// +kubebuilder:validation:Enum=mocker;native;vllm;sglang;llamacpp
	Kind string `json:"kind"`
	// Image is the upstream server's image (vllm, sglang, llamacpp).
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Image string `json:"image,omitempty"`
	// Args are extra arguments: the upstream server's, or the tandem
	// worker's for mocker and native.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=1024
	// +optional
	Args []string `json:"args,omitempty"`
}

// DisaggregationSpec configures disaggregated prefill.
type DisaggregationSpec struct {
	// +kubebuilder:validation:Enum=auto;always;never
	// +kubebuilder:default=auto
	// +optional
	Mode string `json:"mode,omitempty"`
	// TransferBudget is each worker's KV transfer staging memory.
	// +optional
	TransferBudget *resource.Quantity `json:"transferBudget,omitempty"`
}

// DiscoverySpec says how the frontend finds the workers.
type DiscoverySpec struct {
	// +kubebuilder:validation:Enum=kube;etcd
	// +kubebuilder:default=kube
	// +optional
	Backend string `json:"backend,omitempty"`
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=512
	// +optional
	EtcdEndpoints []string `json:"etcdEndpoints,omitempty"`
}

// Condition types.
const (
	ConditionReady       = "Ready"
	ConditionProgressing = "Progressing"
	ConditionDegraded    = "Degraded"
)

// TandemDeploymentStatus is what the operator observed.
type TandemDeploymentStatus struct {
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// KVFingerprint is the digest of the KV-relevant spec fields stamped
	// on every pod (annotation tandem.dev/kv-fingerprint).
	// +optional
	KVFingerprint string `json:"kvFingerprint,omitempty"`
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// +listType=map
	// +listMapKey=name
	// +optional
	Pools []PoolStatus `json:"pools,omitempty"`
	// +optional
	Frontend FrontendStatus `json:"frontend,omitempty"`
}

// PoolStatus is one pool's observed size.
type PoolStatus struct {
	Name          string `json:"name"`
	Replicas      int32  `json:"replicas"`
	ReadyReplicas int32  `json:"readyReplicas"`
}

// FrontendStatus is the frontend's observed state.
type FrontendStatus struct {
	ReadyReplicas int32 `json:"readyReplicas"`
	// Health is the frontend's /health status (ok, degraded, unavailable).
	// +optional
	Health string `json:"health,omitempty"`
	// Diagnostics are the active diagnostic codes /health reports.
	// +optional
	Diagnostics []string `json:"diagnostics,omitempty"`
}

// TandemDeploymentList is a list of TandemDeployments.
//
// +kubebuilder:object:root=true
type TandemDeploymentList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TandemDeployment `json:"items"`
}
