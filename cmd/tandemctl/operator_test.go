package main_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	main "github.com/tandemhq/tandem/cmd/tandemctl"
)

const checksJSON = `[{"gate":"min_comparisons","value":660,"threshold":1000,"passing":false,"missing":"340 more comparisons in the 15m window"},` +
	`{"gate":"max_divergence_rate","value":0.0005,"threshold":0.001,"passing":true},` +
	`{"gate":"audit_clean","value":0,"threshold":1,"passing":false,"missing":"no audit yet: run tandemctl audit pod-a"}]`

// TestExplainingAnswers checks how tandemctl shows gate checks, allowed
// next modes and drift.
func TestExplainingAnswers(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		status   int
		answer   string
		wantCode int
		wantOut  []string
		wantErr  []string
	}{
		{"DryRunPrintsChecksAsATable", []string{"mode", "pod-a", "mysql", "--reason", "r", "--dry-run"}, 200,
			`{"would_apply":false,"failed_gates":["min_comparisons","audit_clean"],"allowed":["redis","mysql"],` +
				`"message":"pod pod-a cannot go from shadow to mysql: gates failing: comparisons 660 of 1000","checks":` + checksJSON + `}`,
			1,
			[]string{"would be REFUSED", "allowed next: redis, mysql", "why:          pod pod-a cannot go from shadow to mysql",
				"GATE                 VALUE       THRESHOLD        STATUS  MISSING",
				"min_comparisons      660         >= 1000          FAIL    340 more comparisons in the 15m window",
				"max_divergence_rate  0.050%      <= 0.100%        pass    -",
				"audit_clean          none clean  clean in window  FAIL    no audit yet: run tandemctl audit pod-a"},
			[]string{"would be refused (failed gates: min_comparisons,audit_clean)"}},
		{"DryRunThatApplies", []string{"mode", "pod-a", "shadow", "--reason", "r", "--dry-run"}, 200,
			`{"would_apply":true,"failed_gates":[],"allowed":["shadow"]}`, 0,
			[]string{"would apply", "failed gates: none", "allowed next: shadow"}, nil},
		{"RefusalShowsAllowedAndChecks", []string{"mode", "pod-a", "mysql", "--reason", "r"}, 409,
			`{"error":{"code":"transition_refused","message":"pod pod-a cannot go from shadow to mysql: gates failing","details":{"allowed":["redis","mysql"],"failed_gates":["min_comparisons"],"checks":` + checksJSON + `}}}`,
			1, nil,
			[]string{"transition_refused: pod pod-a cannot go from shadow to mysql", "  allowed: redis, mysql",
				"  gate min_comparisons: 660 (threshold >= 1000) FAIL: 340 more comparisons in the 15m window",
				"  gate max_divergence_rate: 0.050% (threshold <= 0.100%) pass\n", "  failed_gates: min_comparisons"}},
		{"OnePodShowsItsChecks", []string{"pods", "pod-a"}, 200,
			strings.Replace(podAnswer, `"failed_gates":["min_comparisons"]}`, `"failed_gates":["min_comparisons"],"checks":`+checksJSON+`}`, 1), 0,
			[]string{"pod-a", "min_comparisons      660", "340 more comparisons"}, nil},
		{"KilledPodShowsNoGates", []string{"pods", "pod-a"}, 200,
			strings.Replace(strings.Replace(podAnswer, `"kill_switch":false`, `"kill_switch":true`, 1),
				`"failed_gates":["min_comparisons"]}`, `"failed_gates":["min_comparisons"],"checks":`+checksJSON+`}`, 1), 0,
			[]string{"n/a (killed)", "gates: n/a while the kill switch is engaged (Redis serves pod-a whatever they say)"}, nil},
		{"AuditDriftFailsOnDrift", []string{"audit", "pod-a", "--fail-on-drift"}, 200,
			`{"pod":"pod-a","at":"2026-11-30T10:00:00Z","checked":12,"clean":false,"drifted":[{"shop_id":1,"inventory_item_id":2,"group_id":3,"ledger_on_hand":10,"redis_available":4,"mysql_available":5}]}`,
			main.ExitDrift, []string{"DRIFT in 1 positions"}, []string{"drift: 1 of 12 positions of pod pod-a disagree"}},
		{"AuditDriftWithoutTheFlag", []string{"audit", "pod-a"}, 200,
			`{"pod":"pod-a","at":"2026-11-30T10:00:00Z","checked":12,"clean":false,"drifted":[{"shop_id":1,"inventory_item_id":2,"group_id":3,"ledger_on_hand":10,"redis_available":4,"mysql_available":5}]}`,
			0, []string{"DRIFT in 1 positions"}, nil},
		{"AuditCleanPassesWithTheFlag", []string{"audit", "pod-a", "--fail-on-drift"}, 200,
			`{"pod":"pod-a","at":"2026-11-30T10:00:00Z","checked":12,"clean":true,"drifted":[]}`, 0, []string{"clean"}, nil},
		{"AuditDriftFailsOnDriftWithJSON", []string{"--json", "audit", "pod-a", "--fail-on-drift"}, 200,
			`{"pod":"pod-a","at":"2026-11-30T10:00:00Z","checked":12,"clean":false,"drifted":[]}`, main.ExitDrift, []string{`"clean":false`}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := newFakeAPI(t, tt.status, tt.answer)
			code, stdout, stderr := run(t, envFor(api.URL), tt.args...)
			if code != tt.wantCode {
				t.Fatalf("got exit %d, want %d\nstdout: %s\nstderr: %s", code, tt.wantCode, stdout, stderr)
			}
			for _, want := range tt.wantOut {
				if !strings.Contains(stdout, want) {
					t.Errorf("got stdout\n%s\nwant it to contain %q", stdout, want)
				}
			}
			for _, want := range tt.wantErr {
				if !strings.Contains(stderr, want) {
					t.Errorf("got stderr\n%s\nwant it to contain %q", stderr, want)
				}
			}
		})
	}
}

// TestPodsWatch checks that pods --watch refreshes until interrupted and
// then exits 0: the fake API interrupts it at its third answer.
func TestPodsWatch(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/admin/pods" {
			t.Errorf("got %s, want /admin/pods", r.URL.Path)
		}
		if n.Add(1) == 3 {
			cancel() // the operator's Ctrl-C
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, podsAnswer)
	}))
	defer srv.Close()
	var stdout, stderr bytes.Buffer
	m := main.NewMain()
	env := envFor(srv.URL)
	m.Env = func(k string) string { return env[k] }
	m.Stdout, m.Stderr = &stdout, &stderr
	code := m.Run(ctx, []string{"pods", "--watch", "--interval", "1ms"})
	if code != 0 {
		t.Fatalf("got exit %d (stderr %q), want 0 after the interrupt", code, stderr.String())
	}
	if got := int(n.Load()); got != 3 {
		t.Errorf("got %d refreshes, want 3", got)
	}
	if got := strings.Count(stdout.String(), "every 1ms, Ctrl-C stops"); got < 2 {
		t.Errorf("got %d refresh headers in\n%s\nwant at least 2", got, stdout.String())
	}
	if got := strings.Count(stdout.String(), "POD "); got < 2 {
		t.Errorf("got %d tables, want at least 2", got)
	}

	t.Run("BadTokenEndsIt", func(t *testing.T) {
		api := newFakeAPI(t, 401, `{"error":{"code":"unauthorized","message":"bad token","details":{}}}`)
		code, _, stderr := run(t, envFor(api.URL), "pods", "--watch", "--interval", "1ms")
		if code != 1 || !strings.Contains(stderr, "unauthorized") {
			t.Errorf("got exit %d, stderr %q; want 1 and unauthorized", code, stderr)
		}
	})
	t.Run("IntervalMustBePositive", func(t *testing.T) {
		api := newFakeAPI(t, 200, podsAnswer)
		if code, _, _ := run(t, envFor(api.URL), "pods", "--watch", "--interval", "0s"); code != 2 {
			t.Errorf("got exit %d, want 2", code)
		}
	})
}

// TestResyncGuard: resync warns when the pod took traffic in its recent
// window and, on a terminal without --yes, asks first; a no changes
// nothing. A script (no terminal) is warned and goes on.
func TestResyncGuard(t *testing.T) {
	const pod = `{"pod":"pod-a","mode":"mysql_only","source_of_truth":"mysql","shadow":"","kill_switch":false,"shops":"1-3",` +
		`"updated_at":"2026-11-30T10:00:00Z","gates":{},"abort":{"window":"1m","comparisons":12,"armed":true}}`
	tests := []struct {
		name        string
		interactive bool
		answer      string
		yes         bool
		wantCode    int
		wantPOST    bool
		wantAsked   bool
	}{
		{name: "TerminalNo", interactive: true, answer: "n\n", wantCode: 1, wantAsked: true},
		{name: "TerminalEmpty", interactive: true, answer: "", wantCode: 1, wantAsked: true},
		{name: "TerminalYes", interactive: true, answer: "yes\n", wantPOST: true, wantAsked: true},
		{name: "TerminalFlagYes", interactive: true, yes: true, wantPOST: true},
		{name: "Script", wantPOST: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var posted bool
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				if r.Method == http.MethodPost {
					posted = true
					io.WriteString(w, `{"pod":"pod-a","keys_rewritten":42}`)
					return
				}
				io.WriteString(w, pod)
			}))
			defer srv.Close()
			args := []string{"resync", "pod-a", "--from", "mysql", "--reason", "r"}
			if tt.yes {
				args = append(args, "--yes")
			}
			code, _, stderr := runWith(t, envFor(srv.URL), func(m *main.Main) {
				m.Interactive = func() bool { return tt.interactive }
				m.Stdin = strings.NewReader(tt.answer)
			}, args...)
			if code != tt.wantCode || posted != tt.wantPOST {
				t.Errorf("got exit %d, posted %v; want %d, %v (stderr %q)", code, posted, tt.wantCode, tt.wantPOST, stderr)
			}
			if !strings.Contains(stderr, "warning: pod-a took traffic in the last 1m (12 dual-written requests)") {
				t.Errorf("got stderr %q, want the traffic warning", stderr)
			}
			if asked := strings.Contains(stderr, "[y/N]"); asked != tt.wantAsked {
				t.Errorf("got asked %v, want %v (stderr %q)", asked, tt.wantAsked, stderr)
			}
		})
	}
}

// TestDivergencesWatch: divergences --group --watch refreshes the groups
// until interrupted, which ends it with exit 0.
func TestDivergencesWatch(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/admin/divergences/summary" || r.URL.Query().Get("pod") != "pod-a" {
			t.Errorf("got %s?%s, want /admin/divergences/summary?pod=pod-a", r.URL.Path, r.URL.RawQuery)
		}
		if n.Add(1) == 2 {
			cancel() // the operator's Ctrl-C
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"groups":[],"sampled":0,"truncated":false}`)
	}))
	defer srv.Close()
	var stdout, stderr bytes.Buffer
	m := main.NewMain()
	env := envFor(srv.URL)
	m.Env = func(k string) string { return env[k] }
	m.Stdout, m.Stderr = &stdout, &stderr
	if code := m.Run(ctx, []string{"divergences", "--group", "--pod", "pod-a", "--watch", "--interval", "1ms"}); code != 0 {
		t.Fatalf("got exit %d (stderr %q), want 0 after the interrupt", code, stderr.String())
	}
	if got := strings.Count(stdout.String(), "no divergences"); got < 1 || n.Load() != 2 {
		t.Errorf("got %d requests and\n%s\nwant 2 refreshes", n.Load(), stdout.String())
	}
}
