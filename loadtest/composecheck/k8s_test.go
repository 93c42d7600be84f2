package composecheck

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

var k8sDir = filepath.Join(deployDir, "k8s")

// kustomizations are the folders kubectl apply -k is meant for: the base and
// every overlay.
func kustomizations(t testing.TB) []string {
	t.Helper()
	dirs := []string{filepath.Join(k8sDir, "base")}
	overlays, err := filepath.Glob(filepath.Join(k8sDir, "overlays", "*", "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range overlays {
		dirs = append(dirs, filepath.Dir(o))
	}
	return dirs
}

// k8sFiles is deploy/k8s and dir (absolute paths) in memory, at their
// paths on disk, with the base's secrets.env as `make k8s-secrets` writes it
// (the file is git-ignored; any one on disk is left out).
func k8sFiles(t testing.TB, dir string) filesys.FileSystem {
	t.Helper()
	fs := filesys.MakeFsInMemory()
	k8s, err := filepath.Abs(k8sDir)
	if err != nil {
		t.Fatal(err)
	}
	secretsFile := filepath.Join(k8s, "base", "secrets.env")
	for _, top := range []string{k8s, dir} {
		err := filepath.WalkDir(top, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || path == secretsFile {
				return err
			}
			b, err := os.ReadFile(path) //nolint:gosec // G304: the repository's own files and the test's fixtures
			if err != nil {
				return err
			}
			return fs.WriteFile(path, b)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	secrets := "STOCK_MYSQL_DSN=stock:" + randomSecret(t)[:32] + "@tcp(mysql:3306)/stock?parseTime=true\n"
	for _, k := range []string{"STOCK_JWT_SECRET", "STOCK_ADMIN_TOKEN", "STOCK_PAYMENT_TOKEN"} {
		secrets += k + "=" + randomSecret(t) + "\n"
	}
	if err := fs.WriteFile(secretsFile, []byte(secrets)); err != nil {
		t.Fatal(err)
	}
	return fs
}

// k8sSecretsFile is the base's generated, git-ignored secrets.
var k8sSecretsFile = filepath.Join(k8sDir, "base", "secrets.env")

// manifests is one kustomization built and decoded.
type manifests struct {
	deployment *appsv1.Deployment
	job        *batchv1.Job
	service    *corev1.Service
	pdb        *policyv1.PodDisruptionBudget
	hpa        *autoscalingv2.HorizontalPodAutoscaler
	configMaps map[string]*corev1.ConfigMap
	secrets    map[string]*corev1.Secret
}

// build runs kustomize's own build on dir and decodes every object strictly
// into its Kubernetes API type: an unknown or misspelt field, a field given
// twice, a wrong type or a kind not listed here is an error.
func build(t testing.TB, dir string) manifests {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	rm, err := k.Run(k8sFiles(t, abs), abs)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		appsv1.AddToScheme, batchv1.AddToScheme, corev1.AddToScheme, policyv1.AddToScheme, autoscalingv2.AddToScheme,
	} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	dec := json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme, scheme, json.SerializerOptions{Yaml: true, Strict: true})
	m := manifests{configMaps: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{}}
	for _, r := range rm.Resources() {
		y, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		obj, gvk, err := dec.Decode(y, nil, nil)
		if err != nil {
			t.Errorf("%s: %s %s: %v", dir, r.GetKind(), r.GetName(), err)
			continue
		}
		switch o := obj.(type) {
		case *appsv1.Deployment:
			m.deployment = o
		case *batchv1.Job:
			m.job = o
		case *corev1.Service:
			m.service = o
		case *policyv1.PodDisruptionBudget:
			m.pdb = o
		case *autoscalingv2.HorizontalPodAutoscaler:
			m.hpa = o
		case *corev1.ConfigMap:
			m.configMaps[o.Name] = o
		case *corev1.Secret:
			m.secrets[o.Name] = o
		default:
			t.Errorf("%s: unexpected %s %s", dir, gvk, r.GetName())
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	if m.deployment == nil || m.job == nil || m.service == nil || m.pdb == nil || m.hpa == nil {
		t.Fatalf("%s: want a Deployment, a Job, a Service, a PodDisruptionBudget and a HorizontalPodAutoscaler; got %+v", dir, m)
	}
	return m
}

// env resolves the environment a container gets from its envFrom sources
// and env (plain values only), and fails on a reference that the build does
// not contain.
func (m manifests) env(t testing.TB, c corev1.Container) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, ef := range c.EnvFrom {
		switch {
		case ef.ConfigMapRef != nil:
			cm, ok := m.configMaps[ef.ConfigMapRef.Name]
			if !ok {
				t.Fatalf("container %s: ConfigMap %q is not in the build; have %v", c.Name, ef.ConfigMapRef.Name, keys(m.configMaps))
			}
			for k, v := range cm.Data {
				out[k] = v
			}
		case ef.SecretRef != nil:
			s, ok := m.secrets[ef.SecretRef.Name]
			if !ok {
				t.Fatalf("container %s: Secret %q is not in the build; have %v", c.Name, ef.SecretRef.Name, keys(m.secrets))
			}
			for k, v := range s.Data {
				out[k] = string(v)
			}
			for k, v := range s.StringData {
				out[k] = v
			}
		}
	}
	for _, e := range c.Env {
		out[e.Name] = e.Value
	}
	return out
}

// stockVariables are the settings the server reads (docs/config.md, generated
// from app.Config), so a misspelt variable in a ConfigMap cannot pass unnoticed.
func stockVariables(t testing.TB) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "docs", "config.md"))
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]bool{}
	for _, m := range regexp.MustCompile("`(STOCK_[A-Z0-9_]+)`").FindAllStringSubmatch(string(b), -1) {
		vars[m[1]] = true
	}
	if len(vars) < 10 {
		t.Fatalf("found only %d STOCK_ variables in docs/config.md", len(vars))
	}
	return vars
}

func TestKubernetesManifests(t *testing.T) {
	known := stockVariables(t)
	for _, dir := range kustomizations(t) {
		rel, _ := filepath.Rel(k8sDir, dir)
		t.Run(rel, func(t *testing.T) {
			m := build(t, dir)
			checkServer(t, m, known)
			checkMigrate(t, m)
			checkSelectors(t, m)
		})
	}
}

func container(t testing.TB, spec corev1.PodSpec, kind string) corev1.Container {
	t.Helper()
	if len(spec.Containers) != 1 {
		t.Fatalf("%s: %d containers; want one", kind, len(spec.Containers))
	}
	return spec.Containers[0]
}

func checkServer(t *testing.T, m manifests, known map[string]bool) {
	d := m.deployment
	spec := d.Spec.Template.Spec
	c := container(t, spec, "Deployment")
	if len(c.Args) > 0 && !slices.Equal(c.Args, []string{"serve"}) {
		t.Errorf("Deployment args %q; want serve", c.Args)
	}
	env := m.env(t, c)
	for k := range env {
		if strings.HasPrefix(k, "STOCK_") && !known[k] {
			t.Errorf("Deployment sets %s, which cmd/stock does not read", k)
		}
	}
	for _, want := range []string{"STOCK_MYSQL_DSN", "STOCK_REDIS_ADDRS", "STOCK_HTTP_ADDR", "STOCK_METRICS_ADDR"} {
		if env[want] == "" {
			t.Errorf("Deployment: %s not set", want)
		}
	}
	if env["STOCK_JWT_SECRET"] == "" && env["STOCK_JWT_PUBLIC_KEY_FILE"] == "" {
		t.Errorf("Deployment: neither STOCK_JWT_SECRET nor STOCK_JWT_PUBLIC_KEY_FILE; serve refuses to start")
	}

	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	wantPort := func(what, addr string) int32 {
		_, port, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatalf("Deployment %s %q: %v", what, addr, err)
		}
		for _, p := range c.Ports {
			if strconv.Itoa(int(p.ContainerPort)) == port {
				return p.ContainerPort
			}
		}
		t.Fatalf("Deployment: no container port for %s %s; ports %v", what, addr, ports)
		return 0
	}
	httpPort := wantPort("STOCK_HTTP_ADDR", env["STOCK_HTTP_ADDR"])
	metricsPort := wantPort("STOCK_METRICS_ADDR", env["STOCK_METRICS_ADDR"])
	if got := d.Spec.Template.Annotations["prometheus.io/port"]; got != "" && got != strconv.Itoa(int(metricsPort)) {
		t.Errorf("prometheus.io/port annotation %s; the metrics listen on %d", got, metricsPort)
	}

	probe := func(name string, p *corev1.Probe, path string) {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("Deployment: %s probe %+v; want an HTTP GET of %s", name, p, path)
			return
		}
		if p.HTTPGet.Path != path {
			t.Errorf("Deployment: %s probe path %s; want %s", name, p.HTTPGet.Path, path)
		}
		port := p.HTTPGet.Port
		if port.Type == intstr.String {
			port = intstr.FromInt32(ports[port.StrVal])
		}
		if port.IntVal != httpPort {
			t.Errorf("Deployment: %s probe on port %v; want the HTTP port %d", name, p.HTTPGet.Port, httpPort)
		}
	}
	probe("readiness", c.ReadinessProbe, "/readyz")
	probe("liveness", c.LivenessProbe, "/healthz")

	// SIGKILL comes terminationGracePeriodSeconds after the pod starts
	// terminating, preStop included: it must cover the preStop pause and
	// the service's own bound on finishing requests.
	shutdown, err := time.ParseDuration(env["STOCK_SHUTDOWN_TIMEOUT"])
	if err != nil {
		t.Fatalf("Deployment: STOCK_SHUTDOWN_TIMEOUT %q: %v; want it set explicitly", env["STOCK_SHUTDOWN_TIMEOUT"], err)
	}
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil {
		t.Fatalf("Deployment: no preStop; the pod would stop accepting while still in the Service's endpoints")
	}
	var pause time.Duration
	switch ps := c.Lifecycle.PreStop; {
	case ps.Sleep != nil:
		pause = time.Duration(ps.Sleep.Seconds) * time.Second
	default:
		t.Fatalf("Deployment: preStop %+v; want a sleep", ps)
	}
	if pause <= 0 {
		t.Errorf("Deployment: preStop sleeps %s; want a pause for the endpoints to catch up", pause)
	}
	if spec.TerminationGracePeriodSeconds == nil {
		t.Fatalf("Deployment: terminationGracePeriodSeconds not set")
	}
	grace := time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
	if grace < pause+shutdown+2*time.Second {
		t.Errorf("Deployment: terminationGracePeriodSeconds %s; want at least preStop %s + STOCK_SHUTDOWN_TIMEOUT %s + 2s", grace, pause, shutdown)
	}
	if d.Spec.Replicas != nil {
		t.Errorf("Deployment sets replicas %d; the HPA owns the count and an apply would reset it", *d.Spec.Replicas)
	}
	if c.Resources.Limits.Memory().IsZero() {
		t.Errorf("Deployment: no memory limit (GOMEMLIMIT is set from it)")
	}
}

func checkMigrate(t *testing.T, m manifests) {
	j := m.job
	spec := j.Spec.Template.Spec
	c := container(t, spec, "Job")
	if !slices.Equal(c.Args, []string{"migrate"}) {
		t.Errorf("Job args %q; want migrate", c.Args)
	}
	server := container(t, m.deployment.Spec.Template.Spec, "Deployment")
	if c.Image != server.Image {
		t.Errorf("Job image %s, Deployment image %s; want the same build", c.Image, server.Image)
	}
	if got, want := m.env(t, c)["STOCK_MYSQL_DSN"], m.env(t, server)["STOCK_MYSQL_DSN"]; got == "" || got != want {
		t.Errorf("Job STOCK_MYSQL_DSN %q; want the server's %q", got, want)
	}
	if r := spec.RestartPolicy; r != corev1.RestartPolicyNever && r != corev1.RestartPolicyOnFailure {
		t.Errorf("Job restartPolicy %q; want Never or OnFailure", r)
	}
	if c.ReadinessProbe != nil || c.LivenessProbe != nil {
		t.Errorf("Job has probes; migrate serves no HTTP")
	}
}

func selects(t *testing.T, what string, sel *metav1.LabelSelector, pod map[string]string) {
	t.Helper()
	if sel == nil || len(sel.MatchLabels) == 0 {
		t.Errorf("%s: no matchLabels selector", what)
		return
	}
	for k, v := range sel.MatchLabels {
		if pod[k] != v {
			t.Errorf("%s selects %s=%s; the server pods are labelled %v", what, k, v, pod)
		}
	}
}

func checkSelectors(t *testing.T, m manifests) {
	d := m.deployment
	pod := d.Spec.Template.Labels
	selects(t, "Deployment", d.Spec.Selector, pod)
	selects(t, "PodDisruptionBudget", m.pdb.Spec.Selector, pod)
	for k, v := range m.service.Spec.Selector {
		if pod[k] != v {
			t.Errorf("Service selects %s=%s; the server pods are labelled %v", k, v, pod)
		}
	}
	// The migrate pods must not count as servers.
	if jp := m.job.Spec.Template.Labels; m.service.Spec.Selector != nil {
		all := true
		for k, v := range m.service.Spec.Selector {
			all = all && jp[k] == v
		}
		if all {
			t.Errorf("the Service selects the migrate Job's pods too (%v)", jp)
		}
	}
	c := container(t, d.Spec.Template.Spec, "Deployment")
	for _, sp := range m.service.Spec.Ports {
		if sp.TargetPort.Type == intstr.String && !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == sp.TargetPort.StrVal }) {
			t.Errorf("Service port %s targets %q, which the container does not name", sp.Name, sp.TargetPort.StrVal)
		}
	}
	ref := m.hpa.Spec.ScaleTargetRef
	if ref.Kind != "Deployment" || ref.Name != d.Name || ref.APIVersion != "apps/v1" {
		t.Errorf("HPA scales %+v; want apps/v1 Deployment %s", ref, d.Name)
	}
	if m.hpa.Spec.MinReplicas == nil || *m.hpa.Spec.MinReplicas < 2 {
		t.Errorf("HPA minReplicas %v; want at least 2, or the PodDisruptionBudget blocks every drain", m.hpa.Spec.MinReplicas)
	}
	if m.pdb.Spec.MaxUnavailable == nil && m.pdb.Spec.MinAvailable == nil {
		t.Errorf("PodDisruptionBudget sets neither maxUnavailable nor minAvailable")
	}
}

// The strict decoding is what catches a misspelt field; make sure it does.
func TestStrictDecodingCatchesUnknownFields(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"kustomization.yaml": "resources: [deployment.yaml]\n",
		"deployment.yaml": `apiVersion: apps/v1
kind: Deployment
metadata: {name: x}
spec:
  selector: {matchLabels: {a: b}}
  template:
    metadata: {labels: {a: b}}
    spec:
      terminationGracePeriodSecond: 30
      containers: [{name: x, image: x}]
`,
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil { //nolint:gosec // G306: a fixture in the test's own temp dir
			t.Fatal(err)
		}
	}
	ft := &fakeT{TB: t}
	func() {
		defer func() { _ = recover() }()
		build(ft, dir)
	}()
	if !ft.failed || !strings.Contains(ft.msg, "terminationGracePeriodSecond") {
		t.Errorf("build of a Deployment with a misspelt field: failed %v, %q; want an error naming the field", ft.failed, ft.msg)
	}
}

// fakeT records failures instead of failing the test; FailNow and Fatal
// panic to stop the helper, as t.FailNow stops the goroutine.
type fakeT struct {
	testing.TB
	failed bool
	msg    string
}

func (f *fakeT) Helper()                   {}
func (f *fakeT) Failed() bool              { return f.failed }
func (f *fakeT) FailNow()                  { f.failed = true; panic(f) }
func (f *fakeT) Errorf(s string, a ...any) { f.failed = true; f.msg += fmt.Sprintf(s, a...) }
func (f *fakeT) Fatalf(s string, a ...any) { f.Errorf(s, a...); f.FailNow() }
func (f *fakeT) Fatal(a ...any)            { f.Errorf("%v", a...); f.FailNow() }

// The compose file, too, sets only variables the service reads.
func TestComposeSetsKnownVariables(t *testing.T) {
	known := stockVariables(t)
	p := loadProject(t, nil)
	for _, name := range append([]string{"migrate"}, replicas...) {
		for k := range service(t, p, name).Environment {
			if strings.HasPrefix(k, "STOCK_") && !known[k] {
				t.Errorf("%s sets %s, which cmd/stock does not read", name, k)
			}
		}
	}
}
