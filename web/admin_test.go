package web_test

import (
	"context"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/web"
)

// fillPattern puts plausible values into a chi pattern's parameters.
func fillPattern(pattern string) string {
	return strings.NewReplacer(
		"{cart_token}", "c-1", "{shop_id}", "1", "{inventory_item_id}", "100",
		"{group_id}", "1", "{pod}", "pod-a",
	).Replace(pattern)
}

// bodyFor returns a body for methods that take one.
func bodyFor(method string) string {
	switch method {
	case "POST", "PUT", "DELETE":
		return `{"reason":"walk"}`
	}
	return ""
}

// publicRoutes need no admin token.
var publicRoutes = map[string]bool{"GET /": true, "GET /healthz": true, "GET /readyz": true, "GET /openapi.yaml": true}

func TestAdminAuthWalk(t *testing.T) {
	h, f := newAdmin(t)
	routes := web.Routes(h)
	if len(routes) < 16 {
		t.Fatalf("got %d admin routes, want every admin route of docs/api.md (%v)", len(routes), routes)
	}
	for _, rt := range routes {
		if publicRoutes[rt] {
			continue
		}
		method, pattern, _ := strings.Cut(rt, " ")
		target := fillPattern(pattern)
		t.Run(rt, func(t *testing.T) {
			for name, rq := range map[string]req{
				"NoToken":     {method: method, target: target, body: bodyFor(method)},
				"WrongToken":  {method: method, target: target, body: bodyFor(method), token: adminToken + "!"},
				"EmptyBearer": {method: method, target: target, body: bodyFor(method), header: map[string]string{"Authorization": "Bearer "}},
				"RawToken":    {method: method, target: target, body: bodyFor(method), header: map[string]string{"Authorization": adminToken}},
			} {
				w := do(t, h, rq)
				if w.Code != http.StatusUnauthorized {
					t.Fatalf("%s: got %d, want 401", name, w.Code)
				}
				mustError(t, w, http.StatusUnauthorized, tandem.EUNAUTHORIZED)
			}
		})
	}
	if n := len(f.Names()); n != 0 {
		t.Fatalf("got calls %v without the token, want none", f.Names())
	}
	t.Run("UnknownAdminPathIs401", func(t *testing.T) {
		mustError(t, do(t, h, req{method: "GET", target: "/admin/secrets"}), http.StatusUnauthorized, tandem.EUNAUTHORIZED)
	})
	t.Run("EmptyTokenRefusesAll", func(t *testing.T) {
		h, f := newAdmin(t, func(s *web.AdminServer) { s.Token = "" })
		mustError(t, do(t, h, req{method: "GET", target: "/admin/pods", header: map[string]string{"Authorization": "Bearer "}}),
			http.StatusUnauthorized, tandem.EUNAUTHORIZED)
		if n := len(f.Names()); n != 0 {
			t.Fatalf("got %d calls, want 0", n)
		}
	})
}

func TestAdminRoutes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		rq     req
		call   string
		arg    any
		check  func(t *testing.T, got map[string]any)
		status int
	}{
		{name: "Pods", rq: req{method: "GET", target: "/admin/pods"}, call: "Pods",
			check: func(t *testing.T, got map[string]any) {
				pods := got["pods"].([]any)
				p := pods[0].(map[string]any)
				if len(pods) != 2 || p["pod"] != "pod-a" || p["mode"] != "shadow" || p["source_of_truth"] != "redis" {
					t.Fatalf("got %v, want two pods, pod-a in shadow", got)
				}
				if g := p["gates"].(map[string]any); g["failed_gates"] == nil || g["passing"] != true {
					t.Fatalf("got gates %v, want passing with failed_gates []", g)
				}
			}},
		{name: "Pod", rq: req{method: "GET", target: "/admin/pods/pod-a"}, call: "Pod", arg: "pod-a",
			check: func(t *testing.T, got map[string]any) {
				for _, f := range []string{"pod", "mode", "source_of_truth", "shadow", "kill_switch", "shops", "updated_at", "gates"} {
					if _, ok := got[f]; !ok {
						t.Fatalf("got no %s in %v", f, got)
					}
				}
			}},
		{name: "SetMode", rq: req{method: "PUT", target: "/admin/pods/pod-a/mode", body: `{"mode":"mysql","reason":"gates pass","actor":"alice","force":true}`},
			call: "SetMode", arg: podCall{Pod: "pod-a", Change: tandem.ModeChange{Change: tandem.Change{Actor: "alice", Reason: "gates pass"}, Mode: tandem.ModeMySQL, Force: true}},
			check: func(t *testing.T, got map[string]any) {
				if got["mode"] != "mysql" {
					t.Fatalf("got %v, want mode mysql", got)
				}
			}},
		{name: "SetModeActorFromHeader", rq: req{method: "PUT", target: "/admin/pods/pod-a/mode", body: `{"mode":"shadow","reason":"r"}`, header: map[string]string{"X-Actor": "bob"}},
			call: "SetMode", arg: podCall{Pod: "pod-a", Change: tandem.ModeChange{Change: tandem.Change{Actor: "bob", Reason: "r"}, Mode: tandem.ModeShadow}}},
		{name: "SetModeActorDefaultsToTokenAndAddress", rq: req{method: "PUT", target: "/admin/pods/pod-a/mode", body: `{"mode":"redis","reason":"r"}`},
			call: "SetMode", arg: podCall{Pod: "pod-a", Change: tandem.ModeChange{Change: tandem.Change{Actor: defaultActor, Reason: "r"}, Mode: tandem.ModeRedis}}},
		{name: "SetModeDryRun", rq: req{method: "PUT", target: "/admin/pods/pod-a/mode", body: `{"mode":"mysql","reason":"r","dry_run":true}`},
			call: "SetMode", arg: podCall{Pod: "pod-a", Change: tandem.ModeChange{Change: tandem.Change{Actor: defaultActor, Reason: "r"}, Mode: tandem.ModeMySQL, DryRun: true}},
			check: func(t *testing.T, got map[string]any) {
				want := map[string]any{"would_apply": false, "failed_gates": []any{"min_comparisons"}, "allowed": []any{}}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("got %v, want %v", got, want)
				}
			}},
		{name: "EngageAll", rq: req{method: "POST", target: "/admin/killswitch", body: `{"reason":"mysql down"}`},
			call: "EngageKillSwitch", arg: podCall{Change: tandem.Change{Actor: defaultActor, Reason: "mysql down"}},
			check: func(t *testing.T, got map[string]any) {
				refused := got["refused"].([]any)
				if got["engaged"] != true || len(refused) != 1 || got["since"] == nil {
					t.Fatalf("got %v, want engaged with one refusal", got)
				}
			}},
		{name: "EngagePods", rq: req{method: "POST", target: "/admin/killswitch", body: `{"reason":"r","pods":["pod-a","pod-b"]}`},
			call: "EngageKillSwitch", arg: podCall{Pod: "pod-a,pod-b", Change: tandem.Change{Actor: defaultActor, Reason: "r"}}},
		{name: "Disengage", rq: req{method: "DELETE", target: "/admin/killswitch", body: `{"reason":"fixed","pods":["pod-a"]}`},
			call: "DisengageKillSwitch", arg: podCall{Pod: "pod-a", Change: tandem.Change{Actor: defaultActor, Reason: "fixed"}},
			check: func(t *testing.T, got map[string]any) {
				if got["engaged"] != false || got["pods"] == nil {
					t.Fatalf("got %v, want disengaged with pods []", got)
				}
			}},
		{name: "KillSwitch", rq: req{method: "GET", target: "/admin/killswitch"}, call: "KillSwitch"},
		{name: "Divergences", rq: req{method: "GET", target: "/admin/divergences"}, call: "Divergences", arg: tandem.DivergenceFilter{Limit: 100},
			check: func(t *testing.T, got map[string]any) {
				d := got["divergences"].([]any)[0].(map[string]any)
				if d["kind"] != "outcome_mismatch" || d["primary"].(map[string]any)["store"] != "redis" {
					t.Fatalf("got %v, want an outcome_mismatch with primary redis", d)
				}
			}},
		{name: "DivergencesFiltered", rq: req{method: "GET", target: "/admin/divergences?pod=pod-a&kind=state_drift&limit=1000"},
			call: "Divergences", arg: tandem.DivergenceFilter{Pod: "pod-a", Kind: "state_drift", Limit: 1000}},
		{name: "Report", rq: req{method: "GET", target: "/admin/report"}, call: "Report",
			check: func(t *testing.T, got map[string]any) {
				if r := got["pods"].([]any)[0].(map[string]any); r["window"] != "15m" {
					t.Fatalf("got %v, want window 15m", r)
				}
			}},
		{name: "Audit", rq: req{method: "POST", target: "/admin/pods/pod-a/audit", body: `{"reason":"before flip"}`},
			call: "Audit", arg: podCall{Pod: "pod-a", Change: tandem.Change{Actor: defaultActor, Reason: "before flip"}},
			check: func(t *testing.T, got map[string]any) {
				if got["clean"] != true || got["checked"] != 120.0 || got["drifted"] == nil {
					t.Fatalf("got %v, want clean, 120 checked, drifted []", got)
				}
			}},
		{name: "Resync", rq: req{method: "POST", target: "/admin/pods/pod-a/resync", body: `{"reason":"r","from":"mysql"}`},
			call: "Resync", arg: podCall{Pod: "pod-a from mysql", Change: tandem.Change{Actor: defaultActor, Reason: "r"}},
			check: func(t *testing.T, got map[string]any) {
				if want := map[string]any{"pod": "pod-a", "keys_rewritten": 42.0}; !reflect.DeepEqual(got, want) {
					t.Fatalf("got %v, want %v", got, want)
				}
			}},
		{name: "AuditLog", rq: req{method: "GET", target: "/admin/audit-log?limit=5"}, call: "AuditLog", arg: 5,
			check: func(t *testing.T, got map[string]any) {
				e := got["entries"].([]any)[0].(map[string]any)
				for _, f := range []string{"at", "actor", "action", "pod", "reason", "before", "after"} {
					if _, ok := e[f]; !ok {
						t.Fatalf("got no %s in %v", f, e)
					}
				}
			}},
		{name: "AuditLogDefaultLimit", rq: req{method: "GET", target: "/admin/audit-log"}, call: "AuditLog", arg: 100},
		{name: "Instances", rq: req{method: "GET", target: "/admin/instances"}, call: "Instances",
			check: func(t *testing.T, got map[string]any) {
				in := got["instances"].([]any)[0].(map[string]any)
				for _, f := range []string{"id", "addr", "started_at", "last_seen", "control_version", "stale"} {
					if _, ok := in[f]; !ok {
						t.Fatalf("got no %s in %v", f, in)
					}
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, f := newAdmin(t)
			tc.rq.token = adminToken
			got := mustJSON(t, do(t, h, tc.rq), http.StatusOK)
			if names := f.Names(); len(names) != 1 || names[0] != tc.call {
				t.Fatalf("got calls %v, want [%s]", names, tc.call)
			}
			if tc.arg != nil && !reflect.DeepEqual(f.Last(), tc.arg) {
				t.Fatalf("got argument %+v, want %+v", f.Last(), tc.arg)
			}
			if tc.check != nil {
				tc.check(t, got)
			}
		})
	}
}

func TestAdminErrors(t *testing.T) {
	t.Run("TransitionRefusedNamesGates", func(t *testing.T) {
		h, f := newAdmin(t)
		f.Err = tandem.Errorf(tandem.ETRANSITIONREFUSED, "gates fail").WithDetail("failed_gates", []string{"audit_clean"})
		e := mustError(t, do(t, h, req{method: "PUT", target: "/admin/pods/pod-a/mode", token: adminToken,
			body: `{"mode":"mysql","reason":"r"}`}), http.StatusConflict, tandem.ETRANSITIONREFUSED)
		if got := e.Error.Details["failed_gates"]; !reflect.DeepEqual(got, []any{"audit_clean"}) {
			t.Fatalf("got failed_gates %v, want [audit_clean]", got)
		}
	})
	t.Run("UnknownPod", func(t *testing.T) {
		h, f := newAdmin(t)
		f.Err = tandem.Errorf(tandem.EUNKNOWNPOD, "no pod zz")
		mustError(t, do(t, h, req{method: "GET", target: "/admin/pods/zz", token: adminToken}), http.StatusNotFound, tandem.EUNKNOWNPOD)
	})
	t.Run("ControlDown", func(t *testing.T) {
		h, f := newAdmin(t)
		f.Err = tandem.Errorf(tandem.EUNAVAILABLE, "control database unreachable")
		mustError(t, do(t, h, req{method: "GET", target: "/admin/audit-log", token: adminToken}), http.StatusServiceUnavailable, tandem.EUNAVAILABLE)
	})
}

func TestProbes(t *testing.T) {
	t.Run("Healthz", func(t *testing.T) {
		h, _ := newAdmin(t)
		if got := mustJSON(t, do(t, h, req{method: "GET", target: "/healthz"}), http.StatusOK); got["status"] != "ok" {
			t.Fatalf("got %v, want status ok", got)
		}
	})
	t.Run("ReadyzOK", func(t *testing.T) {
		h, _ := newAdmin(t, func(s *web.AdminServer) {
			s.Ready = func(ctx context.Context) (bool, map[string]string) {
				return true, map[string]string{"control_mysql": "ok", "pod-a/redis": "ok"}
			}
		})
		got := mustJSON(t, do(t, h, req{method: "GET", target: "/readyz"}), http.StatusOK)
		if deps := got["dependencies"].(map[string]any); got["status"] != "ok" || deps["pod-a/redis"] != "ok" {
			t.Fatalf("got %v, want ok with pod-a/redis ok", got)
		}
	})
	t.Run("ReadyzUnavailable", func(t *testing.T) {
		h, _ := newAdmin(t, func(s *web.AdminServer) {
			s.Ready = func(ctx context.Context) (bool, map[string]string) {
				return false, map[string]string{"control_mysql": "unreachable", "pod-a/redis": "ok"}
			}
		})
		w := do(t, h, req{method: "GET", target: "/readyz"})
		mustError(t, w, http.StatusServiceUnavailable, tandem.EUNAVAILABLE)
		got := mustJSON(t, w, http.StatusServiceUnavailable)
		if deps := got["dependencies"].(map[string]any); got["status"] != "unavailable" || deps["control_mysql"] != "unreachable" {
			t.Fatalf("got %v, want unavailable with control_mysql unreachable", got)
		}
	})
}

func TestMetricsEndpoint(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := web.NewMetrics(reg)
	h, _ := newAdmin(t, func(s *web.AdminServer) { s.Gatherer, s.Metrics = reg, m })
	do(t, h, req{method: "GET", target: "/admin/pods", token: adminToken})
	w := do(t, h, req{method: "GET", target: "/metrics", token: adminToken})
	if w.Code != http.StatusOK {
		t.Fatalf("got %d, want 200", w.Code)
	}
	body := w.Body.String()
	if !strings.Contains(body, `tandem_http_request_duration_seconds_count{api="admin",method="GET",route="/admin/pods",status="200"} 1`) {
		t.Fatalf("got metrics without the /admin/pods request:\n%s", body)
	}
}

func TestDashboard(t *testing.T) {
	h, _ := newAdmin(t)
	t.Run("IndexIsPublic", func(t *testing.T) {
		w := do(t, h, req{method: "GET", target: "/"})
		if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "<title>tandem</title>") {
			t.Fatalf("got %d %q, want the page", w.Code, w.Body.String())
		}
		if ct := w.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
			t.Fatalf("got Content-Type %q, want text/html", ct)
		}
	})
	t.Run("AssetIsPublic", func(t *testing.T) {
		w := do(t, h, req{method: "GET", target: "/app.js"})
		if w.Code != http.StatusOK || w.Body.String() != "console.log('tandem')" {
			t.Fatalf("got %d %q, want app.js", w.Code, w.Body.String())
		}
	})
	t.Run("MissingAssetIs404JSON", func(t *testing.T) {
		mustError(t, do(t, h, req{method: "GET", target: "/nope.js"}), http.StatusNotFound, tandem.ENOTFOUND)
	})
	t.Run("NoTraversal", func(t *testing.T) {
		mustError(t, do(t, h, req{method: "GET", target: "/../../etc/passwd"}), http.StatusNotFound, tandem.ENOTFOUND)
	})
	t.Run("NotBuilt", func(t *testing.T) {
		h, _ := newAdmin(t, func(s *web.AdminServer) { s.Dashboard = fstest.MapFS{} })
		mustError(t, do(t, h, req{method: "GET", target: "/"}), http.StatusNotFound, tandem.ENOTFOUND)
	})
}
