// Package validate checks the manifests in deploy/kubernetes against the
// Kubernetes API: every document is decoded strictly (unknown or duplicate
// fields and wrong types are errors) into its k8s.io/api Go type, the
// types the API server itself decodes into, and then the properties the
// deployment relies on are checked across documents (selectors that select,
// ports that exist, a grace period that covers the drain). It is its own Go
// module so that draftd's module does not depend on k8s.io/api. Run:
//
//	cd deploy/kubernetes/validate && go test ./...
//
// It does not check what only a cluster can (admission, quotas, images).
package validate

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// objects is what the manifests hold, by kind.
type objects struct {
	deployments []*appsv1.Deployment
	services    []*corev1.Service
	pdbs        []*policyv1.PodDisruptionBudget
}

// decode reads every YAML document of the files into its Go type, strictly.
func decode(t *testing.T, files []string) objects {
	t.Helper()
	var o objects
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range splitDocs(data) {
			where := fmt.Sprintf("%s document %d", filepath.Base(f), i+1)
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal(doc, &tm); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			var obj any
			switch tm.APIVersion + " " + tm.Kind {
			case "apps/v1 Deployment":
				d := &appsv1.Deployment{}
				o.deployments, obj = append(o.deployments, d), d
			case "v1 Service":
				s := &corev1.Service{}
				o.services, obj = append(o.services, s), s
			case "policy/v1 PodDisruptionBudget":
				p := &policyv1.PodDisruptionBudget{}
				o.pdbs, obj = append(o.pdbs, p), p
			default:
				t.Fatalf("%s: %s %s: not a kind this check knows", where, tm.APIVersion, tm.Kind)
			}
			if err := yaml.UnmarshalStrict(doc, obj); err != nil {
				t.Errorf("%s (%s): %v", where, tm.Kind, err)
			}
		}
	}
	return o
}

// splitDocs splits a YAML stream at its "---" lines and drops documents
// that are only comments.
func splitDocs(data []byte) [][]byte {
	var docs [][]byte
	for _, d := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(data), -1) {
		body := false
		for _, line := range strings.Split(d, "\n") {
			if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "#") {
				body = true
				break
			}
		}
		if body {
			docs = append(docs, []byte(d))
		}
	}
	return docs
}

// TestManifests checks draftd.yaml + proxy.yaml (what deploy/kustomization
// applies) and draftd-model-image.yaml (the alternative drafter Deployment)
// with the same Services and budget.
func TestManifests(t *testing.T) {
	sets := map[string][]string{
		"init-container": {"../draftd.yaml", "../proxy.yaml"},
		"model-image":    {"../draftd-model-image.yaml", "../draftd.yaml"},
	}
	for name, files := range sets {
		t.Run(name, func(t *testing.T) {
			o := decode(t, files)
			if name == "model-image" {
				// draftd.yaml's Deployment is the one the alternative replaces.
				o.deployments = o.deployments[:1]
				checkImageVolume(t, o.deployments[0])
			}
			check(t, o)
		})
	}
}

func check(t *testing.T, o objects) {
	var drafter *appsv1.Deployment
	for _, d := range o.deployments {
		spec := d.Spec.Template.Spec
		if sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector); err != nil || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			t.Errorf("Deployment %s: selector %v does not select its own pod template (%v)", d.Name, d.Spec.Selector, err)
		}
		for _, c := range append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...) {
			checkResources(t, d.Name, c)
		}
		checkPrometheus(t, d)
		for _, c := range spec.Containers {
			if len(c.Args) > 0 && c.Args[0] == "serve" {
				drafter = d
				checkDrafter(t, d, c)
			}
		}
	}
	if drafter == nil {
		t.Fatal("no Deployment runs `draftd serve`")
	}
	for _, s := range o.services {
		checkService(t, s, o.deployments)
	}
	if len(o.pdbs) == 0 {
		t.Error("no PodDisruptionBudget")
	}
	for _, p := range o.pdbs {
		sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
		if err != nil || !sel.Matches(labels.Set(drafter.Spec.Template.Labels)) {
			t.Errorf("PodDisruptionBudget %s does not select the drafter pods (%v)", p.Name, err)
		}
	}
}

// checkResources: every container requests CPU and memory, and a memory
// limit is not below the request.
func checkResources(t *testing.T, deploy string, c corev1.Container) {
	req, lim := c.Resources.Requests, c.Resources.Limits
	cpu, mem := req[corev1.ResourceCPU], req[corev1.ResourceMemory]
	if cpu.IsZero() || mem.IsZero() {
		t.Errorf("%s/%s: requests cpu %q memory %q; want both", deploy, c.Name, cpu.String(), mem.String())
	}
	if l, ok := lim[corev1.ResourceMemory]; ok && l.Cmp(mem) < 0 {
		t.Errorf("%s/%s: memory limit %s below the request %s", deploy, c.Name, l.String(), mem.String())
	}
}

// checkPrometheus: the scrape annotations name a port the pod listens on.
func checkPrometheus(t *testing.T, d *appsv1.Deployment) {
	a := d.Spec.Template.Annotations
	if a["prometheus.io/scrape"] != "true" {
		t.Errorf("Deployment %s: no prometheus.io/scrape annotation", d.Name)
		return
	}
	for _, c := range d.Spec.Template.Spec.Containers {
		for _, p := range c.Ports {
			if fmt.Sprint(p.ContainerPort) == a["prometheus.io/port"] {
				return
			}
		}
	}
	t.Errorf("Deployment %s: prometheus.io/port %q is no container port", d.Name, a["prometheus.io/port"])
}

// checkDrafter checks the `draftd serve` container against what draftd
// does: /health probes, a model file on a mounted volume, and a grace period
// that covers the preStop pause plus --shutdown-timeout.
func checkDrafter(t *testing.T, d *appsv1.Deployment, c corev1.Container) {
	flags := map[string]string{}
	for _, a := range c.Args[1:] {
		k, v, ok := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !ok {
			t.Fatalf("%s: arg %q: write flags as --name=value so this check can read them", c.Name, a)
		}
		flags[k] = v
	}
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
	}{{"readiness", c.ReadinessProbe}, {"liveness", c.LivenessProbe}, {"startup", c.StartupProbe}} {
		if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != "/health" {
			t.Errorf("%s: %s probe is not GET /health", c.Name, p.name)
		}
	}
	model, ok := flags["model"]
	if !ok {
		t.Errorf("%s: no --model", c.Name)
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		if strings.HasPrefix(model, strings.TrimSuffix(m.MountPath, "/")+"/") {
			mounted = true
		}
	}
	if !mounted {
		t.Errorf("%s: --model %s is on no volume mount", c.Name, model)
	}
	if _, ok := flags["kv-cache-bytes"]; !ok {
		t.Errorf("%s: no --kv-cache-bytes: the default sizes the KV cache from the node's free memory, not the pod's limit", c.Name)
	}
	if !strings.HasSuffix(flags["addr"], ":8080") || strings.HasPrefix(flags["addr"], "127.") {
		t.Errorf("%s: --addr %q; want a non-loopback :8080 (the container port)", c.Name, flags["addr"])
	}
	shutdown := 30 * time.Second // draftd serve's default
	if v, ok := flags["shutdown-timeout"]; ok {
		var err error
		if shutdown, err = time.ParseDuration(v); err != nil {
			t.Fatalf("%s: --shutdown-timeout %q: %v", c.Name, v, err)
		}
	}
	var pause time.Duration
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
		pause = time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	}
	if pause == 0 {
		t.Errorf("%s: no preStop sleep: the pod would stop accepting before the endpoints drop it", c.Name)
	}
	grace := 30 * time.Second
	if g := d.Spec.Template.Spec.TerminationGracePeriodSeconds; g != nil {
		grace = time.Duration(*g) * time.Second
	}
	if grace < pause+shutdown {
		t.Errorf("terminationGracePeriodSeconds %v < preStop %v + --shutdown-timeout %v: in-flight drafts would be killed", grace, pause, shutdown)
	}
	limit := c.Resources.Limits[corev1.ResourceMemory]
	kv := resource.MustParse(flags["kv-cache-bytes"])
	if limit.Cmp(kv) <= 0 {
		t.Errorf("%s: memory limit %s is not above the KV budget %s", c.Name, limit.String(), kv.String())
	}
}

// checkService: the selector selects some Deployment's pods and every
// targetPort is a port of those pods (by name or number).
func checkService(t *testing.T, s *corev1.Service, ds []*appsv1.Deployment) {
	for _, d := range ds {
		if !labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) {
			continue
		}
		for _, sp := range s.Spec.Ports {
			found := false
			for _, c := range d.Spec.Template.Spec.Containers {
				for _, cp := range c.Ports {
					if cp.Name == sp.TargetPort.String() || fmt.Sprint(cp.ContainerPort) == sp.TargetPort.String() {
						found = true
					}
				}
			}
			if !found {
				t.Errorf("Service %s: targetPort %s is no port of Deployment %s", s.Name, sp.TargetPort.String(), d.Name)
			}
		}
		return
	}
	t.Errorf("Service %s: selector %v selects no Deployment's pods", s.Name, s.Spec.Selector)
}

// checkImageVolume: the model-image Deployment mounts an image volume and
// prepares nothing.
func checkImageVolume(t *testing.T, d *appsv1.Deployment) {
	spec := d.Spec.Template.Spec
	if len(spec.InitContainers) != 0 {
		t.Errorf("Deployment %s: the model-image variant runs init containers", d.Name)
	}
	for _, v := range spec.Volumes {
		if v.Name == "models" && v.Image != nil && v.Image.Reference != "" {
			return
		}
	}
	t.Errorf("Deployment %s: no image volume named models", d.Name)
}

// TestKustomization checks that deploy/kustomization.yaml names files that
// exist.
func TestKustomization(t *testing.T) {
	data, err := os.ReadFile("../../kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		APIVersion         string   `json:"apiVersion"`
		Kind               string   `json:"kind"`
		Resources          []string `json:"resources"`
		ConfigMapGenerator []struct {
			Name  string   `json:"name"`
			Files []string `json:"files"`
		} `json:"configMapGenerator"`
	}
	if err := yaml.UnmarshalStrict(data, &k); err != nil {
		t.Fatal(err)
	}
	files := k.Resources
	for _, g := range k.ConfigMapGenerator {
		files = append(files, g.Files...)
	}
	if len(k.Resources) == 0 || len(k.ConfigMapGenerator) == 0 {
		t.Errorf("kustomization: resources %v, generators %v", k.Resources, k.ConfigMapGenerator)
	}
	for _, f := range files {
		if _, err := os.Stat(filepath.Join("../..", f)); err != nil {
			t.Errorf("kustomization names %s: %v", f, err)
		}
	}
	// The proxy mounts the generated ConfigMap by name.
	if !bytes.Contains(mustRead(t, "../proxy.yaml"), []byte("name: "+k.ConfigMapGenerator[0].Name)) {
		t.Errorf("proxy.yaml does not mount the ConfigMap %s", k.ConfigMapGenerator[0].Name)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
