package adminclient_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/tandemhq/tandem/internal/adminclient"
)

func TestClient(t *testing.T) {
	var got *http.Request
	var gotBody string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r
		b, _ := io.ReadAll(r.Body)
		gotBody = string(b)
		switch r.URL.Path {
		case "/admin/pods":
			w.Write([]byte(`{"pods":[{"pod":"pod-a"}]}`))
		case "/admin/refused":
			w.WriteHeader(http.StatusConflict)
			w.Write([]byte(`{"error":{"code":"transition_refused","message":"gates fail","details":{"failed_gates":["comparisons"]}}}`))
		default:
			w.WriteHeader(http.StatusBadGateway)
			w.Write([]byte("<html>bad gateway</html>"))
		}
	}))
	defer srv.Close()
	var raw []string
	c := &adminclient.Client{Base: srv.URL + "/", Token: "tok", Actor: "alice", HTTP: srv.Client(),
		Raw: func(b []byte) { raw = append(raw, string(b)) }}
	ctx := context.Background()

	t.Run("OK", func(t *testing.T) {
		var out struct {
			Pods []struct {
				Pod string `json:"pod"`
			} `json:"pods"`
		}
		err := c.Call(ctx, http.MethodPut, "/admin/pods", url.Values{"limit": {"5"}}, map[string]string{"reason": "x"}, &out)
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Pods) != 1 || out.Pods[0].Pod != "pod-a" {
			t.Errorf("got %+v, want pod-a", out)
		}
		if h := got.Header; h.Get("Authorization") != "Bearer tok" || h.Get("X-Actor") != "alice" || h.Get("Content-Type") != "application/json" {
			t.Errorf("got headers %v, want the bearer token, X-Actor and JSON content type", h)
		}
		if got.URL.RawQuery != "limit=5" || gotBody != `{"reason":"x"}` {
			t.Errorf("got query %q body %q, want limit=5 and the JSON body", got.URL.RawQuery, gotBody)
		}
	})
	t.Run("ErrorJSON", func(t *testing.T) {
		_, err := c.Do(ctx, http.MethodPost, "/admin/refused", nil, nil)
		var ae *adminclient.Error
		if !errors.As(err, &ae) {
			t.Fatalf("got %v, want an *adminclient.Error", err)
		}
		if ae.Status != http.StatusConflict || ae.Code != "transition_refused" || ae.Message != "gates fail" || ae.Details["failed_gates"] == nil {
			t.Errorf("got %+v, want 409 transition_refused with its details", ae)
		}
	})
	t.Run("NotErrorJSON", func(t *testing.T) {
		_, err := c.Do(ctx, http.MethodGet, "/elsewhere", nil, nil)
		var ae *adminclient.Error
		if !errors.As(err, &ae) || ae.Code != "http_502" || ae.Message != "<html>bad gateway</html>" {
			t.Errorf("got %v, want http_502 with the answer's first bytes", err)
		}
	})
	t.Run("RawSeesEveryAnswer", func(t *testing.T) {
		if len(raw) != 3 {
			t.Errorf("got %d raw answers, want 3 (2xx and errors alike)", len(raw))
		}
	})
}
