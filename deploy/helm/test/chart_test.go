// Package test renders the llmgate Helm chart with helm and decodes every
// object strictly into the Kubernetes API types, so that a misspelt or
// misplaced field fails here instead of being dropped by the API server
// (kubectl apply warns; Helm says nothing). It is its own Go module so that
// the gateway's module does not depend on the Kubernetes API packages.
//
//	HELM=/path/to/helm go test ./...   (from deploy/helm/test; helm on PATH also works)
package test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"

	"llmgate/internal/config"
)

const chart = "../llmgate"

func helmBin(t *testing.T) string {
	t.Helper()
	if h := os.Getenv("HELM"); h != "" {
		return h
	}
	if h, err := exec.LookPath("helm"); err == nil {
		return h
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("CI=true but helm is not found: set HELM or put helm on PATH (.ci/run builds it from the Go module proxy)")
	}
	t.Skip("!!! SKIPPED: helm is not installed; set HELM=/path/to/helm (go install helm.sh/helm/v3/cmd/helm@v3.22.0)")
	return ""
}

// render runs helm template with values and returns its objects, or the
// error helm printed.
func render(t *testing.T, values string, set ...string) ([]object, error) {
	t.Helper()
	dir := t.TempDir()
	vf := filepath.Join(dir, "values.yaml")
	if err := os.WriteFile(vf, []byte(values), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"template", "gw", chart, "--namespace", "ai", "--kube-version", "1.31.0", "-f", vf}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	cmd := exec.Command(helmBin(t), args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%v: %s", err, errb.String())
	}
	return split(t, out.Bytes()), nil
}

// object is one rendered manifest: its kind and its JSON.
type object struct {
	APIVersion, Kind, Name string
	JSON                   []byte
}

func split(t *testing.T, manifests []byte) []object {
	t.Helper()
	var objs []object
	for _, doc := range bytes.Split(manifests, []byte("\n---")) {
		js, err := yaml.YAMLToJSON(doc)
		if err != nil {
			t.Fatalf("rendered YAML does not parse: %v\n%s", err, doc)
		}
		if string(js) == "null" {
			continue
		}
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(js, &head); err != nil {
			t.Fatal(err)
		}
		objs = append(objs, object{APIVersion: head.APIVersion, Kind: head.Kind, Name: head.Metadata.Name, JSON: js})
	}
	return objs
}

// strict decodes an object into its API type, refusing unknown fields.
func strict(t *testing.T, o object) any {
	t.Helper()
	var v any
	switch o.APIVersion + " " + o.Kind {
	case "apps/v1 StatefulSet":
		v = &appsv1.StatefulSet{}
	case "apps/v1 Deployment":
		v = &appsv1.Deployment{}
	case "v1 Service":
		v = &corev1.Service{}
	case "v1 ConfigMap":
		v = &corev1.ConfigMap{}
	case "v1 Secret":
		v = &corev1.Secret{}
	case "v1 ServiceAccount":
		v = &corev1.ServiceAccount{}
	case "policy/v1 PodDisruptionBudget":
		v = &policyv1.PodDisruptionBudget{}
	case "autoscaling/v2 HorizontalPodAutoscaler":
		v = &autoscalingv2.HorizontalPodAutoscaler{}
	case "monitoring.coreos.com/v1 ServiceMonitor":
		v = &monitoringv1.ServiceMonitor{}
	default:
		t.Fatalf("%s %s %q: no API type to check it against; add one to this test", o.APIVersion, o.Kind, o.Name)
	}
	dec := json.NewDecoder(bytes.NewReader(o.JSON))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s %q does not decode strictly into %T: %v\n%s", o.Kind, o.Name, v, err, o.JSON)
	}
	return v
}

const baseValues = `secret:
  masterKey: sk-lg-test-master
  databaseURL: postgres://llmgate:secret@pg.ai.svc:5432/llmgate
  redisURL: redis://redis.ai.svc:6379/0
`

// TestChart_EveryObjectDecodesStrictly renders the chart with the default
// values (plus the secrets it requires) and with replicas, HPA,
// ServiceMonitor, the Deployment workload and the vLLM pool on.
func TestChart_EveryObjectDecodesStrictly(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values string
		kinds  []string // kinds that must be there
	}{
		{"defaults", baseValues, []string{"StatefulSet", "Service", "ConfigMap", "Secret", "ServiceAccount", "PodDisruptionBudget"}},
		{"replicas with HPA and ServiceMonitor", baseValues + `replicaCount: 4
autoscaling: {enabled: true, minReplicas: 3, maxReplicas: 12}
metrics: {serviceMonitor: {enabled: true, labels: {release: prom}}}
secret:
  masterKey: sk-lg-test-master
  databaseURL: postgres://llmgate:secret@pg.ai.svc:5432/llmgate
  redisURL: redis://redis.ai.svc:6379/0
  metricsKey: scrape-me
`, []string{"StatefulSet", "HorizontalPodAutoscaler", "ServiceMonitor"}},
		{"Deployment workload", baseValues + "workload: Deployment\n", []string{"Deployment"}},
		{"in-cluster vLLM pool", baseValues + "vllmPool: {enabled: true, replicas: 3}\n", []string{"Deployment", "StatefulSet"}},
		{"vLLM pool found by DNS", baseValues + `vllmPool: {enabled: true, replicas: 3}
config:
  backends:
    vllm: {url: "http://vllm-pool:8000/v1", engine: vllm, discovery: dns, discovery_interval: 5s}
  models:
    qwen2.5-7b-instruct: {backend: vllm}
`, []string{"Deployment", "StatefulSet"}},
		{"existing secret", "secret: {existingSecret: llmgate-secrets}\n", []string{"StatefulSet"}},
		{"one replica on SQLite", "replicaCount: 1\nsecret: {masterKey: sk-lg-x}\n", []string{"StatefulSet"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := render(t, tc.values)
			if err != nil {
				t.Fatal(err)
			}
			seen := map[string]bool{}
			for _, o := range objs {
				v := strict(t, o)
				seen[o.Kind] = true
				switch x := v.(type) {
				case *appsv1.StatefulSet:
					if x.Name == "gw-llmgate" {
						checkPod(t, &x.Spec.Template.Spec)
						if len(x.Spec.VolumeClaimTemplates) != 1 || x.Spec.VolumeClaimTemplates[0].Name != "data" {
							t.Errorf("the StatefulSet has no spool volume claim: %+v", x.Spec.VolumeClaimTemplates)
						}
					}
				case *appsv1.Deployment:
					if x.Name == "gw-llmgate" {
						checkPod(t, &x.Spec.Template.Spec)
					}
				case *corev1.ConfigMap:
					checkConfig(t, x.Data["llmgate.yaml"])
				}
			}
			for _, k := range tc.kinds {
				if !seen[k] {
					t.Errorf("no %s rendered", k)
				}
			}
		})
	}
}

// checkPod checks what the gateway's pod must have: probes on the right
// paths, a preStop that outlasts endpoint removal, a grace period that
// covers the shutdown timeout, a non-root read-only container with
// resources, and the master key from a secret.
func checkPod(t *testing.T, p *corev1.PodSpec) {
	t.Helper()
	if len(p.Containers) != 1 {
		t.Fatalf("%d containers", len(p.Containers))
	}
	c := p.Containers[0]
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Errorf("readiness probe: %+v", c.ReadinessProbe)
	}
	if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("liveness probe: %+v", c.LivenessProbe)
	}
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil || c.Lifecycle.PreStop.Sleep.Seconds < 1 {
		t.Errorf("preStop: %+v", c.Lifecycle)
	}
	if g := p.TerminationGracePeriodSeconds; g == nil || *g != 5+60+10 {
		t.Errorf("terminationGracePeriodSeconds %v, want preStop 5 + shutdown_timeout 60 + margin 10", g)
	}
	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("container security context: %+v", sc)
	}
	if ps := p.SecurityContext; ps == nil || ps.RunAsNonRoot == nil || !*ps.RunAsNonRoot {
		t.Errorf("pod security context: %+v", ps)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources: %+v", c.Resources)
	}
	master := false
	for _, e := range c.Env {
		if e.Name == "LLMGATE_MASTER_KEY" {
			master = e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.Value == ""
		}
	}
	if !master {
		t.Error("LLMGATE_MASTER_KEY does not come from a secret")
	}
}

// checkConfig loads the rendered llmgate.yaml with llmgate's own loader,
// as the pod will.
func checkConfig(t *testing.T, src string) {
	t.Helper()
	env := map[string]string{"LLMGATE_DATABASE_URL": "postgres://u:p@pg:5432/db", "LLMGATE_REDIS_URL": "redis://redis:6379/0"}
	cfg, err := config.LoadWithEnv(strings.NewReader(src), "llmgate.yaml", func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatalf("the rendered llmgate.yaml does not load: %v\n%s", err, src)
	}
	if cfg.SpoolDir != "/data/spool" {
		t.Errorf("spool_dir %q, want /data/spool (the pod's volume)", cfg.SpoolDir)
	}
}

// TestChart_RefusesValuesThatWouldLoseData: several replicas without a
// shared database or Redis, no master key, an unknown workload or value.
func TestChart_RefusesValuesThatWouldLoseData(t *testing.T) {
	for _, tc := range []struct {
		name, values, want string
	}{
		{"replicas on SQLite", "replicaCount: 3\nsecret: {masterKey: k, redisURL: 'redis://r:6379'}\n", "3 replicas need a shared PostgreSQL database"},
		{"replicas without Redis", "replicaCount: 2\nsecret: {masterKey: k, databaseURL: 'postgres://u@pg/db'}\n", "2 replicas need a shared Redis"},
		{"HPA on SQLite", "replicaCount: 1\nautoscaling: {enabled: true, maxReplicas: 5}\nsecret: {masterKey: k}\n", "5 replicas need a shared PostgreSQL"},
		{"no master key", "replicaCount: 1\n", "set secret.masterKey"},
		{"a misspelt value", baseValues + "replicas: 3\n", "replicas"},
		{"a bad workload", baseValues + "workload: DaemonSet\n", "workload"},
		{"Deployment on SQLite", "replicaCount: 1\nworkload: Deployment\nsecret: {masterKey: k}\n", "keeps nothing across pod restarts"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := render(t, tc.values)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v; want one containing %q", err, tc.want)
			}
		})
	}
}
