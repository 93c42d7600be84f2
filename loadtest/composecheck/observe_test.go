package composecheck

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/types"
	"github.com/prometheus/common/model"
	promconfig "github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/discovery"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"
)

var (
	deployDir     = filepath.Join(root, "deploy")
	dashboardFile = filepath.Join(deployDir, "grafana", "dashboards", "stock.json")
	promql        = parser.NewParser(parser.Options{})
	quiet         = slog.New(slog.NewTextHandler(io.Discard, nil))
)

func TestObserveOnlyInItsProfile(t *testing.T) {
	p := loadProject(t, nil)
	for _, name := range []string{"prometheus", "grafana"} {
		if _, ok := p.Services[name]; ok {
			t.Errorf("%s is active without --profile observe", name)
		}
	}
	p = loadProject(t, nil, "observe")
	for _, name := range []string{"prometheus", "grafana"} {
		if s := service(t, p, name); !slices.Equal(s.Profiles, []string{"observe"}) {
			t.Errorf("%s profiles = %q; want [observe]", name, s.Profiles)
		}
	}
	wantDep(t, p, "grafana", "prometheus", types.ServiceConditionHealthy)
}

// containerFile maps a path inside service s to the file bind-mounted there
// (a file mount or a file under a mounted folder).
func containerFile(t testing.TB, s types.ServiceConfig, target string) string {
	t.Helper()
	for _, v := range s.Volumes {
		if v.Type != types.VolumeTypeBind {
			continue
		}
		if v.Target == target {
			return v.Source
		}
		if rel, ok := strings.CutPrefix(target, strings.TrimSuffix(v.Target, "/")+"/"); ok {
			return filepath.Join(v.Source, filepath.FromSlash(rel))
		}
	}
	t.Fatalf("%s: nothing bind-mounted at %s; volumes %+v", s.Name, target, s.Volumes)
	return ""
}

// prometheusConfig loads the prometheus.yml the compose service mounts, with
// Prometheus's own loader (unknown fields are errors).
func prometheusConfig(t testing.TB, p *types.Project) (*promconfig.Config, types.ServiceConfig) {
	t.Helper()
	prom := service(t, p, "prometheus")
	file := containerFile(t, prom, "/etc/prometheus/prometheus.yml")
	want, _ := filepath.Abs(filepath.Join(deployDir, "prometheus", "prometheus.yml"))
	if file != want {
		t.Errorf("prometheus mounts %s as its config; want %s", file, want)
	}
	cfg, err := promconfig.LoadFile(file, false, quiet)
	if err != nil {
		t.Fatalf("prometheus config: %v", err)
	}
	return cfg, prom
}

// Prometheus scrapes exactly the replicas, on the port they serve /metrics on.
func TestPrometheusScrapesTheReplicas(t *testing.T) {
	p := loadProject(t, nil, "observe")
	cfg, _ := prometheusConfig(t, p)
	var job *promconfig.ScrapeConfig
	for _, sc := range cfg.ScrapeConfigs {
		if sc.JobName == "stock" {
			job = sc
		}
	}
	if job == nil {
		t.Fatalf("prometheus.yml: no scrape job \"stock\" (the dashboard and alerts select job=\"stock\")")
	}
	if job.MetricsPath != "/metrics" {
		t.Errorf("job stock metrics_path %q; want /metrics", job.MetricsPath)
	}
	var targets []string
	for _, c := range job.ServiceDiscoveryConfigs {
		sc, ok := c.(discovery.StaticConfig)
		if !ok {
			t.Fatalf("job stock discovers targets with %T; want static_configs", c)
		}
		for _, g := range sc {
			for _, tg := range g.Targets {
				targets = append(targets, string(tg[model.AddressLabel]))
			}
		}
	}
	var want []string
	for _, r := range replicas {
		_, port, err := net.SplitHostPort(env(t, service(t, p, r), "STOCK_METRICS_ADDR"))
		if err != nil {
			t.Fatalf("%s: STOCK_METRICS_ADDR: %v", r, err)
		}
		want = append(want, r+":"+port)
	}
	slices.Sort(targets)
	if !slices.Equal(targets, want) {
		t.Errorf("job stock targets %q; want the replicas' metrics addresses %q", targets, want)
	}
}

// Every rule file Prometheus is told to load is mounted, and is valid by
// Prometheus's own rule parser (PromQL and templates included).
func TestAlertRules(t *testing.T) {
	p := loadProject(t, nil, "observe")
	cfg, prom := prometheusConfig(t, p)
	if len(cfg.RuleFiles) == 0 {
		t.Fatalf("prometheus.yml loads no rule files")
	}
	n := 0
	for _, rf := range cfg.RuleFiles {
		groups := ruleGroups(t, containerFile(t, prom, rf))
		for _, g := range groups.Groups {
			n += len(g.Rules)
		}
	}
	if n == 0 {
		t.Errorf("rule files %q hold no rules", cfg.RuleFiles)
	}
}

func ruleGroups(t testing.TB, file string) *rulefmt.RuleGroups {
	t.Helper()
	groups, errs := rulefmt.ParseFile(file, false, model.UTF8Validation, promql, quiet)
	for _, err := range errs {
		t.Errorf("%v", err)
	}
	if groups == nil {
		t.FailNow()
	}
	return groups
}

// alertExprs returns the expressions of every rule in the rule files.
func alertExprs(t testing.TB) map[string]string {
	t.Helper()
	exprs := map[string]string{}
	files, err := filepath.Glob(filepath.Join(deployDir, "prometheus", "*.yml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if filepath.Base(f) == "prometheus.yml" {
			continue
		}
		for _, g := range ruleGroups(t, f).Groups {
			for _, r := range g.Rules {
				exprs[fmt.Sprintf("%s: %s%s", filepath.Base(f), r.Alert, r.Record)] = r.Expr
			}
		}
	}
	return exprs
}

// dashboard is the part of Grafana's dashboard JSON model checked here.
type dashboard struct {
	UID           string  `json:"uid"`
	Title         string  `json:"title"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int         `json:"id"`
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	Datasource *datasource `json:"datasource"`
	GridPos    struct{ H, W, X, Y int }
	Targets    []struct {
		RefID      string      `json:"refId"`
		Expr       string      `json:"expr"`
		Datasource *datasource `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

func loadDashboard(t testing.TB) dashboard {
	t.Helper()
	var d dashboard
	readJSON(t, dashboardFile, &d)
	return d
}

// grafanaVars are the values the dashboard's variables are replaced by
// before its queries are parsed as PromQL.
var grafanaVars = strings.NewReplacer(
	"$__rate_interval", "1m", "$__interval", "15s", "$__range", "1h", "$instance", ".*",
)

// dashboardExprs returns every query of the dashboard, its variables replaced.
func dashboardExprs(t testing.TB, d dashboard) map[string]string {
	t.Helper()
	exprs := map[string]string{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				exprs[fmt.Sprintf("panel %q %s", p.Title, tg.RefID)] = grafanaVars.Replace(tg.Expr)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return exprs
}

var leftoverVar = regexp.MustCompile(`\$\{?\w+`)

// The dashboard is well-formed for Grafana: unique panel ids on a 24-column
// grid, every query PromQL on the data source variable, and the
// provisioning that loads it points at the folder compose mounts it in.
func TestDashboard(t *testing.T) {
	d := loadDashboard(t)
	if d.UID == "" || d.Title == "" || d.SchemaVersion == 0 {
		t.Errorf("dashboard uid %q title %q schemaVersion %d; want all set", d.UID, d.Title, d.SchemaVersion)
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
	}
	if vars["datasource"] != "datasource" {
		t.Errorf("dashboard variables %v; want a datasource variable named datasource", vars)
	}
	if vars["instance"] != "query" {
		t.Errorf("dashboard variables %v; want a query variable named instance", vars)
	}
	ids := map[int]string{}
	var walk func([]panel)
	queries := 0
	walk = func(ps []panel) {
		for _, p := range ps {
			if prev, ok := ids[p.ID]; ok || p.ID == 0 {
				t.Errorf("panel %q: id %d (also %q); want unique non-zero ids", p.Title, p.ID, prev)
			}
			ids[p.ID] = p.Title
			if g := p.GridPos; g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 {
				t.Errorf("panel %q: gridPos %+v; want inside the 24-column grid", p.Title, g)
			}
			if p.Type != "row" {
				if p.Datasource == nil || p.Datasource.Type != "prometheus" || p.Datasource.UID != "${datasource}" {
					t.Errorf("panel %q: datasource %+v; want prometheus ${datasource}", p.Title, p.Datasource)
				}
				if len(p.Targets) == 0 {
					t.Errorf("panel %q has no queries", p.Title)
				}
			}
			for _, tg := range p.Targets {
				queries++
				if tg.RefID == "" || tg.Expr == "" {
					t.Errorf("panel %q: query %+v; want refId and expr", p.Title, tg)
				}
				if tg.Datasource != nil && tg.Datasource.UID != "${datasource}" {
					t.Errorf("panel %q %s: datasource %+v; want ${datasource}", p.Title, tg.RefID, tg.Datasource)
				}
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	if queries == 0 {
		t.Fatalf("dashboard has no queries")
	}
	for where, expr := range dashboardExprs(t, d) {
		if v := leftoverVar.FindString(expr); v != "" {
			t.Errorf("%s: variable %s is not one the check knows (%s)", where, v, expr)
			continue
		}
		if _, err := promql.ParseExpr(expr); err != nil {
			t.Errorf("%s: %v\n%s", where, err, expr)
		}
	}
}

func TestGrafanaProvisioning(t *testing.T) {
	p := loadProject(t, nil, "observe")
	g := service(t, p, "grafana")

	var ds struct {
		APIVersion  int `yaml:"apiVersion"`
		Datasources []struct {
			Name      string         `yaml:"name"`
			UID       string         `yaml:"uid"`
			Type      string         `yaml:"type"`
			Access    string         `yaml:"access"`
			URL       string         `yaml:"url"`
			IsDefault bool           `yaml:"isDefault"`
			Editable  bool           `yaml:"editable"`
			JSONData  map[string]any `yaml:"jsonData"`
		} `yaml:"datasources"`
	}
	readYAML(t, containerFile(t, g, "/etc/grafana/provisioning/datasources/prometheus.yml"), &ds)
	if ds.APIVersion != 1 || len(ds.Datasources) != 1 {
		t.Fatalf("datasources provisioning: apiVersion %d, %d data sources; want 1 and one", ds.APIVersion, len(ds.Datasources))
	}
	src := ds.Datasources[0]
	u, err := url.Parse(src.URL)
	if err != nil || src.Type != "prometheus" || !src.IsDefault {
		t.Fatalf("data source %+v (%v); want the default, of type prometheus", src, err)
	}
	if u.Hostname() != "prometheus" || u.Port() != "9090" {
		t.Errorf("data source url %s; want the compose service prometheus on 9090", src.URL)
	}
	service(t, p, u.Hostname())

	var dp struct {
		APIVersion int `yaml:"apiVersion"`
		Providers  []struct {
			Name                  string `yaml:"name"`
			Folder                string `yaml:"folder"`
			Type                  string `yaml:"type"`
			DisableDeletion       bool   `yaml:"disableDeletion"`
			AllowUIUpdates        bool   `yaml:"allowUiUpdates"`
			UpdateIntervalSeconds int    `yaml:"updateIntervalSeconds"`
			Options               struct {
				Path                      string `yaml:"path"`
				FoldersFromFilesStructure bool   `yaml:"foldersFromFilesStructure"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	readYAML(t, containerFile(t, g, "/etc/grafana/provisioning/dashboards/stock.yml"), &dp)
	if dp.APIVersion != 1 || len(dp.Providers) != 1 || dp.Providers[0].Type != "file" {
		t.Fatalf("dashboards provisioning %+v; want apiVersion 1 and one file provider", dp)
	}
	dir := dp.Providers[0].Options.Path
	want, _ := filepath.Abs(dashboardFile)
	if got := containerFile(t, g, path.Join(dir, filepath.Base(dashboardFile))); got != want {
		t.Errorf("the provider reads %s, mounted from %s; want %s", dir, got, want)
	}
	if home := env(t, g, "GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"); containerFile(t, g, home) != want {
		t.Errorf("home dashboard %s is not the mounted %s", home, want)
	}
}

// readYAML decodes one YAML document strictly: an unknown field is an error.
func readYAML(t testing.TB, file string, v any) {
	t.Helper()
	b, err := os.ReadFile(file) //nolint:gosec // G304: a file of this repo, named by the test
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

// TestDashboardDecodes guards json tags above: a panel without targets or
// grid would pass the checks vacuously.
func TestDashboardDecodes(t *testing.T) {
	b, err := os.ReadFile(dashboardFile) //nolint:gosec // G304: the dashboard file of this repo
	if err != nil {
		t.Fatal(err)
	}
	var raw struct {
		Panels []map[string]json.RawMessage `json:"panels"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	d := loadDashboard(t)
	if len(raw.Panels) != len(d.Panels) {
		t.Fatalf("%d raw panels, %d decoded", len(raw.Panels), len(d.Panels))
	}
	for i, p := range d.Panels {
		if _, ok := raw.Panels[i]["gridPos"]; ok && p.GridPos.W == 0 {
			t.Errorf("panel %q: gridPos not decoded", p.Title)
		}
		if _, ok := raw.Panels[i]["targets"]; ok && len(p.Targets) == 0 {
			t.Errorf("panel %q: targets not decoded", p.Title)
		}
	}
}
