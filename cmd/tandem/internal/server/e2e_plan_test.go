package server_test

import (
	"net/http"
	"reflect"
	"testing"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/internal/testenv"
)

// TestE2EPlan drives the rollout plan through the admin API of a running
// serve: the adapter over the rollout controller, the routes and the audit
// log together.
func TestE2EPlan(t *testing.T) {
	testenv.RequireIntegration(t)
	cfg, _ := MustConfig(t)
	in := MustRunMain(t, cfg)
	podA, podB := cfg.Pods[0].Name, cfg.Pods[1].Name
	change := obj{"reason": "e2e plan"}

	t.Run("IdleWithOrder", func(t *testing.T) {
		got := in.Admin.must("GET", "/admin/plan", nil, http.StatusOK)
		if got["phase"] != "idle" || !reflect.DeepEqual(strs(got["order"]), []string{podA, podB}) || len(asSlice(got["promoted"])) != 0 {
			t.Fatalf("got %v, want idle, order [%s %s] (fewest shops first), promoted []", got, podA, podB)
		}
	})
	t.Run("PauseWhileIdleIsConflict", func(t *testing.T) {
		e := in.Admin.mustErr("POST", "/admin/plan/pause", change, http.StatusConflict, tandem.ECONFLICT)
		if d, _ := e["details"].(obj); d["phase"] != "idle" {
			t.Fatalf("got details %v, want phase idle", d)
		}
	})
	t.Run("Start", func(t *testing.T) {
		if got := in.Admin.must("POST", "/admin/plan/start", change, http.StatusOK); got["phase"] != "running" {
			t.Fatalf("got %v, want running", got)
		}
	})
	t.Run("StartWhileRunningIsConflict", func(t *testing.T) {
		e := in.Admin.mustErr("POST", "/admin/plan/start", change, http.StatusConflict, tandem.ECONFLICT)
		if d, _ := e["details"].(obj); d["phase"] != "running" {
			t.Fatalf("got details %v, want phase running", d)
		}
	})
	t.Run("MissingReasonIs400", func(t *testing.T) {
		in.Admin.mustErr("POST", "/admin/plan/pause", obj{}, http.StatusBadRequest, tandem.EINVALID)
	})
	t.Run("PauseThenAbort", func(t *testing.T) {
		if got := in.Admin.must("POST", "/admin/plan/pause", change, http.StatusOK); got["phase"] != "paused" {
			t.Fatalf("got %v, want paused", got)
		}
		if got := in.Admin.must("POST", "/admin/plan/abort", change, http.StatusOK); got["phase"] != "aborted" {
			t.Fatalf("got %v, want aborted", got)
		}
		if got := in.Admin.must("GET", "/admin/plan", nil, http.StatusOK); got["phase"] != "aborted" {
			t.Fatalf("got %v, want aborted", got)
		}
	})
	t.Run("AuditLogged", func(t *testing.T) {
		got := in.Admin.must("GET", "/admin/audit-log", nil, http.StatusOK)
		seen := map[string]bool{}
		for _, e := range asSlice(got["entries"]) {
			if e := e.(obj); e["reason"] == "e2e plan" && e["actor"] == "e2e-tester" {
				seen[e["action"].(string)] = true
			}
		}
		for _, action := range []string{"plan_start", "plan_pause", "plan_abort"} {
			if !seen[action] {
				t.Errorf("got audit actions %v, want %s by e2e-tester", seen, action)
			}
		}
	})
}
