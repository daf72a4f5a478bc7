package operator

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tandemllm/tandem/control/operator/api/v1alpha1"
)

// Labels and annotations on the children.
const (
	LabelDeployment = "tandem.dev/deployment"
	LabelPool       = "tandem.dev/pool"
	LabelRole       = "tandem.dev/role"
	LabelComponent  = "app.kubernetes.io/component"
	// AnnotationFingerprint is the KV fingerprint on every pod template.
	AnnotationFingerprint = "tandem.dev/kv-fingerprint"
	// FrontendPort is the OpenAI API port of the frontend Service.
	FrontendPort = 8000
	// RequestPlanePort is the workers' gRPC request plane.
	RequestPlanePort = 9000
	upstreamPort     = 8001
)

// Fingerprint digests the KV-relevant fields of the spec: two workers
// whose fingerprints differ must not exchange KV. A fixed, versioned text
// form, as discovery.KVLayout.Fingerprint, so that JSON details never
// change it.
func Fingerprint(s *v1alpha1.TandemDeploymentSpec) string {
	h := sha256.New()
	tok := s.Model.Tokenizer
	if tok == "" {
		tok = s.Model.Source
	}
	fmt.Fprintf(h, "tandemdeployment-kv/1|%s|%s|%s|%d|%s|%s|%d",
		s.Model.Name, s.Model.Source, tok, s.KV.BlockSize, s.KV.DType, s.KV.Layout, s.KV.BytesPerToken)
	return hex.EncodeToString(h.Sum(nil)[:12])
}

// PoolDeploymentName is the Deployment of one pool.
func PoolDeploymentName(td *v1alpha1.TandemDeployment, pool string) string {
	return td.Name + "-" + pool
}

// FrontendName is the frontend's Deployment and Service.
func FrontendName(td *v1alpha1.TandemDeployment) string { return td.Name + "-frontend" }

// WorkersServiceName is the headless Service over every worker pod.
func WorkersServiceName(td *v1alpha1.TandemDeployment) string { return td.Name + "-workers" }

func commonLabels(td *v1alpha1.TandemDeployment) map[string]string {
	return map[string]string{
		"app.kubernetes.io/name":       "tandem",
		"app.kubernetes.io/instance":   td.Name,
		"app.kubernetes.io/managed-by": "tandem-operator",
		LabelDeployment:                td.Name,
	}
}

func with(m map[string]string, kv ...string) map[string]string {
	out := make(map[string]string, len(m)+len(kv)/2)
	for k, v := range m {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

// workerSelector is the kube discovery selector of this object's workers.
func workerSelector(td *v1alpha1.TandemDeployment) string {
	return LabelDeployment + "=" + td.Name + "," + LabelComponent + "=tandem-worker"
}

// discoveryArgs are the flags frontend and workers share.
func discoveryArgs(td *v1alpha1.TandemDeployment) []string {
	d := td.Spec.Discovery
	if d.Backend == "etcd" {
		return []string{"--discovery=etcd", "--etcd-endpoints=" + joinComma(d.EtcdEndpoints), "--discovery-prefix=/tandem/" + td.Namespace + "/" + td.Name + "/"}
	}
	return []string{"--discovery=kube", "--kube-selector=" + workerSelector(td), "--kube-service=" + WorkersServiceName(td)}
}

func eventPlaneArgs(td *v1alpha1.TandemDeployment) []string {
	if td.Spec.Router.EventPlane == "nats" {
		return []string{"--event-plane=nats", "--nats=" + td.Spec.Router.NATSURL}
	}
	return nil
}

func joinComma(ss []string) string {
	out := ""
	for i, s := range ss {
		if i > 0 {
			out += ","
		}
		out += s
	}
	return out
}

// FrontendArgs is the frontend's command line.
func FrontendArgs(td *v1alpha1.TandemDeployment) []string {
	s := &td.Spec
	args := []string{"frontend", "--http-addr=0.0.0.0:" + strconv.Itoa(FrontendPort),
		"--router-mode=" + def(s.Router.Mode, "kv"),
		"--router-block-size=" + strconv.Itoa(int(s.KV.BlockSize)),
		"--disagg=" + def(s.Disaggregation.Mode, "auto"),
		"--drain-timeout=30s"}
	if s.Router.OverlapWeight != "" {
		args = append(args, "--router-kv-overlap-weight="+s.Router.OverlapWeight)
	}
	if m := tokenizerDir(s); m != "" {
		args = append(args, "--model="+m)
	}
	args = append(args, discoveryArgs(td)...)
	return append(args, eventPlaneArgs(td)...)
}

func tokenizerDir(s *v1alpha1.TandemDeploymentSpec) string {
	if s.Model.Tokenizer != "" {
		return s.Model.Tokenizer
	}
	return s.Model.Source
}

func def(v, d string) string {
	if v == "" {
		return d
	}
	return v
}

// WorkerArgs is a pool's tandem worker command line: everything KV-related
// comes from the object's one kv section, so pools cannot drift apart.
func WorkerArgs(td *v1alpha1.TandemDeployment, p *v1alpha1.PoolSpec) []string {
	s := &td.Spec
	role := def(p.Role, v1alpha1.RoleAggregated)
	args := []string{"worker",
		"--rp-addr=0.0.0.0:" + strconv.Itoa(RequestPlanePort),
		"--advertise-host=$(POD_IP)",
		"--metrics-addr=0.0.0.0:9100",
		"--kv-events-endpoint=tcp://*:5557",
		"--drain-timeout=30s",
		"--block-size=" + strconv.Itoa(int(s.KV.BlockSize)),
		"--kv-config-fingerprint=" + Fingerprint(s),
	}
	if role != v1alpha1.RoleAggregated {
		args = append(args, "--role="+role)
	}
	if s.KV.BytesPerToken > 0 {
		args = append(args, "--kv-bytes-per-token="+strconv.FormatInt(s.KV.BytesPerToken, 10))
	}
	if b := s.Disaggregation.TransferBudget; b != nil && role != v1alpha1.RoleAggregated {
		args = append(args, "--transfer-budget="+strconv.FormatInt(b.Value(), 10))
	}
	switch p.Engine.Kind {
	case "mocker":
		args = append(args, "--engine=mocker")
		if m := tokenizerDir(s); m != "" {
			args = append(args, "--model="+m)
		}
	case "native":
		args = append(args, "--engine=native", "--model="+s.Model.Source)
	default: // an upstream server in the pod's other container
		args = append(args, "--engine=upstream", "--upstream=http://127.0.0.1:"+strconv.Itoa(upstreamPort),
			"--upstream-model="+s.Model.Name)
		if m := tokenizerDir(s); m != "" {
			args = append(args, "--model="+m)
		}
	}
	args = append(args, discoveryArgs(td)...)
	args = append(args, eventPlaneArgs(td)...)
	if p.Engine.Kind == "mocker" || p.Engine.Kind == "native" {
		args = append(args, p.Engine.Args...)
	}
	return args
}

// upstreamArgs is the upstream server's command line; its flags follow
// each server's CLI (vLLM: `vllm serve MODEL --port`,
// https://docs.vllm.ai/en/latest/cli/serve.html; SGLang: `python -m
// sglang.launch_server --model-path --port`,
// https://docs.sglang.ai/advanced_features/server_arguments.html;
// llama.cpp: `llama-server -m --port`,
// https://github.com/ggml-org/llama.cpp/tree/master/tools/server).
func upstreamCommand(td *v1alpha1.TandemDeployment, p *v1alpha1.PoolSpec) ([]string, []string) {
	port := strconv.Itoa(upstreamPort)
	bs := strconv.Itoa(int(td.Spec.KV.BlockSize))
	var cmd, args []string
	switch p.Engine.Kind {
	case "vllm":
		cmd = []string{"vllm", "serve", td.Spec.Model.Source}
		args = []string{"--port=" + port, "--served-model-name=" + td.Spec.Model.Name, "--block-size=" + bs}
	case "sglang":
		cmd = []string{"python3", "-m", "sglang.launch_server"}
		args = []string{"--model-path=" + td.Spec.Model.Source, "--port=" + port, "--served-model-name=" + td.Spec.Model.Name, "--page-size=" + bs}
	case "llamacpp":
		cmd = []string{"llama-server"}
		args = []string{"-m", td.Spec.Model.Source, "--port", port, "--alias", td.Spec.Model.Name}
	}
	return cmd, append(args, p.Engine.Args...)
}

var downwardEnv = []corev1.EnvVar{
	{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
	{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
	{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
}

// Children renders every child object of td, without owner references
// (the reconciler sets them).
func Children(td *v1alpha1.TandemDeployment) []client.Object {
	ns, lbl, fp := td.Namespace, commonLabels(td), Fingerprint(&td.Spec)
	meta := func(name string, l map[string]string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: ns, Labels: l}
	}
	out := []client.Object{
		&corev1.ServiceAccount{ObjectMeta: meta(td.Name, lbl)},
		// The kube discovery backend's needs: watch pods and slices, patch
		// the record annotation on the worker's own pod (RBAC cannot
		// narrow patch to one's own pod: one namespace per deployment).
		&rbacv1.Role{ObjectMeta: meta(td.Name+"-discovery", lbl), Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch", "patch"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "list", "watch"}},
		}},
		&rbacv1.RoleBinding{ObjectMeta: meta(td.Name+"-discovery", lbl),
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: td.Name + "-discovery"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: td.Name, Namespace: ns}}},
	}
	cfg := map[string]string{"kv-fingerprint": fp, "frontend.args": mustJSON(FrontendArgs(td))}
	for i := range td.Spec.Pools {
		p := &td.Spec.Pools[i]
		cfg["pool-"+p.Name+".args"] = mustJSON(WorkerArgs(td, p))
	}
	out = append(out, &corev1.ConfigMap{ObjectMeta: meta(td.Name+"-config", lbl), Data: cfg})

	// Frontend.
	fl := with(lbl, LabelComponent, "tandem-frontend")
	fsel := map[string]string{LabelDeployment: td.Name, LabelComponent: "tandem-frontend"}
	freplicas := int32(1)
	if r := td.Spec.Frontend.Replicas; r != nil {
		freplicas = *r
	}
	fpod := corev1.PodSpec{ServiceAccountName: td.Name, TerminationGracePeriodSeconds: ptr(int64(45)),
		Containers: []corev1.Container{{
			Name: "frontend", Image: td.Spec.Image, Args: FrontendArgs(td), Env: downwardEnv,
			Ports:          []corev1.ContainerPort{{Name: "http", ContainerPort: FrontendPort}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/live", Port: intstr.FromString("http")}}, PeriodSeconds: 2},
			Resources:      td.Spec.Frontend.Resources,
		}}}
	out = append(out,
		deployment(meta(FrontendName(td), fl), freplicas, fsel, fl, fp, fpod),
		&corev1.Service{ObjectMeta: meta(FrontendName(td), fl), Spec: corev1.ServiceSpec{Selector: fsel,
			Ports: []corev1.ServicePort{{Name: "http", Port: FrontendPort, TargetPort: intstr.FromString("http")}}}},
		&corev1.Service{ObjectMeta: meta(WorkersServiceName(td), with(lbl, LabelComponent, "tandem-worker")), Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			Selector:  map[string]string{LabelDeployment: td.Name, LabelComponent: "tandem-worker"},
			Ports:     []corev1.ServicePort{{Name: "request-plane", Port: RequestPlanePort, TargetPort: intstr.FromString("request-plane")}}}},
	)
	for i := range td.Spec.Pools {
		p := &td.Spec.Pools[i]
		role := def(p.Role, v1alpha1.RoleAggregated)
		pl := with(lbl, LabelComponent, "tandem-worker", LabelPool, p.Name, LabelRole, role)
		psel := map[string]string{LabelDeployment: td.Name, LabelPool: p.Name}
		worker := corev1.Container{
			Name: "worker", Image: td.Spec.Image, Args: WorkerArgs(td, p), Env: downwardEnv,
			Ports: []corev1.ContainerPort{{Name: "request-plane", ContainerPort: RequestPlanePort},
				{Name: "kv-events", ContainerPort: 5557}, {Name: "metrics", ContainerPort: 9100}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("request-plane")}}, PeriodSeconds: 2},
		}
		spec := corev1.PodSpec{ServiceAccountName: td.Name, TerminationGracePeriodSeconds: ptr(int64(45))}
		if p.Engine.Kind == "mocker" || p.Engine.Kind == "native" {
			worker.Resources = p.Resources
			spec.Containers = []corev1.Container{worker}
		} else {
			cmd, args := upstreamCommand(td, p)
			spec.Containers = []corev1.Container{worker, {
				Name: "engine", Image: p.Engine.Image, Command: cmd, Args: args, Resources: p.Resources,
				Ports: []corev1.ContainerPort{{Name: "engine-http", ContainerPort: upstreamPort}},
			}}
		}
		out = append(out, deployment(meta(PoolDeploymentName(td, p.Name), pl), p.Replicas, psel, pl, fp, spec))
	}
	return out
}

func deployment(m metav1.ObjectMeta, replicas int32, sel, podLabels map[string]string, fp string, spec corev1.PodSpec) *appsv1.Deployment {
	return &appsv1.Deployment{ObjectMeta: m, Spec: appsv1.DeploymentSpec{
		Replicas: ptr(replicas),
		Selector: &metav1.LabelSelector{MatchLabels: sel},
		Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: podLabels, Annotations: map[string]string{AnnotationFingerprint: fp}},
			Spec:       spec,
		},
	}}
}

func ptr[T any](v T) *T { return &v }

func mustJSON(v any) string {
	b, _ := json.Marshal(v) // []string cannot fail
	return string(b)
}
