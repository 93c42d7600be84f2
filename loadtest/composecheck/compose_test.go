package composecheck

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"golang.org/x/mod/modfile"
	"golang.org/x/mod/semver"
)

const (
	root        = "../.."
	composeFile = root + "/docker-compose.yml"
)

var replicas = []string{"stock1", "stock2", "stock3"}

// loadProject loads docker-compose.yml the way `docker compose` does (schema
// validation, interpolation, merge keys, profiles), with env as the whole
// environment so the developer's shell cannot change the result.
// The file has no default for a secret: the secrets that `make .env` would
// write are added to env unless it sets them.
func loadProject(t testing.TB, env map[string]string, profiles ...string) *types.Project {
	t.Helper()
	all := map[string]string{}
	for _, k := range composeSecrets {
		all[k] = randomSecret(t)
	}
	maps.Copy(all, env)
	p, err := loadComposeFile(all, profiles...)
	if err != nil {
		t.Fatalf("load %s with profiles %v: %v", composeFile, profiles, err)
	}
	return p
}

// composeSecrets are the variables docker-compose.yml requires.
var composeSecrets = []string{"STOCK_ADMIN_TOKEN", "STOCK_PAYMENT_TOKEN", "STOCK_JWT_SECRET"}

// loadComposeFile loads docker-compose.yml with env as the whole environment.
func loadComposeFile(env map[string]string, profiles ...string) (*types.Project, error) {
	abs, err := filepath.Abs(composeFile)
	if err != nil {
		return nil, err
	}
	details := types.ConfigDetails{
		WorkingDir:  filepath.Dir(abs),
		ConfigFiles: []types.ConfigFile{{Filename: abs}},
		Environment: types.Mapping(env),
	}
	return loader.LoadWithContext(context.Background(), details, loader.WithProfiles(profiles))
}

// randomSecret is a secret as `openssl rand -hex 32` makes one.
func randomSecret(t testing.TB) string {
	t.Helper()
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

func service(t testing.TB, p *types.Project, name string) types.ServiceConfig {
	t.Helper()
	s, ok := p.Services[name]
	if !ok {
		t.Fatalf("service %q missing; have %v", name, p.ServiceNames())
	}
	return s
}

func env(t testing.TB, s types.ServiceConfig, key string) string {
	t.Helper()
	v, ok := s.Environment[key]
	if !ok || v == nil {
		t.Fatalf("service %s: environment %s not set", s.Name, key)
	}
	return *v
}

func TestServices(t *testing.T) {
	p := loadProject(t, nil, "loadtest")
	for _, name := range append([]string{"mysql", "redis", "migrate", "nginx", "k6"}, replicas...) {
		service(t, p, name)
	}
	if p.Name != "seckill" {
		t.Errorf("project name = %q; want %q", p.Name, "seckill")
	}
}

func TestK6OnlyInLoadtestProfile(t *testing.T) {
	p := loadProject(t, nil)
	if _, ok := p.Services["k6"]; ok {
		t.Errorf("k6 is active without --profile loadtest; `docker compose up` would start a load test")
	}
	if _, ok := p.DisabledServices["k6"]; !ok {
		t.Errorf("k6 not among the disabled services without its profile: %v", p.ServiceNames())
	}
	for _, name := range append([]string{"mysql", "redis", "migrate", "nginx"}, replicas...) {
		service(t, p, name)
	}
}

// The etcd gate can be chosen in the stack: an etcd member (pinned image)
// under its own profile, and every replica pointed at it.
func TestEtcdProfile(t *testing.T) {
	p := loadProject(t, map[string]string{"STOCK_LOCK_BACKEND": "etcd"}, "etcd")
	e := service(t, p, "etcd")
	if !slices.Equal(e.Profiles, []string{"etcd"}) {
		t.Errorf("etcd profiles = %q; want [etcd]", e.Profiles)
	}
	if _, tag, _ := strings.Cut(e.Image, ":"); !strings.HasPrefix(e.Image, "quay.io/coreos/etcd:v3.") || strings.Count(tag, ".") != 2 {
		t.Errorf("etcd image = %q; want quay.io/coreos/etcd:v3.x.y (pinned)", e.Image)
	}
	if !slices.Contains(e.Command, "--advertise-client-urls=http://etcd:2379") {
		t.Errorf("etcd command %q does not advertise http://etcd:2379", e.Command)
	}
	for _, r := range replicas {
		s := service(t, p, r)
		if got := env(t, s, "STOCK_LOCK_BACKEND"); got != "etcd" {
			t.Errorf("%s: STOCK_LOCK_BACKEND = %q; want etcd when set so", r, got)
		}
		if got := env(t, s, "STOCK_ETCD_ENDPOINTS"); got != "etcd:2379" {
			t.Errorf("%s: STOCK_ETCD_ENDPOINTS = %q; want etcd:2379", r, got)
		}
	}
	if _, ok := loadProject(t, nil).DisabledServices["etcd"]; !ok {
		t.Error("etcd is started without --profile etcd")
	}
}

// The outbox's JetStream sink can be tried in the stack: a NATS server
// with JetStream (pinned image, a store on a volume, a health check that
// waits for JetStream) under its own profile, every replica pointed at it
// when STOCK_EVENTS_NATS_URL says so, and no NATS by default.
func TestEventsProfile(t *testing.T) {
	p := loadProject(t, map[string]string{"STOCK_EVENTS_NATS_URL": "nats://nats:4222"}, "events")
	n := service(t, p, "nats")
	if !slices.Equal(n.Profiles, []string{"events"}) {
		t.Errorf("nats profiles = %q; want [events]", n.Profiles)
	}
	if _, tag, _ := strings.Cut(n.Image, ":"); !strings.HasPrefix(n.Image, "nats:2.") || strings.Count(tag, ".") != 2 {
		t.Errorf("nats image = %q; want nats:2.x.y-... (pinned)", n.Image)
	}
	if !slices.Contains(n.Command, "-js") || !slices.Contains(n.Command, "/data") {
		t.Errorf("nats command %q; want JetStream on (-js) with its store in /data", n.Command)
	}
	if hc := n.HealthCheck; hc == nil || !strings.Contains(strings.Join(hc.Test, " "), "js-enabled-only=true") {
		t.Errorf("nats healthcheck %+v; want one that waits for JetStream", hc)
	}
	if len(n.Volumes) == 0 || n.Volumes[0].Target != "/data" {
		t.Errorf("nats volumes %+v; want the store on a volume at /data", n.Volumes)
	}
	for _, r := range replicas {
		if got := env(t, service(t, p, r), "STOCK_EVENTS_NATS_URL"); got != "nats://nats:4222" {
			t.Errorf("%s: STOCK_EVENTS_NATS_URL = %q; want nats://nats:4222 when set so", r, got)
		}
	}
	def := loadProject(t, nil)
	if _, ok := def.DisabledServices["nats"]; !ok {
		t.Error("nats is started without --profile events")
	}
	if got := env(t, service(t, def, "stock1"), "STOCK_EVENTS_NATS_URL"); got != "" {
		t.Errorf("stock1: STOCK_EVENTS_NATS_URL = %q by default; want empty (the feed only)", got)
	}
}

func TestHealthchecks(t *testing.T) {
	p := loadProject(t, nil, "loadtest")
	for _, tc := range []struct{ service, want string }{
		{"mysql", "mysqladmin ping -h 127.0.0.1"},
		{"redis", "redis-cli ping"},
		{"stock1", "/readyz"},
		{"stock2", "/readyz"},
		{"stock3", "/readyz"},
		{"nginx", "/healthz"},
	} {
		hc := service(t, p, tc.service).HealthCheck
		if hc == nil || hc.Disable || len(hc.Test) < 2 {
			t.Errorf("%s: healthcheck %+v; want a test running %q", tc.service, hc, tc.want)
			continue
		}
		if kind := hc.Test[0]; kind != "CMD" && kind != "CMD-SHELL" {
			t.Errorf("%s: healthcheck test kind %q; want CMD or CMD-SHELL", tc.service, kind)
		}
		if cmd := strings.Join(hc.Test[1:], " "); !strings.Contains(cmd, tc.want) {
			t.Errorf("%s: healthcheck runs %q; want it to contain %q", tc.service, cmd, tc.want)
		}
		if hc.Interval == nil || hc.Retries == nil || *hc.Retries == 0 {
			t.Errorf("%s: healthcheck needs interval and retries, got interval %v retries %v", tc.service, hc.Interval, hc.Retries)
		}
	}
	// The one-shot migrate inherits the replicas' template but must not wait
	// for an HTTP server it never starts.
	if hc := service(t, p, "migrate").HealthCheck; hc != nil && !hc.Disable {
		t.Errorf("migrate: healthcheck %+v; want none or disabled", hc)
	}
}

func wantDep(t *testing.T, p *types.Project, from, to, condition string) {
	t.Helper()
	dep, ok := service(t, p, from).DependsOn[to]
	if !ok {
		t.Errorf("%s does not depend on %s", from, to)
		return
	}
	if dep.Condition != condition {
		t.Errorf("%s depends on %s with condition %q; want %q", from, to, dep.Condition, condition)
	}
}

func TestDependencies(t *testing.T) {
	p := loadProject(t, nil, "loadtest")
	wantDep(t, p, "migrate", "mysql", types.ServiceConditionHealthy)
	for _, r := range replicas {
		wantDep(t, p, r, "migrate", types.ServiceConditionCompletedSuccessfully)
		wantDep(t, p, r, "mysql", types.ServiceConditionHealthy)
		wantDep(t, p, r, "redis", types.ServiceConditionHealthy)
		wantDep(t, p, "nginx", r, types.ServiceConditionHealthy)
	}
	wantDep(t, p, "k6", "nginx", types.ServiceConditionHealthy)
}

func TestStockImage(t *testing.T) {
	p := loadProject(t, nil, "loadtest")
	migrate := service(t, p, "migrate")
	if got, want := []string(migrate.Command), []string{"migrate"}; !slices.Equal(got, want) {
		t.Errorf("migrate command = %q; want %q", got, want)
	}
	if migrate.Restart != "no" && migrate.Restart != "" {
		t.Errorf("migrate restart = %q; a one-shot must not restart", migrate.Restart)
	}
	for _, name := range append([]string{"migrate"}, replicas...) {
		s := service(t, p, name)
		if s.Build == nil {
			t.Errorf("%s: no build section; want the repo Dockerfile", name)
			continue
		}
		rootAbs, _ := filepath.Abs(root)
		if s.Build.Context != rootAbs {
			t.Errorf("%s: build context %q; want the repo root %q", name, s.Build.Context, rootAbs)
		}
		if df := s.Build.Dockerfile; df != "Dockerfile" && df != "" {
			t.Errorf("%s: dockerfile %q; want Dockerfile", name, df)
		}
		if s.Image != migrate.Image {
			t.Errorf("%s: image %q; want the same image as migrate (%q)", name, s.Image, migrate.Image)
		}
		if len(s.Entrypoint) != 0 {
			t.Errorf("%s: entrypoint overridden to %q; want the image's /stock", name, s.Entrypoint)
		}
	}
	for _, r := range replicas {
		if c := service(t, p, r).Command; len(c) != 0 && !slices.Equal([]string(c), []string{"serve"}) {
			t.Errorf("%s: command %q; want the image default (serve)", r, c)
		}
	}
}

func TestStockEnvironment(t *testing.T) {
	p := loadProject(t, nil, "loadtest")
	k6Token := env(t, service(t, p, "k6"), "ADMIN_TOKEN")
	for _, name := range append([]string{"migrate"}, replicas...) {
		s := service(t, p, name)
		dsn := env(t, s, "STOCK_MYSQL_DSN")
		if !strings.Contains(dsn, "@tcp(mysql:3306)/stock?") || !strings.Contains(dsn, "parseTime=true") {
			t.Errorf("%s: STOCK_MYSQL_DSN %q; want @tcp(mysql:3306)/stock?parseTime=true", name, dsn)
		}
		if pw := env(t, service(t, p, "mysql"), "MYSQL_ROOT_PASSWORD"); !strings.HasPrefix(dsn, "root:"+pw+"@") {
			t.Errorf("%s: STOCK_MYSQL_DSN %q does not use mysql's root password %q", name, dsn, pw)
		}
		if got := env(t, s, "STOCK_REDIS_ADDRS"); got != "redis:6379" {
			t.Errorf("%s: STOCK_REDIS_ADDRS %q; want redis:6379", name, got)
		}
		tok := env(t, s, "STOCK_ADMIN_TOKEN")
		if tok == "" || tok != k6Token {
			t.Errorf("%s: STOCK_ADMIN_TOKEN %q; want non-empty and equal to k6's ADMIN_TOKEN %q", name, tok, k6Token)
		}
		if got := env(t, s, "STOCK_STRATEGY"); got != "lock+version" {
			t.Errorf("%s: STOCK_STRATEGY %q by default; want lock+version", name, got)
		}
	}
	if got := env(t, service(t, p, "mysql"), "MYSQL_DATABASE"); got != "stock" {
		t.Errorf("mysql: MYSQL_DATABASE %q; want stock", got)
	}
}

// The token and strategy come from the environment, and one variable feeds
// both the replicas and k6, so they cannot drift apart.
func TestEnvironmentOverrides(t *testing.T) {
	p := loadProject(t, map[string]string{
		"STOCK_ADMIN_TOKEN":   "t0ken",
		"STOCK_STRATEGY":      "conditional",
		"MYSQL_ROOT_PASSWORD": "pw",
	}, "loadtest")
	if got := env(t, service(t, p, "k6"), "ADMIN_TOKEN"); got != "t0ken" {
		t.Errorf("k6 ADMIN_TOKEN = %q; want t0ken", got)
	}
	for _, r := range replicas {
		s := service(t, p, r)
		if got := env(t, s, "STOCK_ADMIN_TOKEN"); got != "t0ken" {
			t.Errorf("%s STOCK_ADMIN_TOKEN = %q; want t0ken", r, got)
		}
		if got := env(t, s, "STOCK_STRATEGY"); got != "conditional" {
			t.Errorf("%s STOCK_STRATEGY = %q; want conditional", r, got)
		}
		if got := env(t, s, "STOCK_MYSQL_DSN"); !strings.HasPrefix(got, "root:pw@") {
			t.Errorf("%s STOCK_MYSQL_DSN = %q; want the overridden password", r, got)
		}
	}
}

// Docker sends SIGKILL stop_grace_period after SIGTERM: past the service's
// own bound on finishing in-flight requests, with room for the closes after.
func TestStopGracePeriod(t *testing.T) {
	p := loadProject(t, nil)
	for _, r := range replicas {
		s := service(t, p, r)
		shutdown, err := time.ParseDuration(env(t, s, "STOCK_SHUTDOWN_TIMEOUT"))
		if err != nil {
			t.Fatalf("%s: STOCK_SHUTDOWN_TIMEOUT: %v", r, err)
		}
		if s.StopGracePeriod == nil {
			t.Errorf("%s: no stop_grace_period; compose's default 10s is below STOCK_SHUTDOWN_TIMEOUT %s", r, shutdown)
			continue
		}
		if got := time.Duration(*s.StopGracePeriod); got < shutdown+2*time.Second {
			t.Errorf("%s: stop_grace_period %s; want at least STOCK_SHUTDOWN_TIMEOUT %s + 2s", r, got, shutdown)
		}
	}
}

// The k6 image runs the script that is type-checked against @types/k6: the
// same release.
func TestK6MatchesItsTypes(t *testing.T) {
	k6 := service(t, loadProject(t, nil, "loadtest"), "k6")
	_, image, _ := strings.Cut(k6.Image, ":")
	var pkg struct {
		DevDependencies map[string]string `json:"devDependencies"`
	}
	readJSON(t, filepath.Join(root, "loadtest", "k6", "package.json"), &pkg)
	types := pkg.DevDependencies["@types/k6"]
	if types == "" || image != types {
		t.Errorf("k6 image %s, @types/k6 %q in loadtest/k6/package.json; want the same exact version", k6.Image, types)
	}
	var lock struct {
		Packages map[string]struct {
			Version string `json:"version"`
		} `json:"packages"`
	}
	readJSON(t, filepath.Join(root, "loadtest", "k6", "package-lock.json"), &lock)
	if got := lock.Packages["node_modules/@types/k6"].Version; got != types {
		t.Errorf("package-lock.json has @types/k6 %q; package.json %q (run npm install)", got, types)
	}
}

func TestK6(t *testing.T) {
	p := loadProject(t, nil, "loadtest")
	k6 := service(t, p, "k6")
	if !slices.Equal(k6.Profiles, []string{"loadtest"}) {
		t.Errorf("k6 profiles = %q; want [loadtest]", k6.Profiles)
	}
	if !strings.HasPrefix(k6.Image, "grafana/k6:") {
		t.Errorf("k6 image = %q; want grafana/k6:<version>", k6.Image)
	}
	if got, want := []string(k6.Command), []string{"run", "/scripts/seckill.js"}; !slices.Equal(got, want) {
		t.Errorf("k6 command = %q; want %q (the image's entrypoint is k6)", got, want)
	}
	if len(k6.Entrypoint) != 0 {
		t.Errorf("k6 entrypoint overridden to %q; the image's is k6", k6.Entrypoint)
	}
	if got := env(t, k6, "BASE_URL"); got != "http://nginx:8080" {
		t.Errorf("k6 BASE_URL = %q; want http://nginx:8080", got)
	}
	src := bindSource(t, k6, "/scripts")
	want, _ := filepath.Abs(filepath.Join(root, "loadtest", "k6"))
	if src != want {
		t.Errorf("k6 mounts %q on /scripts; want %q", src, want)
	}
	if _, err := os.Stat(filepath.Join(src, "seckill.js")); err != nil {
		t.Errorf("the script k6 runs is not there: %v", err)
	}
	// The summary must land in a mounted folder, or it dies with the container.
	summary := env(t, k6, "SUMMARY")
	bindSource(t, k6, filepath.Dir(summary))
}

func bindSource(t testing.TB, s types.ServiceConfig, target string) string {
	t.Helper()
	for _, v := range s.Volumes {
		if v.Target == target {
			if v.Type != types.VolumeTypeBind {
				t.Fatalf("%s: volume on %s is %s; want a bind mount", s.Name, target, v.Type)
			}
			return v.Source
		}
	}
	t.Fatalf("%s: nothing mounted on %s; volumes %+v", s.Name, target, s.Volumes)
	return ""
}

func TestNginx(t *testing.T) {
	p := loadProject(t, nil, "loadtest")
	ngx := service(t, p, "nginx")
	// 1.30 is nginx's supported stable branch (1.27 and 1.28 are out of
	// support); open-source nginx has `resolve` on upstream servers since 1.27.3.
	if !strings.HasPrefix(ngx.Image, "nginx:1.30") {
		t.Errorf("nginx image = %q; want nginx:1.30-alpine", ngx.Image)
	}
	published := false
	for _, port := range ngx.Ports {
		if port.Target == 8080 && port.Published == "8080" {
			published = true
		}
	}
	if !published {
		t.Errorf("nginx ports %+v; want 8080:8080", ngx.Ports)
	}

	// Parse the file the container actually mounts, not a guess of its path.
	src := bindSource(t, ngx, "/etc/nginx/nginx.conf")
	want, _ := filepath.Abs(filepath.Join(root, "loadtest", "nginx.conf"))
	if src != want {
		t.Errorf("nginx mounts %q; want %q", src, want)
	}
	text, err := os.ReadFile(src) //nolint:gosec // G304: the file this repo's docker-compose.yml mounts
	if err != nil {
		t.Fatal(err)
	}
	conf, err := ParseNginx(string(text))
	if err != nil {
		t.Fatalf("parse %s: %v", src, err)
	}

	ups := Find(conf, "upstream")
	if len(ups) != 1 || len(ups[0].Args) != 1 {
		t.Fatalf("nginx.conf: %d upstream blocks; want exactly one, named", len(ups))
	}
	up := ups[0]
	var hosts []string
	for _, d := range up.Block {
		if d.Name != "server" {
			continue
		}
		if len(d.Args) == 0 {
			t.Fatalf("nginx.conf: upstream %s: server with no address", up.Args[0])
		}
		host, port, err := net.SplitHostPort(d.Args[0])
		if err != nil {
			t.Errorf("nginx.conf: upstream server %q: %v; want host:port", d.Args[0], err)
			continue
		}
		hosts = append(hosts, host)
		s, ok := p.Services[host]
		if !ok {
			t.Errorf("nginx.conf: upstream server %q is no compose service; services %v", host, p.ServiceNames())
			continue
		}
		if addr := env(t, s, "STOCK_HTTP_ADDR"); !strings.HasSuffix(addr, ":"+port) {
			t.Errorf("nginx.conf: upstream %s:%s, but the service listens on STOCK_HTTP_ADDR %q", host, port, addr)
		}
		if slices.Contains(d.Args[1:], "backup") || slices.Contains(d.Args[1:], "down") {
			t.Errorf("nginx.conf: upstream server %s is %v; all replicas must take traffic", host, d.Args[1:])
		}
	}
	slices.Sort(hosts)
	if !slices.Equal(hosts, replicas) {
		t.Errorf("nginx.conf upstream %s servers %q; want exactly the replicas %q", up.Args[0], hosts, replicas)
	}

	// The replicas are looked up again while nginx runs, not once at start:
	// a recreated replica comes back with a new address.
	for _, d := range up.Block {
		if d.Name == "server" && !slices.Contains(d.Args[1:], "resolve") {
			t.Errorf("nginx.conf: upstream server %s without resolve; nginx would keep its address from start-up", d.Args[0])
		}
	}
	if len(directives(up.Block, "zone")) != 1 {
		t.Errorf("nginx.conf: upstream %s has no zone; resolve needs one", up.Args[0])
	}
	resolvers := Find(conf, "resolver")
	if len(resolvers) != 1 || len(resolvers[0].Args) == 0 || resolvers[0].Args[0] != "127.0.0.11" {
		t.Errorf("nginx.conf: resolver %+v; want Docker's embedded DNS 127.0.0.11", resolvers)
	} else if !slices.ContainsFunc(resolvers[0].Args, func(a string) bool { return strings.HasPrefix(a, "valid=") }) {
		t.Errorf("nginx.conf: resolver %v without valid=; nginx would keep the DNS answer's TTL", resolvers[0].Args)
	}

	// nginx must drop an idle upstream connection before the service does,
	// or it may send a request down a connection being closed.
	idle, err := time.ParseDuration(env(t, service(t, p, replicas[0]), "STOCK_HTTP_IDLE_TIMEOUT"))
	if err != nil {
		t.Fatalf("STOCK_HTTP_IDLE_TIMEOUT: %v", err)
	}
	kt := directives(up.Block, "keepalive_timeout")
	if len(kt) != 1 || len(kt[0].Args) != 1 {
		t.Errorf("nginx.conf: upstream %s keepalive_timeout %+v; want one, below STOCK_HTTP_IDLE_TIMEOUT %s (nginx's default 60s is not)", up.Args[0], kt, idle)
	} else if d, err := nginxDuration(kt[0].Args[0]); err != nil || d >= idle {
		t.Errorf("nginx.conf: upstream keepalive_timeout %s (%v, %v); want below the replicas' STOCK_HTTP_IDLE_TIMEOUT %s", kt[0].Args[0], d, err, idle)
	}

	// Every location proxies to that upstream, on the published port.
	passes := Find(conf, "proxy_pass")
	if len(passes) == 0 {
		t.Errorf("nginx.conf: no proxy_pass")
	}
	for _, d := range passes {
		if len(d.Args) != 1 || d.Args[0] != "http://"+up.Args[0] {
			t.Errorf("nginx.conf: proxy_pass %q; want http://%s", d.Args, up.Args[0])
		}
	}
	listens := Find(conf, "listen")
	if len(listens) == 0 || !slices.ContainsFunc(listens, func(d Directive) bool { return len(d.Args) > 0 && d.Args[0] == "8080" }) {
		t.Errorf("nginx.conf: listen %+v; want 8080 (the published port)", listens)
	}
	// A POST must never be resent to a second replica by nginx.
	for _, d := range Find(conf, "proxy_next_upstream") {
		if slices.Contains(d.Args, "non_idempotent") {
			t.Errorf("nginx.conf: proxy_next_upstream %v resends POSTs", d.Args)
		}
	}
}

func TestDockerfile(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	stages := regexp.MustCompile(`(?mi)^FROM\s+(\S+)`).FindAllStringSubmatch(text, -1)
	if len(stages) < 2 || !strings.HasPrefix(stages[0][1], "golang:") {
		t.Fatalf("Dockerfile stages %q; want a golang build stage and a runtime stage", stages)
	}
	// The golang image sets GOTOOLCHAIN=local: its Go must be at least what
	// go.mod asks for, so the tag names a release, not a floating 1.26.
	tag := strings.TrimPrefix(strings.SplitN(stages[0][1], "@", 2)[0], "golang:")
	imageGo, _, _ := strings.Cut(tag, "-")
	if strings.Count(imageGo, ".") != 2 {
		t.Errorf("Dockerfile build image %s: want an exact Go release (golang:1.26.8), not a floating tag", stages[0][1])
	}
	modGo := goDirective(t, filepath.Join(root, "go.mod"))
	if semver.Compare("v"+imageGo, "v"+modGo) < 0 {
		t.Errorf("Dockerfile builds with Go %s but go.mod says go %s; with GOTOOLCHAIN=local the build fails", imageGo, modGo)
	}
	// Only the last stage's ENTRYPOINT and CMD count.
	last := text[strings.LastIndex(strings.ToUpper(text), "\nFROM "):]
	for _, want := range []string{`ENTRYPOINT ["/stock"]`, `CMD ["serve"]`} {
		if !strings.Contains(last, want) {
			t.Errorf("Dockerfile runtime stage lacks %s", want)
		}
	}
	if !regexp.MustCompile(`CGO_ENABLED=0 go build .*\./cmd/stock`).MatchString(text) {
		t.Errorf("Dockerfile does not build ./cmd/stock with CGO_ENABLED=0")
	}
}

// .dockerignore must keep what `go build ./cmd/stock` needs in the context.
func TestDockerignore(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			patterns = append(patterns, line)
		}
	}
	for _, keep := range []string{"go.mod", "go.sum", "cmd", "cmd/stock", "internal", "migrations"} {
		for _, pat := range patterns {
			if strings.HasPrefix(pat, "!") {
				continue
			}
			if ok, _ := filepath.Match(strings.TrimPrefix(pat, "/"), keep); ok || pat == "*" || pat == "**" {
				t.Errorf(".dockerignore pattern %q excludes %s from the build context", pat, keep)
			}
		}
	}
	for _, want := range []string{".git", "**/node_modules"} {
		if !slices.Contains(patterns, want) {
			t.Errorf(".dockerignore lacks %q", want)
		}
	}
}

// directives returns the directives named name directly in block.
func directives(block []Directive, name string) []Directive {
	var out []Directive
	for _, d := range block {
		if d.Name == name {
			out = append(out, d)
		}
	}
	return out
}

// nginxDuration parses an nginx time ("30s", "1m", "500ms"; a bare number is seconds).
func nginxDuration(s string) (time.Duration, error) {
	if s != "" && strings.Trim(s, "0123456789") == "" {
		s += "s"
	}
	return time.ParseDuration(s)
}

// goDirective returns the version of the go line of a go.mod.
func goDirective(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path) //nolint:gosec // G304: a go.mod of this repo, named by the test
	if err != nil {
		t.Fatal(err)
	}
	f, err := modfile.ParseLax(path, b, nil)
	if err != nil || f.Go == nil {
		t.Fatalf("%s: %v; want a go line", path, err)
	}
	return f.Go.Version
}

func readJSON(t testing.TB, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path) //nolint:gosec // G304: a file of this repo, named by the test
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
