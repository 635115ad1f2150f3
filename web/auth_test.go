package web_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/web"
)

const viewerToken = "v1ewer-token"

func withViewer(s *web.AdminServer) { s.ViewerToken = viewerToken }

// TestViewerToken walks every admin route with the viewer token: reads are
// served, changes are 403 forbidden and reach no service.
func TestViewerToken(t *testing.T) {
	h, f := newAdmin(t, withViewer)
	for _, rt := range web.Routes(h) {
		if publicRoutes[rt] {
			continue
		}
		method, pattern, _ := strings.Cut(rt, " ")
		target := fillPattern(pattern)
		t.Run(rt, func(t *testing.T) {
			w := do(t, h, req{method: method, target: target, body: bodyFor(method), token: viewerToken})
			if method == http.MethodGet {
				if w.Code == http.StatusUnauthorized || w.Code == http.StatusForbidden {
					t.Fatalf("got %d (%s), want the viewer token to read", w.Code, w.Body.String())
				}
				return
			}
			mustError(t, w, http.StatusForbidden, tandem.EFORBIDDEN)
		})
	}
	for _, name := range f.Names() {
		switch name {
		case "SetMode", "EngageKillSwitch", "DisengageKillSwitch", "Audit", "Resync":
			t.Errorf("got a call of %s with the viewer token, want none", name)
		}
	}
	t.Run("AdminTokenStillChanges", func(t *testing.T) {
		mustJSON(t, do(t, h, req{method: "POST", target: "/admin/killswitch", body: `{"reason":"r"}`, token: adminToken}), http.StatusOK)
	})
	t.Run("UnsetViewerTokenIsRefused", func(t *testing.T) {
		h, _ := newAdmin(t)
		mustError(t, do(t, h, req{method: "GET", target: "/admin/pods", token: viewerToken}), http.StatusUnauthorized, tandem.EUNAUTHORIZED)
	})
	t.Run("ViewerTokenEqualToAdminTokenIsAdminOnly", func(t *testing.T) {
		h, _ := newAdmin(t, func(s *web.AdminServer) { s.ViewerToken = adminToken })
		got := mustJSON(t, do(t, h, req{method: "GET", target: "/admin/whoami", token: adminToken}), http.StatusOK)
		if got["role"] != "admin" {
			t.Errorf("got %v, want admin", got)
		}
	})
}

func TestWhoami(t *testing.T) {
	h, _ := newAdmin(t, withViewer)
	for _, tc := range []struct {
		token, role string
		canChange   bool
	}{{adminToken, "admin", true}, {viewerToken, "viewer", false}} {
		w := do(t, h, req{method: "GET", target: "/admin/whoami", token: tc.token})
		if strings.Contains(w.Body.String(), tc.token) {
			t.Errorf("got the token in the answer %q", w.Body.String())
		}
		got := mustJSON(t, w, http.StatusOK)
		if got["role"] != tc.role || got["can_change"] != tc.canChange {
			t.Errorf("got %v, want role %s can_change %v", got, tc.role, tc.canChange)
		}
	}
	mustError(t, do(t, h, req{method: "GET", target: "/admin/whoami"}), http.StatusUnauthorized, tandem.EUNAUTHORIZED)
}

func TestMetricsHandler(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "tandem_test_total", Help: "test"})
	reg.MustRegister(c)
	s := &web.AdminServer{Token: adminToken, Gatherer: reg}
	h := s.MetricsHandler()
	w := do(t, h, req{method: "GET", target: "/metrics"})
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "tandem_test_total") {
		t.Fatalf("got %d %q, want the metrics without a token", w.Code, w.Body.String())
	}
	for _, target := range []string{"/admin/pods", "/", "/healthz"} {
		mustError(t, do(t, h, req{method: "GET", target: target, token: adminToken}), http.StatusNotFound, tandem.ENOTFOUND)
	}
}

// TestAdminAccessLog: one info line per admin change or refusal with
// method, route, status, duration, actor and role, a debug line per read
// answered; never the token.
func TestAdminAccessLog(t *testing.T) {
	core, all := observer.New(zapcore.DebugLevel)
	do(t, mustAdminFor(t, core), req{method: "GET", target: "/admin/pods", token: adminToken})
	if reads := all.FilterMessage("request").All(); len(reads) != 1 || reads[0].Level != zapcore.DebugLevel {
		t.Fatalf("got %v, want one debug line for a read", reads)
	}
	core, logs := observer.New(zapcore.InfoLevel)
	h, _ := newAdmin(t, withViewer, func(s *web.AdminServer) { s.Logger = zap.New(core) })
	do(t, h, req{method: "POST", target: "/admin/killswitch", body: `{"reason":"r","actor":"dana"}`, token: adminToken})
	do(t, h, req{method: "PUT", target: "/admin/pods/pod-a/mode", body: `{"mode":"redis","reason":"r"}`, token: viewerToken,
		header: map[string]string{"X-Actor": "vic"}})
	do(t, h, req{method: "GET", target: "/admin/pods", token: "wrong"})
	lines := logs.FilterMessage("request").All()
	if len(lines) != 3 {
		t.Fatalf("got %d access lines, want 3", len(lines))
	}
	for i, w := range []struct {
		method, route, actor, role string
		status                     int64
	}{
		{"POST", "/admin/killswitch", "dana", "admin", 200},
		{"PUT", "/admin/pods/{pod}/mode", "vic", "viewer", 403},
		{"GET", "/admin/pods", "", "", 401},
	} {
		f := lines[i].ContextMap()
		if f["method"] != w.method || f["route"] != w.route || f["actor"] != w.actor || f["role"] != w.role || f["status"] != w.status {
			t.Errorf("line %d: got %v, want %+v", i, f, w)
		}
		if _, ok := f["duration"]; !ok {
			t.Errorf("line %d: got no duration", i)
		}
		for _, v := range f {
			if s, _ := v.(string); strings.Contains(s, adminToken) || strings.Contains(s, viewerToken) || strings.Contains(s, "wrong") {
				t.Errorf("line %d: got a token in %v", i, f)
			}
		}
	}
}

func mustAdminFor(t *testing.T, core zapcore.Core) http.Handler {
	t.Helper()
	h, _ := newAdmin(t, withViewer, func(s *web.AdminServer) { s.Logger = zap.New(core) })
	return h
}
