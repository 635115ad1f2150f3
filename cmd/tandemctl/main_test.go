package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"

	main "github.com/tandemhq/tandem/cmd/tandemctl"
)

const token = "tok-123"

// fakeAPI records every request and answers each with one canned answer.
type fakeAPI struct {
	*httptest.Server
	status int
	answer string

	mu   sync.Mutex
	reqs []recorded
}

type recorded struct {
	Method, Path, Query, Auth, Actor, ContentType string
	Body                                          map[string]any
}

func newFakeAPI(t *testing.T, status int, answer string) *fakeAPI {
	t.Helper()
	f := &fakeAPI{status: status, answer: answer}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := recorded{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery,
			Auth: r.Header.Get("Authorization"), Actor: r.Header.Get("X-Actor"), ContentType: r.Header.Get("Content-Type")}
		raw, _ := io.ReadAll(r.Body)
		if len(raw) > 0 {
			if err := json.Unmarshal(raw, &rec.Body); err != nil {
				t.Errorf("got a request body that is not a JSON object: %q", raw)
			}
		}
		f.mu.Lock()
		f.reqs = append(f.reqs, rec)
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(f.status)
		io.WriteString(w, f.answer)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeAPI) requests() []recorded {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]recorded(nil), f.reqs...)
}

// run runs tandemctl with args against url and returns the exit code and
// what it printed.
func run(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	m := main.NewMain()
	m.Env = func(k string) string { return env[k] }
	m.Stdout, m.Stderr = &stdout, &stderr
	code := m.Run(context.Background(), args)
	return code, stdout.String(), stderr.String()
}

// runWith is run with changes to the Main before it runs.
func runWith(t *testing.T, env map[string]string, configure func(*main.Main), args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	m := main.NewMain()
	m.Env = func(k string) string { return env[k] }
	m.Stdout, m.Stderr = &stdout, &stderr
	configure(m)
	code := m.Run(context.Background(), args)
	return code, stdout.String(), stderr.String()
}

func envFor(url string) map[string]string {
	return map[string]string{"TANDEM_ADMIN_URL": url, "TANDEM_ADMIN_TOKEN": token, "USER": "alice"}
}

// podsAnswer has a pod whose gates pass, a killed one whose last audit
// found drift, and one with no comparison and no audit yet.
const podsAnswer = `{"pods":[{"pod":"pod-a","mode":"shadow","source_of_truth":"redis","shadow":"mysql","kill_switch":false,"shops":"1-3","updated_at":"2026-11-30T10:00:00Z","gates":{"comparisons":1200,"divergence_rate":0.0005,"last_audit_clean":true,"last_audit_at":"2026-11-30T09:59:00Z","passing":true,"failed_gates":[]}},` +
	`{"pod":"pod-b","mode":"mysql","source_of_truth":"redis","shadow":"mysql","kill_switch":true,"shops":"4-9","updated_at":"2026-11-30T10:00:00Z","gates":{"comparisons":3,"divergence_rate":0,"last_audit_clean":false,"last_audit_at":"2026-11-30T09:59:00Z","passing":false,"failed_gates":["min_comparisons","audit_clean"]}},` +
	`{"pod":"pod-c","mode":"shadow","source_of_truth":"redis","shadow":"mysql","kill_switch":false,"shops":"10-12","updated_at":"2026-11-30T10:00:00Z","gates":{"comparisons":0,"divergence_rate":0,"last_audit_clean":false,"last_audit_at":null,"passing":false,"failed_gates":["min_comparisons","audit_clean"]}}]}`

const podAnswer = `{"pod":"pod-a","mode":"shadow","source_of_truth":"redis","shadow":"mysql","kill_switch":false,"shops":"1-3","updated_at":"2026-11-30T10:00:00Z","gates":{"comparisons":0,"divergence_rate":0,"last_audit_clean":true,"passing":false,"failed_gates":["min_comparisons"]},` +
	`"abort":{"window":"1m","comparisons":400,"min_comparisons":200,"divergence_rate":0.06,"mysql_error_rate":0,"threshold":0.01,"would_trip":true,"armed":false}}`

// ksAnswer has pod-b killed first, then pod-a for another reason: the
// switch-wide since is pod-b's and the reason pod-a's.
const ksAnswer = `{"engaged":true,"pods":["pod-a","pod-b"],"since":"2026-11-30T10:00:00Z","reason":"incident 42",` +
	`"engagements":[{"pod":"pod-a","since":"2026-11-30T10:05:00Z","actor":"alice","reason":"incident 42"},` +
	`{"pod":"pod-b","since":"2026-11-30T10:00:00Z","actor":"auto","reason":"divergence rate 0.0506 >= 0.0500"}]}`

// ksOldAnswer is a kill switch answer without engagements.
const ksOldAnswer = `{"engaged":true,"pods":["pod-a"],"since":"2026-11-30T10:00:00Z","reason":"incident 42"}`

func TestCommands(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		status     int
		answer     string
		wantCode   int
		wantMethod string
		wantPath   string
		wantQuery  string
		wantBody   map[string]any // nil: no body
		wantOut    []string       // substrings of stdout
		wantErr    []string       // substrings of stderr
		wantReqs   int            // requests made (0: one); the last is checked
	}{
		{name: "PodsTable", args: []string{"pods"}, status: 200, answer: podsAnswer,
			wantMethod: "GET", wantPath: "/admin/pods",
			wantOut: []string{
				"POD    MODE    SOT    SHADOW  KILL     SHOPS  COMPARISONS  DIV_RATE  AUDIT         GATES                              ABORT  UPDATED\n",
				"pod-a  shadow  redis  mysql   off      1-3    1200         0.050%    clean         pass                               -      2026-11-30T10:00:00Z\n",
				"pod-b  mysql   redis  mysql   ENGAGED  4-9    3            0.000%    not clean     n/a (killed)                       -      2026-11-30T10:00:00Z\n",
				"pod-c  shadow  redis  mysql   off      10-12  0            n/a       no audit yet  fail: min_comparisons,audit_clean  -      2026-11-30T10:00:00Z\n"}},
		{name: "PodsOne", args: []string{"pods", "pod-a"}, status: 200, answer: podAnswer,
			wantMethod: "GET", wantPath: "/admin/pods/pod-a", wantOut: []string{"pod-a", "fail: min_comparisons", "ABORT", "TRIPS 6.000% >= 1.000% (1m)"}},
		{name: "ModeApplies", args: []string{"mode", "pod-a", "shadow", "--reason", "start shadowing"}, status: 200, answer: podAnswer,
			wantMethod: "PUT", wantPath: "/admin/pods/pod-a/mode",
			wantBody: map[string]any{"mode": "shadow", "reason": "start shadowing"}, wantOut: []string{"pod-a", "shadow"}},
		{name: "ModeBackfillRunning", args: []string{"mode", "pod-a", "shadow", "--reason", "start shadowing"}, status: 202,
			answer: `{"pod":"pod-a","mode":"redis","source_of_truth":"redis","shadow":"","kill_switch":false,"shops":"1-3",` +
				`"updated_at":"2026-11-30T10:00:00Z","gates":{"comparisons":0,"divergence_rate":0,"last_audit_clean":false,"passing":false,"failed_gates":[],"checks":[]},` +
				`"transition":{"to":"shadow","phase":"backfill","step":"copy","copied":41000,"total":60000,"started_at":"2026-11-30T10:00:00Z"}}`,
			wantMethod: "PUT", wantPath: "/admin/pods/pod-a/mode",
			wantBody: map[string]any{"mode": "shadow", "reason": "start shadowing"},
			wantOut:  []string{"pod-a: -> shadow running: backfill (copy) 41000 of 60000 holds copied (68%), started 2026-11-30T10:00:00Z"}},
		{name: "ModeFlagsFirstWithForce", args: []string{"mode", "--force", "--reason=gates are stale", "pod-a", "mysql"}, status: 200, answer: podAnswer,
			wantMethod: "PUT", wantPath: "/admin/pods/pod-a/mode",
			wantBody: map[string]any{"mode": "mysql", "reason": "gates are stale", "force": true}},
		{name: "ModeDryRunWouldApply", args: []string{"mode", "pod-a", "mysql", "--reason", "r", "--dry-run"}, status: 200,
			answer:     `{"would_apply":true,"failed_gates":[]}`,
			wantMethod: "PUT", wantPath: "/admin/pods/pod-a/mode",
			wantBody: map[string]any{"mode": "mysql", "reason": "r", "dry_run": true},
			wantOut:  []string{"pod-a -> mysql would apply", "failed gates: none"}},
		{name: "ModeDryRunWouldBeRefused", args: []string{"mode", "pod-a", "mysql", "--reason", "r", "--dry-run"}, status: 200,
			answer:   `{"would_apply":false,"failed_gates":["min_comparisons","audit_clean"]}`,
			wantCode: 1, wantMethod: "PUT", wantPath: "/admin/pods/pod-a/mode",
			wantBody: map[string]any{"mode": "mysql", "reason": "r", "dry_run": true},
			wantOut:  []string{"would be REFUSED", "failed gates: min_comparisons,audit_clean"},
			wantErr:  []string{"transition_refused: dry run"}},
		{name: "ModeRefused", args: []string{"mode", "pod-a", "mysql", "--reason", "r"}, status: 409,
			answer:   `{"error":{"code":"transition_refused","message":"gates failed","details":{"failed_gates":["min_comparisons","audit_clean"]}}}`,
			wantCode: 1, wantMethod: "PUT", wantPath: "/admin/pods/pod-a/mode",
			wantBody: map[string]any{"mode": "mysql", "reason": "r"},
			wantErr:  []string{"transition_refused: gates failed", "failed_gates: min_comparisons, audit_clean"}},
		{name: "ModeUnknownPod", args: []string{"mode", "pod-z", "shadow", "--reason", "r"}, status: 404,
			answer:   `{"error":{"code":"unknown_pod","message":"no pod pod-z","details":{}}}`,
			wantCode: 1, wantMethod: "PUT", wantPath: "/admin/pods/pod-z/mode",
			wantBody: map[string]any{"mode": "shadow", "reason": "r"}, wantErr: []string{"unknown_pod: no pod pod-z"}},
		{name: "KillAllPods", args: []string{"kill", "--all", "--reason", "incident 42"}, status: 200, answer: ksAnswer,
			wantMethod: "POST", wantPath: "/admin/killswitch", wantBody: map[string]any{"reason": "incident 42"},
			wantOut: []string{"kill switch: ENGAGED for pod-a,pod-b", "incident 42"}},
		{name: "KillSwitchShowWithoutEngagements", args: []string{"killswitch"}, status: 200, answer: ksOldAnswer,
			wantMethod: "GET", wantPath: "/admin/killswitch", wantOut: []string{"ENGAGED for pod-a\n", "since:       2026-11-30T10:00:00Z\n", "reason:      incident 42\n"}},
		{name: "KillSomePods", args: []string{"kill", "--pods", "pod-a, pod-b", "--reason", "incident 42"}, status: 200, answer: ksAnswer,
			wantMethod: "POST", wantPath: "/admin/killswitch",
			wantBody: map[string]any{"reason": "incident 42", "pods": []any{"pod-a", "pod-b"}}},
		{name: "KillRefusedForMySQLOnly", args: []string{"kill", "--all", "--reason", "x"}, status: 200,
			answer:   `{"engaged":true,"pods":["pod-a"],"since":"2026-11-30T10:00:00Z","reason":"x","refused":[{"pod":"pod-c","reason":"mysql_only: Redis is stale"}]}`,
			wantCode: 1, wantMethod: "POST", wantPath: "/admin/killswitch", wantBody: map[string]any{"reason": "x"},
			wantOut: []string{"refused:     pod-c: mysql_only: Redis is stale"}, wantErr: []string{"refused: ", "pod-c (mysql_only: Redis is stale)"}},
		{name: "Unkill", args: []string{"unkill", "--pods", "pod-a", "--reason", "recovered"}, status: 200,
			answer:     `{"engaged":false,"pods":[],"since":null,"reason":""}`,
			wantMethod: "DELETE", wantPath: "/admin/killswitch",
			wantBody: map[string]any{"reason": "recovered", "pods": []any{"pod-a"}}, wantOut: []string{"kill switch: off"}},
		{name: "KillSwitchShow", args: []string{"killswitch"}, status: 200, answer: ksAnswer,
			wantMethod: "GET", wantPath: "/admin/killswitch", wantOut: []string{"kill switch: ENGAGED for pod-a,pod-b\n" +
				"POD    SINCE                 BY     REASON\n" +
				"pod-a  2026-11-30T10:05:00Z  alice  incident 42\n" +
				"pod-b  2026-11-30T10:00:00Z  auto   divergence rate 0.0506 >= 0.0500\n"}},
		{name: "KillSwitchShowJSONUnchanged", args: []string{"--json", "killswitch"}, status: 200, answer: ksAnswer,
			wantMethod: "GET", wantPath: "/admin/killswitch", wantOut: []string{ksAnswer}},
		{name: "DivergencesFiltered", args: []string{"divergences", "--pod", "pod-a", "--kind", "outcome_mismatch", "--limit", "5"}, status: 200,
			answer: `{"divergences":[{"id":17,"at":"2026-11-30T10:00:00Z","pod":"pod-a","op":"reserve","kind":"outcome_mismatch","cart_token":"c-9","shop_id":1,"source_of_truth":"redis",` +
				`"primary":{"store":"redis","status":"reserved","lines":[{"inventory_item_id":100,"quantity":2,"group_id":1}],"latency_ms":1},` +
				`"shadow":{"store":"mysql","status":"insufficient_inventory","message":"short","latency_ms":2}}]}`,
			wantMethod: "GET", wantPath: "/admin/divergences", wantQuery: "kind=outcome_mismatch&limit=5&pod=pod-a",
			wantOut: []string{"17", "outcome_mismatch", "c-9", "redis reserved 100x2@1", "mysql insufficient_inventory"}},
		{name: "DivergencesGrouped", args: []string{"divergences", "--group", "--pod", "pod-a", "--since", "1h"}, status: 200,
			answer: `{"groups":[{"pod":"pod-a","kind":"state_drift","op":"audit","position":{"shop_id":3,"inventory_item_id":300,"group_id":1},` +
				`"count":61,"first_seen":"2026-11-30T10:00:00Z","last_seen":"2026-11-30T10:05:00Z","example":{"id":90,"at":"2026-11-30T10:05:00Z",` +
				`"pod":"pod-a","op":"audit","kind":"state_drift","shop_id":3,"source_of_truth":"ledger","primary":{"store":"redis","status":"available=0","latency_ms":0},` +
				`"shadow":{"store":"mysql","status":"available=15","latency_ms":0},"explanation":"state drift: item 300 group 1: ledger on_hand 15, redis available=0, mysql available=15"}}],` +
				`"sampled":1000,"truncated":true}`,
			wantMethod: "GET", wantPath: "/admin/divergences/summary", wantQuery: "pod=pod-a&since=1h",
			wantOut: []string{"COUNT", "61     pod-a  state_drift  audit  3     item 300 group 1  2026-11-30T10:00:00Z  2026-11-30T10:05:00Z  #90 state drift: item 300 group 1: ledger on_hand 15, redis available=0, mysql available=15",
				"grouped the newest 1000 divergences only"}},
		{name: "DivergencesCSV", args: []string{"divergences", "--format", "csv", "--kind", "state_drift"}, status: 200,
			answer:     "id,at,pod\n1,2026-11-30T10:00:00Z,pod-a\n",
			wantMethod: "GET", wantPath: "/admin/divergences", wantQuery: "format=csv&kind=state_drift",
			wantOut: []string{"id,at,pod\n1,2026-11-30T10:00:00Z,pod-a\n"}},
		{name: "Config", args: []string{"config"}, status: 200,
			answer:     `{"rollout":{"abort_divergence_rate":0.05},"pods":[{"name":"pod-a","mysql_dsn":"app:REDACTED@tcp(db:3306)/inv"}]}`,
			wantMethod: "GET", wantPath: "/admin/config",
			wantOut: []string{"rollout:\n  abort_divergence_rate: 0.05\n", "    name: pod-a\n", "mysql_dsn: app:REDACTED@tcp(db:3306)/inv"}},
		{name: "DivergencesNone", args: []string{"divergences"}, status: 200, answer: `{"divergences":[]}`,
			wantMethod: "GET", wantPath: "/admin/divergences", wantOut: []string{"no divergences"}},
		{name: "Report", args: []string{"report"}, status: 200,
			answer: `{"pods":[{"pod":"pod-a","mode":"shadow","window":"15m","comparisons":1000,"matches":998,` +
				`"divergences":{"outcome_mismatch":1,"location_mismatch":0,"shadow_error":0,"shadow_timeout":1,"shadow_dropped":0,"state_drift":0},` +
				`"divergence_rate":0.002,"latency_ms":{"redis":{"p50":1.2,"p99":4.5},"mysql":{"p50":2.5,"p99":9.75}}}]}`,
			wantMethod: "GET", wantPath: "/admin/report",
			wantOut: []string{"REDIS_P99", "pod-a", "15m", "1000", "998", "0.200%", "1.20ms", "4.50ms", "2.50ms", "9.75ms", "outcome_mismatch=1,shadow_timeout=1"}},
		{name: "ReportWithoutComparisons", args: []string{"report"}, status: 200,
			answer: `{"pods":[{"pod":"pod-b","mode":"redis","window":"15m","comparisons":0,"matches":0,` +
				`"divergences":{"outcome_mismatch":0,"location_mismatch":0,"shadow_error":0,"shadow_timeout":0,"shadow_dropped":0,"state_drift":0},` +
				`"divergence_rate":0,"latency_ms":{"redis":{"p50":0,"p99":0},"mysql":{"p50":0,"p99":0}}}]}`,
			wantMethod: "GET", wantPath: "/admin/report",
			wantOut: []string{"pod-b  redis  15m     0            0        n/a       n/a         n/a        n/a        n/a        n/a        none\n"}},
		{name: "AuditDefaultReason", args: []string{"audit", "pod-a"}, status: 200,
			answer:     `{"pod":"pod-a","at":"2026-11-30T10:00:00Z","checked":120,"clean":true,"drifted":[]}`,
			wantMethod: "POST", wantPath: "/admin/pods/pod-a/audit", wantBody: map[string]any{"reason": "tandemctl audit"},
			wantOut: []string{"audit of pod-a", "clean (120 positions checked)"}},
		{name: "AuditDrift", args: []string{"audit", "pod-a", "--reason", "after incident"}, status: 200,
			answer:     `{"pod":"pod-a","at":"2026-11-30T10:00:00Z","checked":120,"clean":false,"drifted":[{"shop_id":1,"inventory_item_id":100,"group_id":2,"ledger_on_hand":50,"redis_available":48,"mysql_available":null}]}`,
			wantMethod: "POST", wantPath: "/admin/pods/pod-a/audit", wantBody: map[string]any{"reason": "after incident"},
			wantOut: []string{"DRIFT in 1 positions", "LEDGER_ON_HAND", "50", "48", "-"}},
		{name: "Resync", args: []string{"resync", "pod-a", "--from", "mysql", "--reason", "leave mysql_only"}, status: 200,
			answer:     `{"pod":"pod-a","keys_rewritten":42}`,
			wantReqs:   2, // GET the pod (its recent traffic), then POST
			wantMethod: "POST", wantPath: "/admin/pods/pod-a/resync", wantBody: map[string]any{"reason": "leave mysql_only", "from": "mysql"},
			wantOut: []string{"pod-a: Redis rebuilt from mysql, 42 keys rewritten"}},
		{name: "Log", args: []string{"log", "--limit", "10"}, status: 200,
			answer:     `{"entries":[{"at":"2026-11-30T10:00:00Z","actor":"alice","action":"set_mode","pod":"pod-a","reason":"start\tshadow","before":"redis","after":"shadow"}]}`,
			wantMethod: "GET", wantPath: "/admin/audit-log", wantQuery: "limit=10",
			wantOut: []string{"ACTOR", "alice", "set_mode", "redis", "start shadow"}},
		{name: "Instances", args: []string{"instances"}, status: 200,
			answer:     `{"instances":[{"id":"i-1","addr":"10.0.0.1:8081","started_at":"2026-11-30T09:00:00Z","last_seen":"2026-11-30T10:00:00Z","control_version":7,"stale":true}]}`,
			wantMethod: "GET", wantPath: "/admin/instances", wantOut: []string{"i-1", "10.0.0.1:8081", "7", "STALE"}},
		{name: "Capture", args: []string{"capture", "pod-a", "--for", "10m", "--max-ops", "5000", "--reason", "flash sale"}, status: 200,
			answer:     `{"id":"cap-1","pod":"pod-a","state":"running","reason":"flash sale","actor":"alice","started_at":"2026-11-30T10:00:00Z","duration":"10m0s","max_ops":5000,"max_bytes":1,"ops":0,"dropped":0,"positions":3,"holds":1,"bytes":0,"hashed_tokens":true}`,
			wantMethod: "POST", wantPath: "/admin/pods/pod-a/capture", wantBody: map[string]any{"reason": "flash sale", "duration": "10m0s", "max_ops": float64(5000)},
			wantOut: []string{"capture cap-1 of pod-a: recording for 10m0s", "3 positions and 1 holds", "tandemctl capture get cap-1"}},
		{name: "CaptureList", args: []string{"capture"}, status: 200,
			answer:     `{"captures":[{"id":"cap-1","pod":"pod-a","state":"done","started_at":"2026-11-30T10:00:00Z","ops":120,"dropped":3,"bytes":4096,"ended":"duration"}]}`,
			wantMethod: "GET", wantPath: "/admin/captures", wantOut: []string{"DROPPED", "cap-1  pod-a  done", "120", "duration"}},
		{name: "ErrorNotJSON", args: []string{"pods"}, status: 502, answer: `<html>bad gateway</html>`,
			wantCode: 1, wantMethod: "GET", wantPath: "/admin/pods", wantErr: []string{"http_502: <html>bad gateway</html>"}},
		{name: "Unauthorized", args: []string{"report"}, status: 401,
			answer:   `{"error":{"code":"unauthorized","message":"bad admin token","details":{}}}`,
			wantCode: 1, wantMethod: "GET", wantPath: "/admin/report", wantErr: []string{"unauthorized: bad admin token"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := newFakeAPI(t, tt.status, tt.answer)
			code, stdout, stderr := run(t, envFor(api.URL), tt.args...)
			if code != tt.wantCode {
				t.Errorf("got exit code %d, want %d (stderr %q)", code, tt.wantCode, stderr)
			}
			reqs := api.requests()
			if want := max(tt.wantReqs, 1); len(reqs) != want {
				t.Fatalf("got %d requests, want %d", len(reqs), want)
			}
			r := reqs[len(reqs)-1]
			if r.Method != tt.wantMethod || r.Path != tt.wantPath || r.Query != tt.wantQuery {
				t.Errorf("got %s %s?%s, want %s %s?%s", r.Method, r.Path, r.Query, tt.wantMethod, tt.wantPath, tt.wantQuery)
			}
			if r.Auth != "Bearer "+token {
				t.Errorf("got Authorization %q, want %q", r.Auth, "Bearer "+token)
			}
			if r.Actor != "alice" {
				t.Errorf("got X-Actor %q, want alice ($USER)", r.Actor)
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

func TestJSON(t *testing.T) {
	t.Run("PrintsTheRawAnswer", func(t *testing.T) {
		api := newFakeAPI(t, 200, podsAnswer)
		code, stdout, _ := run(t, envFor(api.URL), "--json", "pods")
		if code != 0 || stdout != podsAnswer+"\n" {
			t.Errorf("got code %d stdout %q, want 0 and the raw answer", code, stdout)
		}
	})
	t.Run("FlagAfterTheCommand", func(t *testing.T) {
		api := newFakeAPI(t, 200, ksAnswer)
		code, stdout, _ := run(t, envFor(api.URL), "kill", "--all", "--reason", "x", "--json")
		if code != 0 || stdout != ksAnswer+"\n" {
			t.Errorf("got code %d stdout %q, want 0 and the raw answer", code, stdout)
		}
	})
	t.Run("PrintsTheErrorBodyAndFails", func(t *testing.T) {
		answer := `{"error":{"code":"transition_refused","message":"gates failed","details":{"failed_gates":["audit_clean"]}}}`
		api := newFakeAPI(t, 409, answer)
		code, stdout, stderr := run(t, envFor(api.URL), "--json", "mode", "pod-a", "mysql", "--reason", "r")
		if code != 1 {
			t.Errorf("got exit code %d, want 1", code)
		}
		if stdout != answer+"\n" {
			t.Errorf("got stdout %q, want the raw error answer", stdout)
		}
		if !strings.Contains(stderr, "transition_refused: gates failed") {
			t.Errorf("got stderr %q, want the code and message", stderr)
		}
	})
	t.Run("DryRunRefusedFails", func(t *testing.T) {
		answer := `{"would_apply":false,"failed_gates":["audit_clean"]}`
		api := newFakeAPI(t, 200, answer)
		code, stdout, _ := run(t, envFor(api.URL), "--json", "mode", "pod-a", "mysql", "--reason", "r", "--dry-run")
		if code != 1 || stdout != answer+"\n" {
			t.Errorf("got code %d stdout %q, want 1 and the raw answer", code, stdout)
		}
	})
}

func TestActorAndURL(t *testing.T) {
	t.Run("ActorFlagOverridesUSER", func(t *testing.T) {
		api := newFakeAPI(t, 200, podsAnswer)
		if code, _, stderr := run(t, envFor(api.URL), "--actor", "bob", "pods"); code != 0 {
			t.Fatalf("got exit code %d (%s), want 0", code, stderr)
		}
		if got := api.requests()[0].Actor; got != "bob" {
			t.Errorf("got X-Actor %q, want bob", got)
		}
	})
	// Without --actor and $USER the actor is the OS account, then the host
	// name: the audit log never says "unknown".
	t.Run("NoUSERFallsBackToOSUserThenHost", func(t *testing.T) {
		for _, tc := range []struct {
			name, osUser, host, want string
		}{
			{"OSUser", "carol", "box-1", "carol"},
			{"HostName", "", "box-1", "box-1"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				api := newFakeAPI(t, 200, podsAnswer)
				env := envFor(api.URL)
				delete(env, "USER")
				code, _, stderr := runWith(t, env, func(m *main.Main) {
					m.OSUser = func() string { return tc.osUser }
					m.Hostname = func() string { return tc.host }
				}, "pods")
				if code != 0 {
					t.Fatalf("got exit code %d (%s), want 0", code, stderr)
				}
				if got := api.requests()[0].Actor; got != tc.want {
					t.Errorf("got X-Actor %q, want %q", got, tc.want)
				}
			})
		}
	})
	t.Run("ViewerTokenWhenNoAdminToken", func(t *testing.T) {
		api := newFakeAPI(t, 200, podsAnswer)
		env := envFor(api.URL)
		delete(env, "TANDEM_ADMIN_TOKEN")
		env["TANDEM_VIEWER_TOKEN"] = "view-only"
		if code, _, stderr := run(t, env, "pods"); code != 0 {
			t.Fatalf("got exit code %d (%s), want 0", code, stderr)
		}
		if got := api.requests()[0].Auth; got != "Bearer view-only" {
			t.Errorf("got Authorization %q, want the viewer token", got)
		}
	})
	t.Run("URLFlagOverridesEnv", func(t *testing.T) {
		api := newFakeAPI(t, 200, podsAnswer)
		env := envFor("http://127.0.0.1:1")
		if code, _, stderr := run(t, env, "--url", api.URL+"/", "pods"); code != 0 {
			t.Fatalf("got exit code %d (%s), want 0", code, stderr)
		}
		if got := api.requests()[0].Path; got != "/admin/pods" {
			t.Errorf("got path %q, want /admin/pods", got)
		}
	})
	t.Run("UnreachableAPIFails", func(t *testing.T) {
		api := newFakeAPI(t, 200, podsAnswer)
		url := api.URL
		api.Close()
		code, _, stderr := run(t, envFor(url), "pods")
		if code != 1 || !strings.Contains(stderr, "cannot reach the admin API") {
			t.Errorf("got code %d stderr %q, want 1 and cannot reach", code, stderr)
		}
	})
}

func TestUsage(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		noToken bool
		wantErr string
	}{
		{name: "NoCommand", args: nil, wantErr: "no command given"},
		{name: "UnknownCommand", args: []string{"flip"}, wantErr: `unknown command "flip"`},
		{name: "UnknownFlag", args: []string{"pods", "--verbose"}, wantErr: "flag provided but not defined"},
		{name: "ModeWithoutReason", args: []string{"mode", "pod-a", "shadow"}, wantErr: "--reason is required"},
		{name: "ModeUnknownMode", args: []string{"mode", "pod-a", "postgres", "--reason", "r"}, wantErr: `unknown mode "postgres"`},
		{name: "ModeMissingArgument", args: []string{"mode", "pod-a", "--reason", "r"}, wantErr: "mode takes POD and MODE"},
		{name: "KillWithoutReason", args: []string{"kill"}, wantErr: "--reason is required"},
		{name: "KillPositionalPod", args: []string{"kill", "pod-a", "--reason", "r"}, wantErr: `unexpected argument "pod-a"`},
		{name: "KillEmptyPods", args: []string{"kill", "--pods", " , ", "--reason", "r"}, wantErr: "--pods names no pod"},
		{name: "UnkillWithoutReason", args: []string{"unkill", "--pods", "pod-a"}, wantErr: "--reason is required"},
		{name: "KillWithoutTargets", args: []string{"kill", "--reason", "r"}, wantErr: "--pods a,b, or --all"},
		{name: "UnkillWithoutTargets", args: []string{"unkill", "--reason", "r"}, wantErr: "--pods a,b, or --all"},
		{name: "KillPodsEmptyString", args: []string{"kill", "--pods", "", "--reason", "r"}, wantErr: "--pods names no pod"},
		{name: "KillPodsEmptyName", args: []string{"kill", "--pods", "pod-a,,pod-b", "--reason", "r"}, wantErr: "holds an empty name"},
		{name: "KillPodsTrailingComma", args: []string{"kill", "--pods", "pod-a,", "--reason", "r"}, wantErr: "holds an empty name"},
		{name: "KillPodsTwice", args: []string{"kill", "--pods", "pod-a,pod-a", "--reason", "r"}, wantErr: `names "pod-a" twice`},
		{name: "KillPodsAndAll", args: []string{"kill", "--pods", "pod-a", "--all", "--reason", "r"}, wantErr: "exclude each other"},
		{name: "UnkillPodsEmptyString", args: []string{"unkill", "--pods=", "--reason", "r"}, wantErr: "--pods names no pod"},
		{name: "DivergencesNegativeLimit", args: []string{"divergences", "--limit", "-1"}, wantErr: "--limit must be > 0"},
		{name: "DivergencesBadLimit", args: []string{"divergences", "--limit", "many"}, wantErr: "invalid value"},
		{name: "DivergencesBadFormat", args: []string{"divergences", "--format", "xml"}, wantErr: "--format must be csv or jsonl"},
		{name: "DivergencesGroupWithFormat", args: []string{"divergences", "--group", "--format", "csv"}, wantErr: "--group takes neither"},
		{name: "ConfigWithArgument", args: []string{"config", "pod-a"}, wantErr: "config takes no arguments"},
		{name: "DivergencesIntervalWithoutWatch", args: []string{"divergences", "--interval", "1s"}, wantErr: "--interval needs --watch"},
		{name: "DivergencesWatchWithFormat", args: []string{"divergences", "--watch", "--format", "csv"}, wantErr: "--watch does not go with --format"},
		{name: "AuditWithoutPod", args: []string{"audit"}, wantErr: "audit takes one POD"},
		{name: "ResyncWithoutFrom", args: []string{"resync", "pod-a", "--reason", "r"}, wantErr: "--from must be mysql"},
		{name: "ResyncFromRedis", args: []string{"resync", "pod-a", "--from", "redis", "--reason", "r"}, wantErr: "--from must be mysql"},
		{name: "ResyncWithoutReason", args: []string{"resync", "pod-a", "--from", "mysql"}, wantErr: "--reason is required"},
		{name: "LogExtraArgument", args: []string{"log", "all"}, wantErr: `unexpected argument "all"`},
		{name: "ReportExtraArgument", args: []string{"report", "pod-a"}, wantErr: "report takes no arguments"},
		{name: "CaptureWithoutFor", args: []string{"capture", "pod-a"}, wantErr: "--for must be a duration"},
		{name: "CaptureGetWithoutFile", args: []string{"capture", "get", "cap-1"}, wantErr: "needs -o FILE"},
		{name: "NoToken", args: []string{"pods"}, noToken: true, wantErr: "TANDEM_ADMIN_TOKEN is not set"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := newFakeAPI(t, 200, podsAnswer)
			env := envFor(api.URL)
			if tt.noToken {
				delete(env, "TANDEM_ADMIN_TOKEN")
			}
			code, stdout, stderr := run(t, env, tt.args...)
			if code != 2 {
				t.Errorf("got exit code %d, want 2", code)
			}
			if !strings.Contains(stderr, tt.wantErr) || !strings.Contains(stderr, "usage: tandemctl") {
				t.Errorf("got stderr %q, want %q and the usage", stderr, tt.wantErr)
			}
			if stdout != "" {
				t.Errorf("got stdout %q, want nothing", stdout)
			}
			if n := len(api.requests()); n != 0 {
				t.Errorf("got %d requests, want none for a usage error", n)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"-h"}, {"mode", "-h"}} {
		t.Run(strings.Join(args, "_"), func(t *testing.T) {
			code, stdout, _ := run(t, map[string]string{}, args...)
			if code != 0 || !strings.Contains(stdout, "usage: tandemctl") {
				t.Errorf("got code %d stdout %q, want 0 and the usage", code, stdout)
			}
		})
	}
}

// TestLogFilters checks that log --pod and --action keep only the entries
// asked for, from a page as large as the API gives.
func TestLogFilters(t *testing.T) {
	api := newFakeAPI(t, 200, `{"entries":[`+
		`{"at":"2026-11-30T10:03:00Z","actor":"bob","action":"set_mode","pod":"pod-a","reason":"r3","before":"redis","after":"shadow"},`+
		`{"at":"2026-11-30T10:02:00Z","actor":"auto","action":"killswitch_engage","pod":"pod-b","reason":"r2","before":"disengaged","after":"engaged"},`+
		`{"at":"2026-11-30T10:01:00Z","actor":"bob","action":"killswitch_engage","pod":"pod-a","reason":"r1","before":"disengaged","after":"engaged"}]}`)
	code, stdout, stderr := run(t, envFor(api.URL), "log", "--pod", "pod-a", "--action", "killswitch_engage")
	if code != 0 {
		t.Fatalf("got exit %d (%s), want 0", code, stderr)
	}
	if !strings.Contains(stdout, "r1") || strings.Contains(stdout, "r2") || strings.Contains(stdout, "r3") {
		t.Errorf("got %q, want only the entry r1", stdout)
	}
	if got := api.requests()[0].Query; got != "limit=1000" {
		t.Errorf("got query %q, want limit=1000", got)
	}
	code, stdout, _ = run(t, envFor(api.URL), "--json", "log", "--pod", "pod-a", "--limit", "1")
	var ans struct{ Entries []map[string]any }
	if err := json.Unmarshal([]byte(stdout), &ans); code != 0 || err != nil || len(ans.Entries) != 1 || ans.Entries[0]["reason"] != "r3" {
		t.Errorf("got exit %d, %q (%v); want the one newest entry of pod-a", code, stdout, err)
	}
}
