package webhook_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/webhook"
)

// receiver is a local webhook endpoint that fails the first fail POSTs.
type receiver struct {
	mu    sync.Mutex
	fail  int
	tries int
	got   []webhook.Message
	recv  chan struct{}
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tries++
	if r.tries <= r.fail {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	var m webhook.Message
	if req.Header.Get("Content-Type") != "application/json" || json.NewDecoder(req.Body).Decode(&m) != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	r.got = append(r.got, m)
	r.recv <- struct{}{}
}

func TestNotifier(t *testing.T) {
	e := tandem.AuditLogEntry{At: time.Now(), Actor: "plan", Action: "plan_step", Pod: "pod-a",
		Reason: "rollout plan step", Before: "shadow", After: "mysql"}

	t.Run("PostsSlackCompatibleBody", func(t *testing.T) {
		r := &receiver{recv: make(chan struct{}, 4)}
		srv := httptest.NewServer(r)
		defer srv.Close()
		n := &webhook.Notifier{URLs: []string{srv.URL}, Backoff: time.Millisecond}
		n.Open()
		defer n.Close()
		n.Notify(e)
		<-r.recv
		r.mu.Lock()
		defer r.mu.Unlock()
		m := r.got[0]
		if !strings.Contains(m.Text, "plan_step by plan on pod-a (shadow -> mysql)") || m.Action != "plan_step" || m.Pod != "pod-a" {
			t.Fatalf("got %+v, want the step in text and fields", m)
		}
	})

	t.Run("RetriesWithBackoff", func(t *testing.T) {
		r := &receiver{fail: 2, recv: make(chan struct{}, 4)}
		srv := httptest.NewServer(r)
		defer srv.Close()
		n := &webhook.Notifier{URLs: []string{srv.URL}, Backoff: time.Millisecond, Retries: 3}
		n.Open()
		defer n.Close()
		n.Notify(e)
		<-r.recv
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.tries != 3 || len(r.got) != 1 {
			t.Fatalf("got %d tries, %d delivered, want 3 and 1", r.tries, len(r.got))
		}
	})

	t.Run("GivesUpAndReports", func(t *testing.T) {
		r := &receiver{fail: 100, recv: make(chan struct{}, 4)}
		srv := httptest.NewServer(r)
		defer srv.Close()
		errs := make(chan error, 1)
		n := &webhook.Notifier{URLs: []string{srv.URL}, Backoff: time.Millisecond, Retries: 2,
			OnError: func(err error) { errs <- err }}
		n.Open()
		defer n.Close()
		n.Notify(e)
		if err := <-errs; !strings.Contains(err.Error(), "500") {
			t.Fatalf("got %v, want the receiver's 500", err)
		}
	})

	t.Run("NeverBlocks", func(t *testing.T) {
		block := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-block:
			case <-r.Context().Done():
			}
		}))
		defer srv.Close()
		defer close(block)
		n := &webhook.Notifier{URLs: []string{srv.URL}, Queue: 1, Timeout: time.Minute}
		n.Open()
		defer n.Close()
		dropped := false
		for range 10 {
			dropped = !n.Notify(e) || dropped
		}
		if !dropped || n.Dropped() == 0 {
			t.Fatal("a full queue did not drop")
		}
	})
}
