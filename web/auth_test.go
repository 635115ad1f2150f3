package web_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

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
