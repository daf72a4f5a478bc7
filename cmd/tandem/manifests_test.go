package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/tandemllm/tandem/internal/kubeapi"
	"github.com/tandemllm/tandem/internal/kubetest"
)

// The fields of deploy/kubernetes that the checks read, decoded with
// yaml.v3 (the main module links no Kubernetes API types). Misspelled
// fields are caught by TestKubernetesManifestsStrict, which has the real
// API server decode the files strictly.
type (
	objectMeta struct {
		Name   string            `yaml:"name"`
		Labels map[string]string `yaml:"labels"`
	}
	deployment struct {
		Metadata objectMeta `yaml:"metadata"`
		Spec     struct {
			Selector struct {
				MatchLabels      map[string]string `yaml:"matchLabels"`
				MatchExpressions []any             `yaml:"matchExpressions"`
			} `yaml:"selector"`
			Template struct {
				Metadata objectMeta `yaml:"metadata"`
				Spec     podSpec    `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	podSpec struct {
		ServiceAccountName            string      `yaml:"serviceAccountName"`
		TerminationGracePeriodSeconds *int64      `yaml:"terminationGracePeriodSeconds"`
		Containers                    []container `yaml:"containers"`
		Volumes                       []struct {
			Name   string `yaml:"name"`
			Secret *struct {
				SecretName string `yaml:"secretName"`
			} `yaml:"secret"`
		} `yaml:"volumes"`
	}
	container struct {
		Name string   `yaml:"name"`
		Args []string `yaml:"args"`
		Env  []struct {
			Name      string `yaml:"name"`
			ValueFrom *struct {
				FieldRef *struct {
					FieldPath string `yaml:"fieldPath"`
				} `yaml:"fieldRef"`
			} `yaml:"valueFrom"`
		} `yaml:"env"`
		ReadinessProbe *struct {
			GRPC *struct {
				Port int32 `yaml:"port"`
			} `yaml:"grpc"`
			HTTPGet *struct {
				Path string `yaml:"path"`
			} `yaml:"httpGet"`
		} `yaml:"readinessProbe"`
		VolumeMounts []struct {
			Name      string `yaml:"name"`
			MountPath string `yaml:"mountPath"`
		} `yaml:"volumeMounts"`
	}
	service struct {
		Metadata objectMeta `yaml:"metadata"`
		Spec     struct {
			Selector  map[string]string `yaml:"selector"`
			ClusterIP string            `yaml:"clusterIP"`
		} `yaml:"spec"`
	}
	policyRule struct {
		APIGroups []string `yaml:"apiGroups"`
		Resources []string `yaml:"resources"`
		Verbs     []string `yaml:"verbs"`
	}
	role struct {
		Metadata objectMeta   `yaml:"metadata"`
		Rules    []policyRule `yaml:"rules"`
	}
	subject struct {
		Kind string `yaml:"kind"`
		Name string `yaml:"name"`
	}
	roleBinding struct {
		Subjects []subject `yaml:"subjects"`
		RoleRef  struct {
			Kind string `yaml:"kind"`
			Name string `yaml:"name"`
		} `yaml:"roleRef"`
	}
)

// matches reports whether every label of set is in labels (a Service's
// or a matchLabels selector; an empty one selects everything).
func matches(set, labels map[string]string) bool {
	for k, v := range set {
		if lv, ok := labels[k]; !ok || lv != v {
			return false
		}
	}
	return true
}

// manifests are the decoded documents of deploy/kubernetes.
type manifests struct {
	files        []string
	deployments  map[string]*deployment
	services     map[string]*service
	accounts     map[string]bool
	roles        map[string]*role
	roleBindings []*roleBinding
}

func loadManifests(t *testing.T) *manifests {
	t.Helper()
	files, err := filepath.Glob("../../deploy/kubernetes/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	m := &manifests{files: files, deployments: map[string]*deployment{}, services: map[string]*service{},
		accounts: map[string]bool{}, roles: map[string]*role{}}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			var tm struct {
				APIVersion string `yaml:"apiVersion"`
				Kind       string `yaml:"kind"`
			}
			if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
				t.Fatalf("%s #%d: %v", f, i, err)
			}
			decode := func(into any) {
				t.Helper()
				if err := yaml.Unmarshal([]byte(doc), into); err != nil {
					t.Fatalf("%s #%d (%s): %v", f, i, tm.Kind, err)
				}
			}
			switch tm.APIVersion + " " + tm.Kind {
			case "apps/v1 Deployment":
				var d deployment
				decode(&d)
				m.deployments[d.Metadata.Name] = &d
			case "v1 Service":
				var s service
				decode(&s)
				m.services[s.Metadata.Name] = &s
			case "v1 ServiceAccount":
				var s struct {
					Metadata objectMeta `yaml:"metadata"`
				}
				decode(&s)
				m.accounts[s.Metadata.Name] = true
			case "rbac.authorization.k8s.io/v1 Role":
				var r role
				decode(&r)
				m.roles[r.Metadata.Name] = &r
			case "rbac.authorization.k8s.io/v1 RoleBinding":
				var r roleBinding
				decode(&r)
				m.roleBindings = append(m.roleBindings, &r)
			default:
				t.Fatalf("%s #%d: unexpected %s %s", f, i, tm.APIVersion, tm.Kind)
			}
		}
	}
	return m
}

func stripComments(doc string) string {
	var out []string
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// allows reports whether the roles bound to account grant verb on
// resource.
func (m *manifests) allows(account, group, resource, verb string) bool {
	for _, rb := range m.roleBindings {
		bound := slices.ContainsFunc(rb.Subjects, func(s subject) bool { return s.Kind == "ServiceAccount" && s.Name == account })
		role := m.roles[rb.RoleRef.Name]
		if !bound || rb.RoleRef.Kind != "Role" || role == nil {
			continue
		}
		for _, r := range role.Rules {
			if slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, verb) {
				return true
			}
		}
	}
	return false
}

// parseArgs parses a container's arguments with the real subcommand, so
// a flag that does not exist (or a bad value) fails the test.
func parseArgs(t *testing.T, c container) *cobra.Command {
	t.Helper()
	if len(c.Args) == 0 {
		t.Fatalf("container %s has no args", c.Name)
	}
	var cmd *cobra.Command
	switch c.Args[0] {
	case "frontend":
		cmd = newFrontendCmd()
	case "worker":
		cmd = newWorkerCmd()
	default:
		t.Fatalf("container %s runs %q", c.Name, c.Args[0])
	}
	cmd.Flags().String("log-level", "info", "") // the root's persistent flag
	env := map[string]bool{}
	for _, e := range c.Env {
		env[e.Name] = true
	}
	args := make([]string, 0, len(c.Args)-1)
	for _, a := range c.Args[1:] {
		// Kubernetes expands $(VAR) from the container's env.
		a = regexp.MustCompile(`\$\((\w+)\)`).ReplaceAllStringFunc(a, func(v string) string {
			name := v[2 : len(v)-1]
			if !env[name] {
				t.Errorf("container %s: %s is not in its env", c.Name, v)
			}
			return "10.0.0.7"
		})
		args = append(args, a)
	}
	if err := cmd.ParseFlags(args); err != nil {
		t.Fatalf("container %s: %v", c.Name, err)
	}
	return cmd
}

func flag(t *testing.T, cmd *cobra.Command, name string) string {
	t.Helper()
	f := cmd.Flags().Lookup(name)
	if f == nil {
		t.Fatalf("no flag --%s", name)
	}
	return f.Value.String()
}

func fieldRefEnv(c container, name, path string) bool {
	for _, e := range c.Env {
		if e.Name == name && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == path {
			return true
		}
	}
	return false
}

func portOf(addr string) string { return addr[strings.LastIndex(addr, ":")+1:] }

// TestKubernetesManifests checks deploy/kubernetes against what the code
// reads: no cluster is needed (none is available here), so this is the
// validation they get besides a real apply.
func TestKubernetesManifests(t *testing.T) {
	m := loadManifests(t)
	cases := []struct {
		deployment, subcommand, account string
		needs                           [][3]string // group, resource, verb
	}{
		{"tandem-frontend", "frontend", "tandem-frontend", [][3]string{
			{"", "pods", "list"}, {"", "pods", "watch"}, {"discovery.k8s.io", "endpointslices", "list"}, {"discovery.k8s.io", "endpointslices", "watch"},
		}},
		{"tandem-worker", "worker", "tandem-worker", [][3]string{{"", "pods", "patch"}}},
	}
	for _, c := range cases {
		t.Run(c.deployment, func(t *testing.T) {
			d := m.deployments[c.deployment]
			if d == nil {
				t.Fatalf("no Deployment %s", c.deployment)
			}
			tmpl := d.Spec.Template
			if sel := d.Spec.Selector; len(sel.MatchExpressions) > 0 || len(sel.MatchLabels) == 0 || !matches(sel.MatchLabels, tmpl.Metadata.Labels) {
				t.Fatalf("selector %v does not match the template's labels %v (matchLabels only)", sel, tmpl.Metadata.Labels)
			}
			if tmpl.Spec.ServiceAccountName != c.account || !m.accounts[c.account] {
				t.Fatalf("service account %q (declared: %v)", tmpl.Spec.ServiceAccountName, m.accounts[c.account])
			}
			for _, n := range c.needs {
				if !m.allows(c.account, n[0], n[1], n[2]) {
					t.Errorf("RBAC: %s may not %s %s (group %q)", c.account, n[2], n[1], n[0])
				}
			}
			ctr := tmpl.Spec.Containers[0]
			if ctr.Args[0] != c.subcommand {
				t.Fatalf("runs %q, want %q", ctr.Args[0], c.subcommand)
			}
			cmd := parseArgs(t, ctr)
			if flag(t, cmd, "discovery") != "kube" {
				t.Fatal("not on the kube discovery backend")
			}
			if !fieldRefEnv(ctr, "POD_NAMESPACE", "metadata.namespace") {
				t.Error("POD_NAMESPACE not from the downward API")
			}
			drain, err := time.ParseDuration(flag(t, cmd, "drain-timeout"))
			if err != nil || tmpl.Spec.TerminationGracePeriodSeconds == nil ||
				time.Duration(*tmpl.Spec.TerminationGracePeriodSeconds)*time.Second <= drain {
				t.Errorf("terminationGracePeriodSeconds must outlast --drain-timeout %v", drain)
			}
			if ctr.ReadinessProbe == nil {
				t.Error("no readiness probe")
			}

			// The worker pods must be what the frontend's kube backend
			// selects, behind the Service whose slices it reads.
			workers := m.deployments["tandem-worker"].Spec.Template
			wsel, err := kubeapi.ParseSelector(flag(t, cmd, "kube-selector"))
			if err != nil || !wsel.Matches(workers.Metadata.Labels) {
				t.Errorf("--kube-selector %q does not select the worker pods %v (%v)", flag(t, cmd, "kube-selector"), workers.Metadata.Labels, err)
			}
			if wsel.Matches(m.deployments["tandem-frontend"].Spec.Template.Metadata.Labels) {
				t.Error("--kube-selector also selects the frontend pods")
			}
			svc := m.services[flag(t, cmd, "kube-service")]
			if svc == nil {
				t.Fatalf("--kube-service %q names no Service", flag(t, cmd, "kube-service"))
			}
			if !matches(svc.Spec.Selector, workers.Metadata.Labels) || svc.Spec.ClusterIP != "None" {
				t.Errorf("Service %s must be headless and select the worker pods", svc.Metadata.Name)
			}

			// mTLS from mounted Secrets (docs/security.md).
			for _, fl := range []string{"mtls-ca", "mtls-cert", "mtls-key"} {
				if !secretMounted(tmpl.Spec, ctr, flag(t, cmd, fl)) {
					t.Errorf("--%s %q is not a file of a mounted Secret", fl, flag(t, cmd, fl))
				}
			}
			if c.subcommand == "frontend" && !secretMounted(tmpl.Spec, ctr, flag(t, cmd, "api-key-file")) {
				t.Errorf("--api-key-file %q is not a file of a mounted Secret", flag(t, cmd, "api-key-file"))
			}

			if c.subcommand == "worker" {
				if !fieldRefEnv(ctr, "POD_NAME", "metadata.name") || !fieldRefEnv(ctr, "POD_IP", "status.podIP") {
					t.Error("POD_NAME (the worker id) and POD_IP (its advertised host) must come from the downward API")
				}
				if flag(t, cmd, "id") != "" {
					t.Error("--id must be left to POD_NAME")
				}
				// Readiness is grpc.health.v1 on the request plane, which
				// turns NOT_SERVING when the worker starts draining.
				rp := portOf(flag(t, cmd, "rp-addr"))
				if ctr.ReadinessProbe == nil || ctr.ReadinessProbe.GRPC == nil || strconv.Itoa(int(ctr.ReadinessProbe.GRPC.Port)) != rp {
					t.Errorf("the readiness probe must be a gRPC health check of the request-plane port %s", rp)
				}
			} else {
				front := m.services["tandem-frontend"]
				if front == nil || !matches(front.Spec.Selector, tmpl.Metadata.Labels) {
					t.Error("no Service in front of the frontend")
				}
				if ctr.ReadinessProbe.HTTPGet == nil || ctr.ReadinessProbe.HTTPGet.Path != "/health" {
					t.Error("the frontend's readiness must be /health (503 while draining or without workers)")
				}
			}
		})
	}
}

// secretMounted reports whether path lies in a volume mount of ctr whose
// volume is a Secret.
func secretMounted(spec podSpec, ctr container, path string) bool {
	if path == "" {
		return false
	}
	for _, vm := range ctr.VolumeMounts {
		if !strings.HasPrefix(path, strings.TrimSuffix(vm.MountPath, "/")+"/") {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name == vm.Name && v.Secret != nil && v.Secret.SecretName != "" {
				return true
			}
		}
	}
	return false
}

// TestKubernetesManifestsStrict has the real API server decode every
// document of deploy/kubernetes strictly (a dry-run create with
// fieldValidation=Strict): a misspelled or misplaced field fails here
// instead of being silently dropped by the API server.
func TestKubernetesManifestsStrict(t *testing.T) {
	m := loadManifests(t)
	s := kubetest.Start(t, nil, "tandem")
	if n := len(s.DryRunIn(t, "tandem", m.files...)); n == 0 {
		t.Fatal("no documents validated")
	}
}
