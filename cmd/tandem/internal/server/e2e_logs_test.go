package server_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/tandemhq/tandem/cmd/tandem/internal/server"
)

// TestE2EControlLog: every control action is one structured log line with
// actor, reason, pod, before and after, and the admin API writes an access
// log with method, route, status, duration and actor, never a token.
func TestE2EControlLog(t *testing.T) {
	cfg, _ := MustConfig(t)
	core, logs := observer.New(zapcore.InfoLevel)
	in := MustRunMain(t, cfg, func(m *server.Main) { m.Logger = zap.New(core) })
	adm := in.Admin
	podA, podB := cfg.Pods[0].Name, cfg.Pods[1].Name

	enterShadow(adm, podB, "shadow B")
	adm.must(http.MethodPost, "/admin/pods/"+podB+"/audit", obj{"reason": "check B"}, http.StatusOK)
	adm.must(http.MethodPut, "/admin/pods/"+podA+"/mode", obj{"mode": "mysql", "reason": "promote A", "force": true}, http.StatusOK)
	adm.must(http.MethodPost, "/admin/pods/"+podA+"/resync", obj{"reason": "rebuild A", "from": "mysql"}, http.StatusOK)
	adm.must(http.MethodPost, "/admin/killswitch", obj{"reason": "kill A", "pods": []string{podA}}, http.StatusOK)
	adm.must(http.MethodDelete, "/admin/killswitch", obj{"reason": "unkill A", "pods": []string{podA}}, http.StatusOK)
	adm.must(http.MethodPost, "/admin/plan/start", obj{"reason": "plan it"}, http.StatusOK)
	adm.mustErr(http.MethodPut, "/admin/pods/"+podB+"/mode", obj{"mode": "bogus", "reason": "x"}, http.StatusBadRequest, "invalid_request")

	type want struct{ action, pod, reason, before, after string }
	for _, w := range []want{
		{"backfill_start", podB, "shadow B", "redis", "backfilling MySQL"},
		{"backfill_end", podB, "shadow B", "redis", "done"},
		{"set_mode", podB, "shadow B", "redis", "shadow"},
		{"audit", podB, "check B", "shadow", "clean"},
		{"set_mode_forced", podA, "promote A", "shadow", "mysql"},
		{"resync", podA, "rebuild A", "mysql", ""},
		{"killswitch_engage", podA, "kill A", "disengaged", "engaged"},
		{"killswitch_disengage", podA, "unkill A", "engaged", "disengaged"},
		{"plan_start", "", "plan it", "", "running"},
	} {
		found := false
		for _, e := range logs.FilterMessage("control action").FilterField(zap.String("action", w.action)).All() {
			f := e.ContextMap()
			if f["pod"] != w.pod || !strings.HasPrefix(fmt.Sprint(f["reason"]), w.reason) || f["actor"] != "e2e-tester" {
				continue
			}
			found = true
			if f["before"] != w.before || (w.after != "" && !strings.HasPrefix(fmt.Sprint(f["after"]), w.after)) {
				t.Errorf("%s: got before %v after %v, want %q and %q", w.action, f["before"], f["after"], w.before, w.after)
			}
		}
		if !found {
			t.Errorf("got no control action line for %s of %q by e2e-tester", w.action, w.pod)
		}
	}

	access := logs.FilterMessage("request").FilterField(zap.String("api", "admin")).All()
	var sawChange, sawRefused bool
	for _, e := range access {
		f := e.ContextMap()
		if f["route"] == "/admin/killswitch" && f["method"] == "POST" && f["status"] == int64(200) && f["actor"] == "e2e-tester" && f["role"] == "admin" {
			sawChange = true
		}
		if f["route"] == "/admin/pods/{pod}/mode" && f["status"] == int64(400) {
			sawRefused = true
		}
		if _, ok := f["duration"]; !ok {
			t.Errorf("got access line %v without a duration", f)
		}
	}
	if !sawChange || !sawRefused {
		t.Errorf("got access log %v, want the kill switch POST (200, actor, role) and the refused mode change (400)", len(access))
	}
	for _, e := range logs.All() {
		line := e.Message + fmt.Sprint(e.ContextMap())
		if strings.Contains(line, e2eAdminToken) {
			t.Fatalf("got the admin token in a log line: %s", e.Message)
		}
	}
}

// TestE2EKillSwitchLogs: the kill switch engaged is a warning; a repeated
// kill keeps the first reason and says it was already engaged, in the log
// and the audit log; an unkill of a pod not engaged changes and records
// nothing and says so; admin reads log at debug.
func TestE2EKillSwitchLogs(t *testing.T) {
	cfg, _ := MustConfig(t)
	core, logs := observer.New(zapcore.DebugLevel)
	in := MustRunMain(t, cfg, func(m *server.Main) { m.Logger = zap.New(core) })
	adm := in.Admin
	podA, podB := cfg.Pods[0].Name, cfg.Pods[1].Name

	adm.must(http.MethodPost, "/admin/killswitch", obj{"reason": "first", "pods": []string{podA}}, http.StatusOK)
	st := adm.must(http.MethodPost, "/admin/killswitch", obj{"reason": "second", "pods": []string{podA}}, http.StatusOK)
	if st["reason"] != "first" {
		t.Errorf("got reason %v after a repeated kill, want the first", st["reason"])
	}
	adm.must(http.MethodDelete, "/admin/killswitch", obj{"reason": "never engaged", "pods": []string{podB}}, http.StatusOK)

	engages := logs.FilterMessage("control action").FilterField(zap.String("action", "killswitch_engage")).All()
	if len(engages) != 2 {
		t.Fatalf("got %d engage lines, want 2", len(engages))
	}
	for _, e := range engages {
		if e.Level != zapcore.WarnLevel {
			t.Errorf("got an engage line at %s, want warn", e.Level)
		}
	}
	again := engages[1].ContextMap()
	if r := fmt.Sprint(again["reason"]); again["before"] != "engaged" || !strings.HasPrefix(r, "already engaged since") ||
		!strings.Contains(r, `"first"`) || !strings.HasSuffix(r, "asked again: second") {
		t.Errorf("got %v, want before engaged and the first reason kept", again)
	}
	if n := logs.FilterMessage("control action").FilterField(zap.String("action", "killswitch_disengage")).Len(); n != 0 {
		t.Errorf("got %d disengage lines for a pod never engaged, want none", n)
	}
	if logs.FilterMessage("kill switch not engaged: nothing to disengage").Len() != 1 {
		t.Errorf("got no line saying %s was not engaged", podB)
	}

	adm.must(http.MethodGet, "/admin/pods", nil, http.StatusOK)
	for _, e := range logs.FilterMessage("request").FilterField(zap.String("api", "admin")).All() {
		f := e.ContextMap()
		if want := map[bool]zapcore.Level{true: zapcore.DebugLevel, false: zapcore.InfoLevel}[f["method"] == "GET"]; e.Level != want {
			t.Errorf("got %v at %s, want %s", f, e.Level, want)
		}
	}

	// The audit log is written in the background: wait for both entries.
	var entries []any
	for range 100 {
		ans := adm.must(http.MethodGet, "/admin/audit-log", nil, http.StatusOK)
		entries, _ = ans["entries"].([]any)
		if len(entries) >= 2 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	var reasons []string
	for _, e := range entries {
		m := e.(map[string]any)
		if m["pod"] == podB {
			t.Errorf("got audit entry %v for a pod never engaged, want none", m)
		}
		if m["action"] == "killswitch_engage" {
			reasons = append(reasons, fmt.Sprint(m["reason"]))
		}
	}
	slices.Sort(reasons)
	if len(reasons) != 2 || !strings.HasPrefix(reasons[0], "already engaged since") || reasons[1] != "first" {
		t.Errorf("got engage reasons %q in the audit log, want first and the repeated kill saying already engaged", reasons)
	}
}
