package server_test

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/tandemhq/tandem/cmd/tandem/internal/server"
	"github.com/tandemhq/tandem/dualwrite"
	"github.com/tandemhq/tandem/web"
)

// mustPromtool returns promtool's path; the tests that need it fail, never
// skip, without it.
func mustPromtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool is required: install the Debian package `prometheus` (scripts/test-deps does): %v", err)
	}
	return p
}

func runPromtool(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command(mustPromtool(t), args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// TestAlertRules checks deploy/prometheus/alerts.yml with promtool and runs
// its unit tests, alerts_test.yml.
func TestAlertRules(t *testing.T) {
	dir := filepath.Join("..", "..", "..", "..", "deploy", "prometheus")
	t.Run("CheckRules", func(t *testing.T) { runPromtool(t, dir, "check", "rules", "alerts.yml") })
	t.Run("TestRules", func(t *testing.T) { runPromtool(t, dir, "test", "rules", "alerts_test.yml") })
}

// dashboardAnnotation is a Prometheus annotation of the Grafana board.
type dashboardAnnotation struct {
	Name    string `json:"name"`
	BuiltIn int    `json:"builtIn"`
	Expr    string `json:"expr"`
}

func mustDashboardAnnotations(t *testing.T, path string) []dashboardAnnotation {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Annotations struct {
			List []dashboardAnnotation `json:"list"`
		} `json:"annotations"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("parse the dashboard: %v", err)
	}
	var out []dashboardAnnotation
	for _, a := range d.Annotations.List {
		if a.BuiltIn == 0 {
			out = append(out, a)
		}
	}
	return out
}

// TestGrafanaAnnotations evaluates the board's annotation queries with
// promtool on series where pod-a moves from shadow to mysql at minute 5 and
// its kill switch is engaged at minute 8 and released at minute 12: each
// annotation marks its change once, at the change, and nothing else.
func TestGrafanaAnnotations(t *testing.T) {
	promtool := mustPromtool(t)
	anns := mustDashboardAnnotations(t, filepath.Join("..", "..", "..", "..", "deploy", "grafana", "tandem.json"))
	want := map[string]struct{ at, labels string }{
		"Mode changes":         {"5m", `{pod="pod-a", mode="mysql"}`},
		"Kill switch engaged":  {"8m", `{pod="pod-a"}`},
		"Kill switch released": {"12m", `{pod="pod-a"}`},
	}
	var b strings.Builder
	b.WriteString(`rule_files: []
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - {series: 'tandem_pod_mode{pod="pod-a",mode="shadow",instance="i1"}', values: '1x4 0x15'}
      - {series: 'tandem_pod_mode{pod="pod-a",mode="mysql",instance="i1"}', values: '0x4 1x15'}
      - {series: 'tandem_pod_mode{pod="pod-b",mode="redis",instance="i1"}', values: '1x19'}
      - {series: 'tandem_pod_kill_switch{pod="pod-a",instance="i1"}', values: '0x7 1x3 0x8'}
      - {series: 'tandem_pod_kill_switch{pod="pod-b",instance="i1"}', values: '0x19'}
    promql_expr_test:
`)
	seen := map[string]bool{}
	for _, a := range anns {
		w, ok := want[a.Name]
		if !ok {
			continue
		}
		seen[a.Name] = true
		expr := strings.NewReplacer(`$pod`, `.*`).Replace(a.Expr)
		for _, at := range []string{"0m", "3m", "5m", "6m", "8m", "10m", "12m", "14m", "18m"} {
			fmt.Fprintf(&b, "      - expr: %q\n        eval_time: %s\n", expr, at)
			if at == w.at {
				fmt.Fprintf(&b, "        exp_samples:\n          - {labels: '%s', value: %s}\n", w.labels, map[bool]string{true: "0", false: "1"}[a.Name == "Kill switch released"])
			} else {
				b.WriteString("        exp_samples: []\n")
			}
		}
	}
	for name := range want {
		if !seen[name] {
			t.Errorf("got no annotation %q on the board, want one", name)
		}
	}
	path := filepath.Join(t.TempDir(), "annotations_test.yml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(promtool, "test", "rules", path)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s\n(test file:\n%s)", err, out, b.String())
	}
}

// TestAlertmanagerSample checks deploy/prometheus/alertmanager.yml against
// the rules and the admin API: the alerts labelled tandem_killswitch="true"
// exist, name their pod, and are routed to a webhook at tandem's
// POST /admin/alerts/killswitch with a bearer token, the on-call too.
func TestAlertmanagerSample(t *testing.T) {
	dir := filepath.Join("..", "..", "..", "..", "deploy", "prometheus")
	var am struct {
		Route struct {
			Receiver string `yaml:"receiver"`
			Routes   []struct {
				Receiver string   `yaml:"receiver"`
				Matchers []string `yaml:"matchers"`
				Continue bool     `yaml:"continue"`
			} `yaml:"routes"`
		} `yaml:"route"`
		Receivers []struct {
			Name           string `yaml:"name"`
			WebhookConfigs []struct {
				URL          string `yaml:"url"`
				SendResolved *bool  `yaml:"send_resolved"`
				HTTPConfig   struct {
					Authorization struct {
						Type            string `yaml:"type"`
						CredentialsFile string `yaml:"credentials_file"`
					} `yaml:"authorization"`
				} `yaml:"http_config"`
			} `yaml:"webhook_configs"`
		} `yaml:"receivers"`
	}
	mustYAML(t, filepath.Join(dir, "alertmanager.yml"), &am)
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert  string            `yaml:"alert"`
				Expr   string            `yaml:"expr"`
				Labels map[string]string `yaml:"labels"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	mustYAML(t, filepath.Join(dir, "alerts.yml"), &rules)
	killers := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Labels["tandem_killswitch"] != "true" {
				continue
			}
			killers++
			if !strings.Contains(r.Expr, "by (pod)") {
				t.Errorf("%s: want an expression by (pod): the receiver engages the pod its pod label names", r.Alert)
			}
		}
	}
	if killers == 0 {
		t.Fatal(`no rule in alerts.yml is labelled tandem_killswitch="true"`)
	}
	receivers := map[string]bool{}
	for _, r := range am.Route.Routes {
		if len(r.Matchers) == 1 && r.Matchers[0] == `tandem_killswitch="true"` {
			receivers[r.Receiver] = true
		}
	}
	if !receivers["tandem-killswitch"] || !receivers[am.Route.Receiver] {
		t.Fatalf(`got receivers %v for tandem_killswitch="true", want tandem-killswitch and the on-call %q`, receivers, am.Route.Receiver)
	}
	routes := web.Routes((&web.AdminServer{Token: "t"}).Handler())
	found := false
	for _, r := range am.Receivers {
		if r.Name != "tandem-killswitch" {
			continue
		}
		for _, w := range r.WebhookConfigs {
			found = true
			u, err := url.Parse(w.URL)
			if err != nil || !slices.Contains(routes, "POST "+u.Path) || u.Path != "/admin/alerts/killswitch" {
				t.Errorf("got webhook URL %q, want one at POST /admin/alerts/killswitch", w.URL)
			}
			if a := w.HTTPConfig.Authorization; a.Type != "Bearer" || a.CredentialsFile == "" {
				t.Errorf("got authorization %+v, want a Bearer token from a file", a)
			}
			if w.SendResolved == nil || *w.SendResolved {
				t.Error("want send_resolved: false (a resolved alert changes nothing)")
			}
		}
	}
	if !found {
		t.Fatal("no webhook_configs in the tandem-killswitch receiver")
	}
}

func mustYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestFenceAlertQuotesTheCode: the alert TandemFenceTimeouts tells the
// on-call engineer the fence's bound; it must be the one the router uses.
func TestFenceAlertQuotesTheCode(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "deploy", "prometheus", "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	def := server.DefaultConfig().Shadow.Timeout
	want := fmt.Sprintf("(%d x shadow.timeout + %s, %s at the default %s)", dualwrite.FenceShadowTimeouts, dualwrite.FenceSlack,
		dualwrite.FenceWait(def), def)
	found := false
	for _, g := range doc.Groups {
		for _, r := range g.Rules {
			if r.Alert != "TandemFenceTimeouts" {
				continue
			}
			found = true
			if !strings.Contains(r.Annotations["description"], want) {
				t.Errorf("got description %q, want it to quote the fence %q", r.Annotations["description"], want)
			}
		}
	}
	if !found {
		t.Fatal("got no alert TandemFenceTimeouts in alerts.yml")
	}
}
