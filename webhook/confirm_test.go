package webhook_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/webhook"
)

func TestConfirmer(t *testing.T) {
	p := tandem.Promotion{Pod: "pod-a", From: tandem.ModeShadow, To: tandem.ModeMySQL, PlanID: "p1", At: time.Now()}
	serve := func(t *testing.T, h http.HandlerFunc) string {
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		return srv.URL
	}
	c := &webhook.Confirmer{}

	t.Run("TwoXXConfirms", func(t *testing.T) {
		u := serve(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusAccepted) })
		if err := c.Confirm(context.Background(), u, p); err != nil {
			t.Fatalf("got %v, want nil", err)
		}
	})
	t.Run("RefusalSaysWhat", func(t *testing.T) {
		u := serve(t, func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "error budget\n  spent", http.StatusServiceUnavailable)
		})
		err := c.Confirm(context.Background(), u, p)
		if err == nil || err.Error() != "answered 503 Service Unavailable: error budget spent" {
			t.Fatalf("got %v, want the status and the body's words", err)
		}
	})
	t.Run("DeadlineIsTold", func(t *testing.T) {
		u := serve(t, func(w http.ResponseWriter, r *http.Request) {
			// Read to the end, so that the server notices the client leave.
			io.Copy(io.Discard, r.Body)
			<-r.Context().Done()
		})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		err := c.Confirm(ctx, u, p)
		if !errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), u) {
			t.Fatalf("got %v, want context.DeadlineExceeded without the URL", err)
		}
	})
}
