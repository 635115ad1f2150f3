package server_test

import (
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/tandemhq/tandem/internal/testenv"
)

// TestE2EAnswersExplain checks, on a real server, that a refused change
// names the way forward, that the pod status and a dry run give each gate's
// value and threshold, and how tandemctl shows them.
func TestE2EAnswersExplain(t *testing.T) {
	testenv.RequireIntegration(t)
	cfg, _ := MustConfig(t)
	in := MustRunMain(t, cfg)
	podA, podB := cfg.Pods[0].Name, cfg.Pods[1].Name // shadow, redis

	t.Run("RefusalNamesTheWayForward", func(t *testing.T) {
		in.Admin.tb = t
		e := in.Admin.mustErr(http.MethodPut, "/admin/pods/"+podB+"/mode", obj{"mode": "mysql", "reason": "skip"},
			http.StatusConflict, "transition_refused")
		want := "pod " + podB + " cannot go from redis to mysql: redis -> shadow first"
		if msg, _ := e["message"].(string); !strings.Contains(msg, want) {
			t.Errorf("got message %q, want it to contain %q", msg, want)
		}
		details, _ := e["details"].(obj)
		if got := strs(details["allowed"]); !reflect.DeepEqual(got, []string{"shadow"}) {
			t.Errorf("got details.allowed %v, want [shadow]", got)
		}
	})

	t.Run("PodGivesEachGateAgainstItsThreshold", func(t *testing.T) {
		in.Admin.tb = t
		gates, _ := podStatus(in.Admin, podA)["gates"].(obj)
		checks := asSlice(gates["checks"])
		if len(checks) != 3 {
			t.Fatalf("got checks %v, want min_comparisons, max_divergence_rate and audit_clean", gates["checks"])
		}
		// Named as in failed_gates: one vocabulary.
		want := map[string]float64{"min_comparisons": float64(cfg.Rollout.GateMinComparisons),
			"max_divergence_rate": cfg.Rollout.GateMaxDivergenceRate, "audit_clean": 1}
		for _, c := range checks {
			c := c.(obj)
			gate, _ := c["gate"].(string)
			if th, _ := c["threshold"].(float64); th != want[gate] {
				t.Errorf("got gate %q threshold %v, want %v", gate, c["threshold"], want[gate])
			}
		}
		if c := checks[0].(obj); c["passing"] != false || !strings.Contains(c["missing"].(string), "more comparisons") {
			t.Errorf("got %v, want a failing min_comparisons gate saying how many more", c)
		}
	})

	t.Run("DryRunGivesTheChecks", func(t *testing.T) {
		in.Admin.tb = t
		d := in.Admin.must(http.MethodPut, "/admin/pods/"+podA+"/mode", obj{"mode": "mysql", "reason": "check", "dry_run": true}, http.StatusOK)
		if d["would_apply"] != false || len(asSlice(d["checks"])) != 3 || !strings.Contains(d["message"].(string), "gates inconclusive") {
			t.Errorf("got %v, want a refused verdict with three checks and why", d)
		}
		if got := strs(d["allowed"]); !reflect.DeepEqual(got, []string{"redis", "mysql"}) {
			t.Errorf("got allowed %v, want [redis mysql]", got)
		}
	})

	t.Run("Tandemctl", func(t *testing.T) {
		bin := mustBuildTandemctl(t)
		r := runCtl(t, bin, in.AdminURL, in.AdminToken, "mode", podA, "mysql", "--reason", "check", "--dry-run")
		if r.code != 1 || !strings.Contains(r.stdout, "GATE") || !strings.Contains(r.stdout, "more comparisons") {
			t.Errorf("got exit %d, stdout %q; want 1 and the gate table", r.code, r.stdout)
		}
		if r := runCtl(t, bin, in.AdminURL, in.AdminToken, "audit", podA, "--fail-on-drift"); r.code != 0 {
			t.Errorf("got exit %d (%s) for a clean audit with --fail-on-drift, want 0", r.code, r.stderr)
		}
		if r := runCtl(t, bin, in.AdminURL, in.AdminToken, "mode", podB, "mysql", "--reason", "skip"); r.code != 1 ||
			!strings.Contains(r.stderr, "redis -> shadow first") || !strings.Contains(r.stderr, "allowed: shadow") {
			t.Errorf("got exit %d, stderr %q; want 1, the way forward and the allowed modes", r.code, r.stderr)
		}
	})
}
