package web_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/web"
)

func TestRoutes(t *testing.T) {
	t.Run("Checkout", func(t *testing.T) {
		h, _ := newCheckout(t)
		want := []string{
			"DELETE /v1/reservations/{cart_token}",
			"GET /v1/inventory/{shop_id}/{inventory_item_id}/{group_id}",
			"GET /v1/reservations/{cart_token}",
			"POST /v1/reservations",
			"POST /v1/reservations/{cart_token}/claim",
			"PUT /v1/inventory/{shop_id}/{inventory_item_id}/{group_id}",
		}
		got := web.Routes(h)
		if len(got) != len(want) {
			t.Fatalf("got %v, want %v", got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("got %v, want %v", got, want)
			}
		}
	})
	t.Run("NotARouter", func(t *testing.T) {
		if got := web.Routes(http.NotFoundHandler()); got != nil {
			t.Fatalf("got %v, want nil", got)
		}
	})
}

func TestUnmatched(t *testing.T) {
	checkout, _ := newCheckout(t)
	admin, _ := newAdmin(t)
	t.Run("UnknownPathIs404JSON", func(t *testing.T) {
		mustError(t, do(t, checkout, req{method: "GET", target: "/v2/nothing"}), http.StatusNotFound, tandem.ENOTFOUND)
	})
	t.Run("WrongMethodIs405JSON", func(t *testing.T) {
		mustError(t, do(t, checkout, req{method: "PATCH", target: "/v1/reservations"}), http.StatusMethodNotAllowed, tandem.EINVALID)
		mustError(t, do(t, admin, req{method: "POST", target: "/healthz"}), http.StatusMethodNotAllowed, tandem.EINVALID)
	})
	t.Run("WrongMethodOnAdminNeedsToken", func(t *testing.T) {
		mustError(t, do(t, admin, req{method: "PATCH", target: "/admin/pods"}), http.StatusUnauthorized, tandem.EUNAUTHORIZED)
		mustError(t, do(t, admin, req{method: "PATCH", target: "/admin/pods", token: adminToken}), http.StatusMethodNotAllowed, tandem.EINVALID)
	})
}

func TestNewHTTPServer(t *testing.T) {
	s := web.NewHTTPServer("127.0.0.1:0", http.NotFoundHandler())
	if s.Addr != "127.0.0.1:0" || s.Handler == nil {
		t.Fatalf("got addr %q handler %v, want both set", s.Addr, s.Handler)
	}
	if s.ReadHeaderTimeout <= 0 || s.ReadTimeout <= 0 || s.WriteTimeout <= 0 || s.IdleTimeout <= 0 || s.MaxHeaderBytes <= 0 {
		t.Fatalf("got %v/%v/%v/%v/%d, want every timeout and the header limit set",
			s.ReadHeaderTimeout, s.ReadTimeout, s.WriteTimeout, s.IdleTimeout, s.MaxHeaderBytes)
	}
}

// TestBodyLimitWithoutLength checks the 64 KiB limit on a body whose
// length is not announced (chunked), where only reading can tell.
func TestBodyLimitWithoutLength(t *testing.T) {
	h, f := newCheckout(t)
	body := `{"cart_token":"c-1","shop_id":1,"lines":[` + strings.Repeat(" ", web.MaxBodyBytes) + `]}`
	r := httptest.NewRequest("POST", "/v1/reservations", io.MultiReader(strings.NewReader(body)))
	r.ContentLength = -1
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	mustError(t, w, http.StatusRequestEntityTooLarge, tandem.EPAYLOADTOOLARGE)
	if n := len(f.Names()); n != 0 {
		t.Fatalf("got %d calls, want 0", n)
	}
}

// TestEmbeddedDashboard serves the dashboard built into the binary.
func TestEmbeddedDashboard(t *testing.T) {
	h, _ := newAdmin(t, func(s *web.AdminServer) { s.Dashboard = nil })
	w := do(t, h, req{method: "GET", target: "/"})
	if w.Code != http.StatusOK || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/html") {
		t.Fatalf("got %d %q, want the page as text/html", w.Code, w.Header().Get("Content-Type"))
	}
	for _, src := range regexp.MustCompile(`(?:src|href)="([^":/?#]+)"`).FindAllStringSubmatch(w.Body.String(), -1) {
		if a := do(t, h, req{method: "GET", target: "/" + src[1]}); a.Code != http.StatusOK {
			t.Fatalf("got %d for asset %s, want 200", a.Code, src[1])
		}
	}
	mustError(t, do(t, h, req{method: "GET", target: "/embed.go"}), http.StatusNotFound, tandem.ENOTFOUND)
}
