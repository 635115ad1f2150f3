package main_test

import (
	"reflect"
	"strings"
	"testing"
)

const planAnswer = `{"phase":"running","driver":"i-1","lease_until":"2026-11-30T10:00:10Z",` +
	`"settings":{"shadow_soak":"30m0s","mysql_soak":"30m0s","final_mode":"mysql","parallel":1,"approval":false},` +
	`"waiting":"pod-b: soaking in mysql until 2026-11-30T10:30:00Z","pods":[` +
	`{"pod":"pod-b","mode":"mysql","step":"mysql_soak","soak_until":"2026-11-30T10:30:00Z","gates":{"passing":true,"checks":[{"gate":"min_soak","value":60,"threshold":1800,"passing":false,"missing":"29m0s more soak"}]}},` +
	`{"pod":"pod-a","mode":"redis","step":"pending","gates":{"passing":false,"checks":[]}},` +
	`{"pod":"pod-c","mode":"redis","step":"pending","gates":{"passing":false,"checks":[]}}],` +
	`"order":["pod-b","pod-a","pod-c"],"promoted":["pod-b"]}`

// planGatesAnswer is a pod in its shadow soak with every gate of the plan,
// values as the server measures them (not rounded).
const planRehearsalAnswer = `{"phase":"running","settings":{"shadow_soak":"30m0s","mysql_soak":"30m0s","final_mode":"mysql","parallel":1,"approval":false,` +
	`"rehearsal":{"speed":3,"p99_max":"50ms"}},"pods":[],"order":[],"promoted":[]}`

const planGatesAnswer = `{"phase":"running","settings":{"shadow_soak":"30s","mysql_soak":"30s","final_mode":"mysql","parallel":1,"approval":false},` +
	`"pods":[{"pod":"pod-a","mode":"shadow","source_of_truth":"redis","kill_switch":false,"step":"shadow_soak","soak_until":"2026-11-30T10:00:30Z",` +
	`"gates":{"passing":false,"checks":[` +
	`{"gate":"min_comparisons","value":1200,"threshold":1000,"passing":true},` +
	`{"gate":"max_divergence_rate","value":0.0005,"threshold":0.001,"passing":true},` +
	`{"gate":"audit_clean","value":1,"threshold":1,"passing":true},` +
	`{"gate":"mysql_p99_factor","value":9.6,"threshold":7.62,"passing":false,"missing":"MySQL p99 9.60ms is over 3.00x Redis's p99 of 2.54ms (7.62ms)"},` +
	`{"gate":"mysql_error_rate","value":0.00012345,"threshold":0.001,"passing":true},` +
	`{"gate":"min_soak","value":6.680839197,"threshold":30,"passing":false,"missing":"23s more soak"}]}}],` +
	`"order":["pod-a"],"promoted":[]}`

// planKilledAnswer has pod-b in mysql with its kill switch engaged: Redis
// answers its buyers.
const planKilledAnswer = `{"phase":"running","settings":{"shadow_soak":"30s","mysql_soak":"30s","final_mode":"mysql","parallel":1,"approval":false},` +
	`"pods":[{"pod":"pod-a","mode":"mysql","source_of_truth":"mysql","kill_switch":false,"step":"done","gates":{"passing":true,"checks":[]}},` +
	`{"pod":"pod-b","mode":"mysql","source_of_truth":"redis","kill_switch":true,"step":"mysql_soak","soak_until":"2026-11-30T10:00:30Z","gates":{"passing":true,"checks":[]}},` +
	`{"pod":"pod-c","mode":"shadow","source_of_truth":"redis","kill_switch":false,"step":"pending","gates":{"passing":false,"checks":[]}}],` +
	`"order":["pod-a","pod-b","pod-c"],"promoted":["pod-a","pod-b"]}`

func TestPlan(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		status     int
		answer     string
		wantCode   int
		wantMethod string
		wantPath   string
		wantBody   map[string]any
		wantOut    []string
		wantErr    []string
	}{
		{name: "StatusTable", args: []string{"plan"}, status: 200, answer: planAnswer,
			wantMethod: "GET", wantPath: "/admin/plan",
			wantOut: []string{"plan:        running\n", "driver:      i-1 (lease until 2026-11-30T10:00:10Z)\n",
				"waiting:     pod-b: soaking in mysql until 2026-11-30T10:30:00Z\n",
				"settings:    shadow soak 30m0s, mysql soak 30m0s, final mode mysql, parallel 1, approval false\n",
				"ORDER  POD    MODE   SOT    STEP        SOAK_LEFT  GATES", "1      pod-b  mysql  mysql  mysql_soak", "2      pod-a  redis  redis  pending",
				"pod-b gates:\n", "min_soak  FAIL  value 1m  threshold >= 30m  (29m0s more soak)", "eta:         about ",
				"on mysql:    1 of 3 pods as source of truth\n"}},
		{name: "GateValuesInTheirUnits", args: []string{"plan"}, status: 200, answer: planGatesAnswer,
			wantMethod: "GET", wantPath: "/admin/plan",
			wantOut: []string{"min_comparisons      pass  value 1200    threshold >= 1000",
				"max_divergence_rate  pass  value 0.050%  threshold <= 0.100%",
				"audit_clean          pass  value clean   threshold clean in window",
				"mysql_p99_factor     FAIL  value 9.60ms  threshold <= 7.62ms",
				"mysql_error_rate     pass  value 0.012%  threshold <= 0.100%",
				"min_soak             FAIL  value 6.7s    threshold >= 30s  (23s more soak)"}},
		{name: "KilledPodCountsOnRedis", args: []string{"plan"}, status: 200, answer: planKilledAnswer,
			wantMethod: "GET", wantPath: "/admin/plan",
			wantOut: []string{"on mysql:    1 of 3 pods as source of truth (killed, served by Redis: pod-b)\n",
				"1      pod-a  mysql   mysql           done", "2      pod-b  mysql   redis (killed)  mysql_soak  ",
				"n/a (killed)", "pod-b gates: n/a while its kill switch is engaged\n"}},
		{name: "StatusIdleNoPods", args: []string{"plan"}, status: 200, answer: `{"phase":"idle","order":[],"promoted":[],"pods":[]}`,
			wantMethod: "GET", wantPath: "/admin/plan", wantOut: []string{"plan:        idle\n", "no pods\n"}},
		{name: "Start", args: []string{"plan", "start", "--reason", "gates green"}, status: 200, answer: planAnswer,
			wantMethod: "POST", wantPath: "/admin/plan/start", wantBody: map[string]any{"reason": "gates green"},
			wantOut: []string{"plan:        running"}},
		{name: "PauseFlagFirst", args: []string{"plan", "--reason=peak hours", "pause"}, status: 200,
			answer:     `{"phase":"paused","pods":[{"pod":"pod-b","mode":"shadow","step":"shadow_soak","gates":{"passing":true,"checks":[]}}],"waiting":"paused by alice: peak hours"}`,
			wantMethod: "POST", wantPath: "/admin/plan/pause", wantBody: map[string]any{"reason": "peak hours"},
			wantOut: []string{"plan:        paused", "paused by alice: peak hours", "pod-b  shadow  redis  shadow_soak"}},
		{name: "Abort", args: []string{"plan", "abort", "--reason", "divergences"}, status: 200,
			answer:     `{"phase":"aborted","pods":[{"pod":"pod-b","mode":"mysql","step":"aborted","gates":{"passing":false,"checks":[]}}],"waiting":"aborted by alice: divergences"}`,
			wantMethod: "POST", wantPath: "/admin/plan/abort", wantBody: map[string]any{"reason": "divergences"},
			wantOut: []string{"plan:        aborted", "pod-b  mysql  mysql  aborted"}},
		{name: "Resume", args: []string{"plan", "resume", "--reason", "after peak"}, status: 200, answer: planAnswer,
			wantMethod: "POST", wantPath: "/admin/plan/resume", wantBody: map[string]any{"reason": "after peak"},
			wantOut: []string{"plan:        running"}},
		{name: "Approve", args: []string{"plan", "approve", "pod-b", "--reason", "looks good"}, status: 200, answer: planAnswer,
			wantMethod: "POST", wantPath: "/admin/plan/approve", wantBody: map[string]any{"reason": "looks good", "pod": "pod-b"},
			wantOut: []string{"plan:        running"}},
		{name: "StartWithSettings", args: []string{"plan", "start", "--reason", "r", "--shadow-soak", "5m", "--parallel", "2", "--approval", "true"},
			status: 200, answer: planAnswer, wantMethod: "POST", wantPath: "/admin/plan/start",
			wantBody: map[string]any{"reason": "r", "shadow_soak": "5m", "parallel": float64(2), "approval": true},
			wantOut:  []string{"plan:        running"}},
		{name: "StartWithRehearsal", args: []string{"plan", "start", "--reason", "r", "--rehearsal-speed", "3", "--rehearsal-p99-max", "50ms"},
			status: 200, answer: planRehearsalAnswer, wantMethod: "POST", wantPath: "/admin/plan/start",
			wantBody: map[string]any{"reason": "r", "rehearsal": map[string]any{"speed": float64(3), "p99_max": "50ms"}},
			wantOut:  []string{"rehearsal:   each pod's latest capture at 3x, every op's p99 under 50ms"}},
		{name: "StartWhileRunningFails", args: []string{"plan", "start", "--reason", "r"}, status: 409,
			answer:   `{"error":{"code":"conflict","message":"the rollout plan is already running","details":{"phase":"running"}}}`,
			wantCode: 1, wantMethod: "POST", wantPath: "/admin/plan/start", wantBody: map[string]any{"reason": "r"},
			wantErr: []string{"conflict: the rollout plan is already running", `phase: "running"`}},
		{name: "NoPlanOnServerFails", args: []string{"plan"}, status: 404,
			answer:   `{"error":{"code":"not_found","message":"this server runs no rollout plan","details":{}}}`,
			wantCode: 1, wantMethod: "GET", wantPath: "/admin/plan", wantErr: []string{"not_found: this server runs no rollout plan"}},
		{name: "ControlDownFails", args: []string{"plan", "pause", "--reason", "r"}, status: 503,
			answer:   `{"error":{"code":"unavailable","message":"the control database cannot be reached","details":{}}}`,
			wantCode: 1, wantMethod: "POST", wantPath: "/admin/plan/pause", wantBody: map[string]any{"reason": "r"},
			wantErr: []string{"unavailable: the control database cannot be reached"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := newFakeAPI(t, tt.status, tt.answer)
			code, stdout, stderr := run(t, envFor(api.URL), tt.args...)
			if code != tt.wantCode {
				t.Errorf("got exit code %d, want %d (stderr %q)", code, tt.wantCode, stderr)
			}
			reqs := api.requests()
			if len(reqs) != 1 {
				t.Fatalf("got %d requests, want 1", len(reqs))
			}
			r := reqs[0]
			if r.Method != tt.wantMethod || r.Path != tt.wantPath || r.Query != "" {
				t.Errorf("got %s %s?%s, want %s %s", r.Method, r.Path, r.Query, tt.wantMethod, tt.wantPath)
			}
			if r.Auth != "Bearer "+token || r.Actor != "alice" {
				t.Errorf("got Authorization %q X-Actor %q, want the token and alice", r.Auth, r.Actor)
			}
			if !reflect.DeepEqual(r.Body, tt.wantBody) {
				t.Errorf("got body %v, want %v", r.Body, tt.wantBody)
			}
			if tt.wantBody != nil && r.ContentType != "application/json" {
				t.Errorf("got Content-Type %q, want application/json", r.ContentType)
			}
			for _, want := range tt.wantOut {
				if !strings.Contains(stdout, want) {
					t.Errorf("got stdout %q, want it to contain %q", stdout, want)
				}
			}
			for _, want := range tt.wantErr {
				if !strings.Contains(stderr, want) {
					t.Errorf("got stderr %q, want it to contain %q", stderr, want)
				}
			}
			if tt.wantCode == 0 && stderr != "" {
				t.Errorf("got stderr %q, want nothing on success", stderr)
			}
		})
	}
}

func TestPlanJSON(t *testing.T) {
	t.Run("PrintsTheRawAnswer", func(t *testing.T) {
		api := newFakeAPI(t, 200, planAnswer)
		code, stdout, _ := run(t, envFor(api.URL), "plan", "start", "--reason", "r", "--json")
		if code != 0 || stdout != planAnswer+"\n" {
			t.Errorf("got code %d stdout %q, want 0 and the raw answer", code, stdout)
		}
	})
	t.Run("PrintsTheErrorBodyAndFails", func(t *testing.T) {
		answer := `{"error":{"code":"conflict","message":"the rollout plan is idle","details":{"phase":"idle"}}}`
		api := newFakeAPI(t, 409, answer)
		code, stdout, _ := run(t, envFor(api.URL), "--json", "plan", "pause", "--reason", "r")
		if code != 1 || stdout != answer+"\n" {
			t.Errorf("got code %d stdout %q, want 1 and the raw error answer", code, stdout)
		}
	})
}

func TestPlanUsage(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		noToken bool
		wantErr string
	}{
		{name: "StartWithoutReason", args: []string{"plan", "start"}, wantErr: "--reason is required"},
		{name: "AbortEmptyReason", args: []string{"plan", "abort", "--reason", ""}, wantErr: "--reason is required"},
		{name: "UnknownAction", args: []string{"plan", "restart", "--reason", "r"}, wantErr: `unknown plan action "restart"`},
		{name: "TwoActions", args: []string{"plan", "start", "pause", "--reason", "r"}, wantErr: "plan start takes no more arguments"},
		{name: "ApproveWithoutPod", args: []string{"plan", "approve", "--reason", "r"}, wantErr: "plan approve takes POD"},
		{name: "ReasonWithoutAction", args: []string{"plan", "--reason", "r"}, wantErr: "--reason goes with an action"},
		{name: "UnknownFlag", args: []string{"plan", "start", "--force", "--reason", "r"}, wantErr: "flag provided but not defined"},
		{name: "NoToken", args: []string{"plan"}, noToken: true, wantErr: "TANDEM_ADMIN_TOKEN is not set"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := newFakeAPI(t, 200, planAnswer)
			env := envFor(api.URL)
			if tt.noToken {
				delete(env, "TANDEM_ADMIN_TOKEN")
			}
			code, stdout, stderr := run(t, env, tt.args...)
			if code != 2 {
				t.Errorf("got exit code %d, want 2", code)
			}
			if !strings.Contains(stderr, tt.wantErr) || !strings.Contains(stderr, "usage: tandemctl plan") {
				t.Errorf("got stderr %q, want %q and the plan usage", stderr, tt.wantErr)
			}
			if stdout != "" {
				t.Errorf("got stdout %q, want nothing", stdout)
			}
			if n := len(api.requests()); n != 0 {
				t.Errorf("got %d requests, want none for a usage error", n)
			}
		})
	}
	t.Run("HelpListsPlan", func(t *testing.T) {
		code, stdout, _ := run(t, map[string]string{}, "help")
		if code != 0 || !strings.Contains(stdout, "plan [--watch] [start|pause|resume|abort --reason R | approve|skip POD --reason R]") {
			t.Errorf("got code %d stdout %q, want 0 and the plan command", code, stdout)
		}
	})
}
