package server_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/tandemhq/tandem/cmd/tandem/internal/server"
)

// scrape is a parsed Prometheus text exposition: the type of every family
// and the label sets of its samples.
type scrape struct {
	text    string
	types   map[string]string   // family -> counter, gauge, histogram...
	samples map[string][]string // sample name -> label strings
}

var sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s`)

func parseScrape(text string) *scrape {
	s := &scrape{text: text, types: map[string]string{}, samples: map[string][]string{}}
	for _, l := range strings.Split(text, "\n") {
		if f := strings.Fields(l); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			s.types[f[2]] = f[3]
			continue
		}
		if m := sampleLine.FindStringSubmatch(l); m != nil {
			s.samples[m[1]] = append(s.samples[m[1]], m[2])
		}
	}
	return s
}

// has reports whether a sample of name carries every label.
func (s *scrape) has(name string, labels ...string) bool {
	for _, ls := range s.samples[name] {
		ok := true
		for _, l := range labels {
			if !strings.Contains(ls, l) {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// family returns the family a sample or metric name belongs to, stripping
// the suffixes of histograms and summaries.
func (s *scrape) family(name string) (string, bool) {
	if _, ok := s.types[name]; ok {
		return name, true
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suf)
		if !ok {
			continue
		}
		if t := s.types[base]; t == "histogram" || t == "summary" {
			return base, true
		}
	}
	return "", false
}

// mustScrapeAfterTraffic runs a Main, sends traffic of every kind through
// both pods, flips pod B to shadow and back, and returns a /metrics scrape.
func mustScrapeAfterTraffic(t *testing.T) (*scrape, server.Config) {
	t.Helper()
	cfg, _ := MustConfig(t)
	in := MustRunMain(t, cfg)
	api, adm := in.Checkout, in.Admin
	for _, shop := range []int64{shopA, shopB} {
		api.must(http.MethodPut, inventoryPath(shop, 1, 1), obj{"on_hand": 5}, http.StatusOK)
		for i := 0; i < 4; i++ {
			tok := fmt.Sprintf("m-%d", i)
			api.must(http.MethodPost, "/v1/reservations", cart(tok, shop, line(1, 1, 1)), http.StatusCreated)
			if i%2 == 0 {
				api.must(http.MethodPost, resPath(tok, shop, "/claim"), nil, http.StatusOK)
			} else {
				api.must(http.MethodDelete, resPath(tok, shop, ""), nil, http.StatusOK)
			}
		}
		api.mustErr(http.MethodPost, "/v1/reservations", cart("m-big", shop, line(1, 50, 1)), http.StatusConflict, "insufficient_inventory")
		api.mustErr(http.MethodGet, resPath("never", shop, ""), nil, http.StatusNotFound, "not_found")
	}
	adm.must(http.MethodPost, "/admin/pods/"+cfg.Pods[0].Name+"/audit", obj{"reason": "metrics"}, http.StatusOK)
	adm.must(http.MethodPost, "/admin/killswitch", obj{"reason": "metrics", "pods": []string{cfg.Pods[1].Name}}, http.StatusOK)
	status, text := adm.getText("/metrics")
	if status != http.StatusOK {
		t.Fatalf("got /metrics status %d, want 200", status)
	}
	if dump := os.Getenv("TANDEM_E2E_METRICS_DUMP"); dump != "" {
		_ = os.WriteFile(dump, []byte(text), 0o644)
	}
	return parseScrape(text), cfg
}

func TestE2EMetrics(t *testing.T) {
	s, cfg := mustScrapeAfterTraffic(t)
	podA, podB := cfg.Pods[0].Name, cfg.Pods[1].Name

	t.Run("PromtoolLintPasses", func(t *testing.T) {
		promtool, err := exec.LookPath("promtool")
		if err != nil {
			t.Fatalf("promtool is required: install the Debian package `prometheus` (apt-get install -y prometheus): %v", err)
		}
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = strings.NewReader(s.text)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Errorf("got promtool check metrics failing (%v):\n%s", err, out.String())
		}
	})

	t.Run("FamiliesOfTheIssueAreExported", func(t *testing.T) {
		tests := []struct {
			name, typ string
			labels    []string
		}{
			{"tandem_http_request_duration_seconds", "histogram", []string{"route=", "status=", `api="checkout"`}},
			{"tandem_reservations_total", "counter", []string{"pod=", "op=", "outcome=", "source_of_truth="}},
			{"tandem_divergences_total", "counter", []string{"pod=", `kind="outcome_mismatch"`}},
			{"tandem_comparisons_total", "counter", []string{"pod="}},
			{"tandem_contention_total", "counter", []string{"pod="}},
			{"tandem_contention_rate", "gauge", []string{"pod="}},
			{"tandem_store_latency_seconds", "gauge", []string{`store="mysql"`, `store=`}},
			{"tandem_mysql_conn_hold_seconds", "histogram", []string{"conn_tag=", "pod="}},
			{"tandem_mysql_pool_open_connections", "gauge", []string{"pod="}},
			{"tandem_mysql_pool_in_use_connections", "gauge", []string{"pod="}},
			{"tandem_mysql_pool_wait_count_total", "counter", []string{"pod="}},
			{"tandem_redis_pool_connections", "gauge", []string{"pod=", "state="}},
			{"tandem_pod_mode", "gauge", []string{"pod=", `mode="shadow"`}},
			{"tandem_pod_source_of_truth", "gauge", []string{"pod=", "store="}},
			{"tandem_pod_kill_switch", "gauge", []string{"pod="}},
			{"tandem_control_version", "gauge", []string{"instance="}},
			{"tandem_http_shed_requests_total", "counter", nil},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				if got := s.types[tt.name]; got != tt.typ {
					t.Fatalf("got type %q, want %s", got, tt.typ)
				}
				name := tt.name
				if tt.typ == "histogram" {
					name += "_count"
				}
				if !s.has(name, tt.labels...) {
					t.Errorf("got samples %v, want one with labels %v", s.samples[name], tt.labels)
				}
			})
		}
	})

	t.Run("KillSwitchGaugeFollowsTheSwitch", func(t *testing.T) {
		for pod, want := range map[string]string{podA: "0", podB: "1"} {
			line := fmt.Sprintf("tandem_pod_kill_switch{pod=%q} %s", pod, want)
			if !strings.Contains(s.text, line+"\n") {
				t.Errorf("got no line %q in /metrics, want it (pod B killed, pod A not)", line)
			}
		}
		line := fmt.Sprintf("tandem_pod_source_of_truth{pod=%q,store=\"redis\"} 1", podB)
		if !strings.Contains(s.text, line+"\n") {
			t.Errorf("got no line %q in /metrics, want it", line)
		}
	})

	t.Run("AlertRulesUseOnlyExportedMetrics", func(t *testing.T) {
		// Counter vectors show in /metrics only after their first event
		// (a retried transaction, a claim in the two-system window).
		afterFirstEvent := map[string]bool{"tandem_mysql_tx_retries_total": true, "tandem_redis_two_system_window_total": true}
		metricName := regexp.MustCompile(`\b(?:tandem|go|process)_[a-z0-9_]+\b`)
		exprs := alertRuleExprs(t, "../../../../deploy/prometheus/alerts.yml")
		if len(exprs) < 10 {
			t.Fatalf("got %d alerts, want those of docs/operations.md", len(exprs))
		}
		for alert, expr := range exprs {
			for _, n := range metricName.FindAllString(expr, -1) {
				if _, ok := s.family(n); !ok && !afterFirstEvent[n] {
					t.Errorf("got alert %s using %s, which /metrics does not export", alert, n)
				}
			}
		}
	})

	t.Run("GrafanaDashboardUsesOnlyExportedMetrics", func(t *testing.T) {
		exprs := mustDashboardExprs(t, "../../../../deploy/grafana/tandem.json")
		metricName := regexp.MustCompile(`\b(?:tandem|go|process)_[a-z0-9_]+\b`)
		used := map[string]bool{}
		for _, e := range exprs {
			names := metricName.FindAllString(e.expr, -1)
			if len(names) == 0 {
				t.Errorf("got panel %q expression %q with no metric, want one", e.panel, e.expr)
			}
			for _, n := range names {
				fam, ok := s.family(n)
				if !ok {
					t.Errorf("got panel %q using %s, which /metrics does not export", e.panel, n)
					continue
				}
				used[fam] = true
			}
		}
		for _, want := range []string{
			"tandem_divergences_total", "tandem_comparisons_total", "tandem_http_request_duration_seconds",
			"tandem_store_latency_seconds", "tandem_pod_source_of_truth", "tandem_pod_kill_switch",
			"tandem_mysql_conn_hold_seconds", "tandem_mysql_pool_in_use_connections", "tandem_redis_pool_connections",
			"tandem_http_shed_requests_total",
		} {
			if !used[want] {
				t.Errorf("got no panel using %s, want one", want)
			}
		}
	})
}

// alertRuleExprs returns the expression of every alert of a rules file.
func alertRuleExprs(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	out := map[string]string{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			out[r.Alert] = r.Expr
		}
	}
	return out
}

// panelExpr is one PromQL expression of a dashboard panel.
type panelExpr struct{ panel, expr string }

// mustDashboardExprs parses a Grafana dashboard and returns the PromQL of
// every target of every panel (rows included).
func mustDashboardExprs(t *testing.T, path string) []panelExpr {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read the dashboard: %v", err)
	}
	type panel struct {
		Title   string `json:"title"`
		Type    string `json:"type"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"`
	}
	var d struct {
		Title  string            `json:"title"`
		UID    string            `json:"uid"`
		Panels []json.RawMessage `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("parse the dashboard: %v", err)
	}
	if d.Title == "" || d.UID == "" {
		t.Errorf("got title %q uid %q, want both", d.Title, d.UID)
	}
	var out []panelExpr
	var walk func([]json.RawMessage)
	walk = func(ps []json.RawMessage) {
		for _, raw := range ps {
			var p panel
			if err := json.Unmarshal(raw, &p); err != nil {
				t.Fatalf("parse a panel: %v", err)
			}
			if p.Type != "row" && len(p.Targets) == 0 {
				t.Errorf("got panel %q with no target, want at least one", p.Title)
			}
			for _, tg := range p.Targets {
				out = append(out, panelExpr{p.Title, tg.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, a := range mustDashboardAnnotations(t, path) {
		if a.Expr == "" {
			t.Errorf("got annotation %q with no expression, want one", a.Name)
		}
		out = append(out, panelExpr{"annotation " + a.Name, a.Expr})
	}
	if len(out) == 0 {
		t.Fatal("got no panel expression, want some")
	}
	slices.SortFunc(out, func(a, b panelExpr) int { return strings.Compare(a.panel, b.panel) })
	return out
}
