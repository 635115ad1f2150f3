package main_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	main "github.com/tandemhq/tandem/cmd/tandem"
)

// TestE2EControlLog: every control action is one structured log line with
// actor, reason, pod, before and after, and the admin API writes an access
// log with method, route, status, duration and actor, never a token.
func TestE2EControlLog(t *testing.T) {
	cfg, _ := MustConfig(t)
	core, logs := observer.New(zapcore.InfoLevel)
	in := MustRunMain(t, cfg, func(m *main.Main) { m.Logger = zap.New(core) })
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
