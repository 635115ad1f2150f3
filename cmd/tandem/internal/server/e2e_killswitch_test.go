package server_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/tandemhq/tandem/cmd/tandem/internal/server"
)

// TestE2EKillSwitchBlocksMySQL: while a pod's kill switch is engaged, no
// change through either instance puts it back on MySQL, force included; a
// change to the mode it already has is a plain 200.
func TestE2EKillSwitchBlocksMySQL(t *testing.T) {
	cfg, _ := MustConfig(t)
	one := MustRunMain(t, cfg)
	two := MustRunMain(t, cfg)
	podA := cfg.Pods[0].Name
	path := "/admin/pods/" + podA + "/mode"

	one.Admin.must(http.MethodPut, path, obj{"mode": "mysql", "reason": "promote", "force": true}, http.StatusOK)
	one.Admin.must(http.MethodPost, "/admin/killswitch", obj{"reason": "drill", "pods": []string{podA}}, http.StatusOK)
	eventually(t, "the other instance to see the kill switch and the mode", func() bool {
		st := podStatus(two.Admin, podA)
		return st["kill_switch"] == true && st["mode"] == "mysql"
	})

	for _, in := range []*Instance{one, two} {
		for _, body := range []obj{
			{"mode": "mysql_only", "reason": "escape the kill switch"},
			{"mode": "mysql_only", "reason": "escape the kill switch", "force": true},
		} {
			e := in.Admin.mustErr(http.MethodPut, path, body, http.StatusConflict, "transition_refused")
			details, _ := e["details"].(obj)
			if !slices.Contains(strs(details["failed_gates"]), "kill_switch") {
				t.Errorf("got details %v, want failed_gates with kill_switch", details)
			}
			dry := obj{"dry_run": true}
			for k, v := range body {
				dry[k] = v
			}
			got := in.Admin.must(http.MethodPut, path, dry, http.StatusOK)
			if got["would_apply"] != false || !slices.Contains(strs(got["failed_gates"]), "kill_switch") {
				t.Errorf("got dry run %v, want would_apply false with kill_switch", got)
			}
		}
		// Same mode: answered plainly, not refused.
		st := in.Admin.must(http.MethodPut, path, obj{"mode": "mysql", "reason": "again", "force": true}, http.StatusOK)
		if st["mode"] != "mysql" || st["source_of_truth"] != "redis" || st["kill_switch"] != true {
			t.Errorf("got %v, want mode mysql served by redis, kill switch on", st)
		}
	}
	// shadow -> mysql, the other road back to MySQL, is refused as well.
	one.Admin.must(http.MethodPut, path, obj{"mode": "shadow", "reason": "step back"}, http.StatusOK)
	eventually(t, "the other instance to see shadow", func() bool { return podStatus(two.Admin, podA)["mode"] == "shadow" })
	for _, in := range []*Instance{one, two} {
		e := in.Admin.mustErr(http.MethodPut, path, obj{"mode": "mysql", "reason": "again", "force": true}, http.StatusConflict, "transition_refused")
		if details, _ := e["details"].(obj); !slices.Equal(strs(details["failed_gates"]), []string{"kill_switch"}) {
			t.Errorf("got failed_gates %v, want [kill_switch] (force overrides only gates)", details["failed_gates"])
		}
	}
	if st := podStatus(one.Admin, podA); st["mode"] != "shadow" || st["source_of_truth"] != "redis" {
		t.Errorf("got %v, want shadow on redis", st)
	}
}

// TestE2EKillSwitchTargets: a kill or unkill names its pods, or leaves
// pods out for every pod; a list that is empty, null, blank, repeated or
// names an unknown pod is refused and changes nothing.
func TestE2EKillSwitchTargets(t *testing.T) {
	cfg, _ := MustConfig(t)
	in := MustRunMain(t, cfg)
	adm := in.Admin
	podA, podB := cfg.Pods[0].Name, cfg.Pods[1].Name
	adm.must(http.MethodPost, "/admin/killswitch", obj{"reason": "one pod", "pods": []string{podB}}, http.StatusOK)

	tests := []struct {
		name   string
		body   string
		status int
		code   string
	}{
		{"EmptyList", `{"reason":"r","pods":[]}`, 400, "invalid_request"},
		{"NullList", `{"reason":"r","pods":null}`, 400, "invalid_request"},
		{"BlankName", `{"reason":"r","pods":["` + podA + `",""]}`, 400, "invalid_request"},
		{"Repeated", `{"reason":"r","pods":["` + podA + `","` + podA + `"]}`, 400, "invalid_request"},
		{"Unknown", `{"reason":"r","pods":["` + podA + `","nope-1","nope-2"]}`, 404, "unknown_pod"},
	}
	for _, tt := range tests {
		for _, method := range []string{http.MethodPost, http.MethodDelete} {
			t.Run(tt.name+"_"+method, func(t *testing.T) {
				adm.tb = t
				status, v := adm.raw(method, "/admin/killswitch", "application/json", []byte(tt.body))
				e := checkErr(t, tt.name, status, v, tt.status, tt.code)
				if tt.code == "unknown_pod" {
					details, _ := e["details"].(obj)
					msg, _ := e["message"].(string)
					if !slices.Equal(strs(details["pods"]), []string{"nope-1", "nope-2"}) || !strings.Contains(msg, "nope-1") || !strings.Contains(msg, "nope-2") {
						t.Errorf("got %v, want both unknown pods named", e)
					}
				}
				ks := adm.must(http.MethodGet, "/admin/killswitch", nil, http.StatusOK)
				if !slices.Equal(strs(ks["pods"]), []string{podB}) {
					t.Errorf("got engaged %v after a refused change, want only %s", ks["pods"], podB)
				}
			})
		}
	}

	t.Run("AbsentMeansEveryPod", func(t *testing.T) {
		adm.tb = t
		ks := adm.must(http.MethodPost, "/admin/killswitch", obj{"reason": "all"}, http.StatusOK)
		if got := strs(ks["pods"]); !slices.Contains(got, podA) || !slices.Contains(got, podB) {
			t.Errorf("got %v, want both pods", got)
		}
		ks = adm.must(http.MethodDelete, "/admin/killswitch", obj{"reason": "all"}, http.StatusOK)
		if ks["engaged"] != false {
			t.Errorf("got %v, want nothing engaged", ks)
		}
	})
}

// e2eViewerToken is the read-only token of the least-privilege tests.
const e2eViewerToken = "e2e-viewer-token-9876543210"

// TestE2EViewerToken: the viewer token reads every admin view and /metrics
// and changes nothing (403 forbidden); metrics_listen serves /metrics alone
// without a token; a change that names no actor is not logged as unknown.
func TestE2EViewerToken(t *testing.T) {
	cfg, _ := MustConfig(t)
	cfg.MetricsListen = "127.0.0.1:0"
	in := MustRunMain(t, cfg, func(m *server.Main) { m.ViewerToken = e2eViewerToken })
	podA, podB := cfg.Pods[0].Name, cfg.Pods[1].Name
	viewer := &apiClient{tb: t, base: in.AdminURL, token: e2eViewerToken, actor: "vic"}

	t.Run("ReadsEveryView", func(t *testing.T) {
		viewer.tb = t
		for _, p := range []string{"/admin/pods", "/admin/pods/" + podA, "/admin/killswitch", "/admin/report",
			"/admin/divergences", "/admin/audit-log", "/admin/instances", "/admin/plan"} {
			viewer.must(http.MethodGet, p, nil, http.StatusOK)
		}
		if status, body := viewer.getText("/metrics"); status != http.StatusOK || !strings.Contains(body, "tandem_pod_mode{") {
			t.Errorf("got /metrics %d, want 200 with tandem_pod_mode", status)
		}
		who := viewer.must(http.MethodGet, "/admin/whoami", nil, http.StatusOK)
		if who["role"] != "viewer" || who["can_change"] != false {
			t.Errorf("got whoami %v, want viewer without changes", who)
		}
		in.Admin.tb = t
		if who := in.Admin.must(http.MethodGet, "/admin/whoami", nil, http.StatusOK); who["role"] != "admin" {
			t.Errorf("got whoami %v with the admin token, want admin", who)
		}
	})

	t.Run("ChangesAreForbidden", func(t *testing.T) {
		viewer.tb, in.Admin.tb = t, t
		before := in.Admin.must(http.MethodGet, "/admin/audit-log?limit=1000", nil, http.StatusOK)
		changes := []struct {
			method, path string
			body         obj
		}{
			{http.MethodPut, "/admin/pods/" + podB + "/mode", obj{"mode": "shadow", "reason": "x"}},
			{http.MethodPost, "/admin/killswitch", obj{"reason": "x"}},
			{http.MethodDelete, "/admin/killswitch", obj{"reason": "x"}},
			{http.MethodPost, "/admin/pods/" + podA + "/audit", obj{"reason": "x"}},
			{http.MethodPost, "/admin/pods/" + podA + "/resync", obj{"reason": "x", "from": "mysql"}},
			{http.MethodPost, "/admin/plan/start", obj{"reason": "x"}},
		}
		for _, c := range changes {
			viewer.mustErr(c.method, c.path, c.body, http.StatusForbidden, "forbidden")
		}
		if st := podStatus(in.Admin, podB); st["mode"] != "redis" || st["kill_switch"] != false {
			t.Errorf("got %v after forbidden changes, want pod B untouched", st)
		}
		after := in.Admin.must(http.MethodGet, "/admin/audit-log?limit=1000", nil, http.StatusOK)
		if len(asSlice(after["entries"])) != len(asSlice(before["entries"])) {
			t.Errorf("got the audit log grown by forbidden changes, want it unchanged")
		}
	})

	t.Run("MetricsListenServesMetricsAlone", func(t *testing.T) {
		anon := &apiClient{tb: t, base: "http://" + in.Main.MetricsAddr}
		if status, body := anon.getText("/metrics"); status != http.StatusOK || !strings.Contains(body, "tandem_pod_mode{") {
			t.Errorf("got %d from metrics_listen without a token, want 200 with the metrics", status)
		}
		anon.mustErr(http.MethodGet, "/admin/pods", nil, http.StatusNotFound, "not_found")
		anon.mustErr(http.MethodGet, "/", nil, http.StatusNotFound, "not_found")
		// The admin listener still wants a token for /metrics.
		(&apiClient{tb: t, base: in.AdminURL}).mustErr(http.MethodGet, "/metrics", nil, http.StatusUnauthorized, "unauthorized")
	})

	t.Run("ActorIsNeverUnknown", func(t *testing.T) {
		anonymous := &apiClient{tb: t, base: in.AdminURL, token: e2eAdminToken}
		anonymous.must(http.MethodPost, "/admin/pods/"+podA+"/audit", obj{"reason": "who am I"}, http.StatusOK)
		in.Admin.tb = t
		first := asSlice(in.Admin.must(http.MethodGet, "/admin/audit-log?limit=1", nil, http.StatusOK)["entries"])[0].(obj)
		if first["reason"] != "who am I" || first["actor"] == "unknown" || !strings.HasPrefix(first["actor"].(string), "admin-token@") {
			t.Errorf("got entry %v, want an actor naming the token and the client, never unknown", first)
		}
	})
}
