package benchcmd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tandemhq/tandem/internal/bench"
	"github.com/tandemhq/tandem/internal/cli"
	"github.com/tandemhq/tandem/internal/testenv"
)

func TestBenchHTTP(t *testing.T) {
	testenv.RequireIntegration(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stdout, stderr, err := runBench(ctx, "http", "--duration", "300ms", "--concurrency", "2", "--modes", "redis,shadow", "--repeat", "2",
		"--mysql-dsn", testenv.RootDSN(), "--redis-addr", testenv.RedisAddr(), "--json")
	if err != nil {
		t.Fatalf("got %v, want success; stderr:\n%s", err, stderr)
	}
	var out struct {
		Run     map[string]any   `json:"run"`
		Results []map[string]any `json:"results"`
	}
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatalf("got output %q, want JSON: %v", stdout, err)
	}
	for _, key := range []string{"command", "started_at", "load1_start", "load1_end", "cpus"} {
		if _, ok := out.Run[key]; !ok {
			t.Errorf("got no run.%s in %v, want it", key, out.Run)
		}
	}
	if len(out.Results) != 4 {
		t.Fatalf("got %d results, want 4 (one per mode and round)", len(out.Results))
	}
	for i, mode := range []string{"redis", "shadow", "redis", "shadow"} {
		r := out.Results[i]
		t.Run(fmt.Sprintf("%s-%d", mode, i/2+1), func(t *testing.T) {
			if r["round"] != float64(i/2+1) {
				t.Errorf("got round %v, want %d (the modes interleaved)", r["round"], i/2+1)
			}
			for _, key := range []string{"suite", "mode", "items", "cart_size", "concurrency", "rate", "mysql_latency_ms",
				"ops_per_sec", "p50_ms", "p99_ms", "p999_ms", "errors", "shadow_p99_ms", "shadow_drops", "shadow_timeouts",
				"cpu_us_per_op", "cpu_user_us_per_op", "cpu_sys_us_per_op"} {
				if _, ok := r[key]; !ok {
					t.Errorf("got no %q in %v, want it", key, r)
				}
			}
			if r["suite"] != "http" || r["mode"] != mode {
				t.Errorf("got suite %v mode %v, want http %s", r["suite"], r["mode"], mode)
			}
			if r["concurrency"] != 2.0 || r["items"] != 1.0 || r["cart_size"] != 1.0 || r["rate"] != 0.0 {
				t.Errorf("got concurrency %v items %v cart_size %v rate %v, want 2 1 1 0",
					r["concurrency"], r["items"], r["cart_size"], r["rate"])
			}
			if ops, _ := r["ops_per_sec"].(float64); ops <= 0 {
				t.Errorf("got ops_per_sec %v, want > 0", r["ops_per_sec"])
			}
			if r["errors"] != 0.0 {
				t.Errorf("got %v errors, want 0; stderr:\n%s", r["errors"], stderr)
			}
		})
	}
	// The in-process server's MySQL shadow holds connections in shadow mode.
	if holds, _ := out.Results[1]["conn_hold_p99_ms"].(map[string]any); holds["reserve"] == nil {
		t.Errorf("shadow mode: got conn_hold_p99_ms %v, want the reserve tag's", out.Results[1]["conn_hold_p99_ms"])
	}
	if got := out.Results[0]["shadow_p99_ms"]; got != 0.0 {
		t.Errorf("redis mode: got shadow_p99_ms %v, want 0 (no shadow)", got)
	}
}

func TestBenchHTTPKillSwitch(t *testing.T) {
	testenv.RequireIntegration(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stdout, stderr, err := runBench(ctx, "http", "--killswitch", "4",
		"--mysql-dsn", testenv.RootDSN(), "--redis-addr", testenv.RedisAddr(), "--json")
	if err != nil {
		t.Fatalf("got %v, want success; stderr:\n%s", err, stderr)
	}
	var out struct {
		Results []bench.KillSwitchResult `json:"results"`
	}
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatalf("got output %q, want JSON: %v", stdout, err)
	}
	if len(out.Results) != 1 {
		t.Fatalf("got %d results, want 1", len(out.Results))
	}
	r := out.Results[0]
	if r.Suite != "killswitch" || r.Toggles != 4 || r.Errors != 0 {
		t.Errorf("got suite %q toggles %d errors %d, want killswitch 4 0; stderr:\n%s", r.Suite, r.Toggles, r.Errors, stderr)
	}
	if r.MaxMS <= 0 || r.P50MS > r.P99MS || r.P99MS > r.MaxMS {
		t.Errorf("got p50 %v p99 %v max %v, want 0 < p50 <= p99 <= max", r.P50MS, r.P99MS, r.MaxMS)
	}
}

func TestBenchHTTPUsage(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"UnknownMode", []string{"--modes", "redis,postgres"}},
		{"ZeroConcurrency", []string{"--concurrency", "0"}},
		{"NegativeRate", []string{"--rate", "-1"}},
		{"RateOfMySQLWithRate", []string{"--rate-of-mysql", "0.5", "--rate", "100"}},
		{"NegativeRateOfMySQL", []string{"--rate-of-mysql", "-0.5"}},
		{"NegativeKillSwitch", []string{"--killswitch", "-1"}},
		{"UnknownFlag", []string{"--stores", "redis"}},
		{"Argument", []string{"extra"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, stderr, err := runBench(context.Background(), append([]string{"http"}, tc.args...)...); !errors.Is(err, cli.ErrUsage) {
				t.Errorf("got %v, want a usage error (exit 2); stderr:\n%s", err, stderr)
			}
		})
	}
}

// runBench runs `tandem bench args...` and returns what it printed and
// its error.
func runBench(ctx context.Context, args ...string) (stdout, stderr string, err error) {
	var out, errOut bytes.Buffer
	err = Run(ctx, args, &out, &errOut)
	return out.String(), errOut.String(), err
}

// TestBenchPlan runs `tandem bench plan` on a small pod: the pod must reach
// its shadow soak, its holds copied, and be audited clean there (the
// audit compares each position's holds in both stores with the ledger).
func TestBenchPlan(t *testing.T) {
	testenv.RequireIntegration(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stdout, stderr, err := runBench(ctx, "plan", "--holds", "3000", "--shops", "30",
		"--mysql-dsn", testenv.RootDSN(), "--redis-addr", testenv.RedisAddr(), "--json")
	if err != nil {
		t.Fatalf("got %v, want success; stderr:\n%s", err, stderr)
	}
	var r bench.PlanEntryResult
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("got output %q, want JSON: %v", stdout, err)
	}
	if r.Suite != "plan" || r.Holds != 3000 || r.Shops != 30 || r.Run == nil {
		t.Errorf("got suite %q holds %d shops %d run %v, want plan 3000 30 and the run", r.Suite, r.Holds, r.Shops, r.Run)
	}
	if r.SoakSeconds <= 0 || r.ShadowSeconds <= 0 || r.ShadowSeconds > r.SoakSeconds {
		t.Errorf("got shadow after %.2fs and soak after %.2fs, want both, shadow first", r.ShadowSeconds, r.SoakSeconds)
	}
	var steps []string
	for _, s := range r.Steps {
		steps = append(steps, s.Step)
	}
	// A copy this small may end within the mode change's wait, before the
	// bench sees the step backfill.
	if len(steps) == 0 || steps[len(steps)-1] != "shadow_soak" || slices.Contains(steps, "aborted") {
		t.Errorf("got steps %v, want them ending in shadow_soak", steps)
	}
	if !r.AuditClean || r.AuditChecked != 30 {
		t.Errorf("got audit clean %v over %d positions, want clean over 30", r.AuditClean, r.AuditChecked)
	}
}
