package rollout_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/rollout"
	"github.com/tandemhq/tandem/webhook"
)

// confirmReceiver is a local confirm webhook: it answers status (200 at
// first), after release when hold is set, and hands every Promotion it
// got to got.
type confirmReceiver struct {
	status  atomic.Int32
	hold    atomic.Bool
	release chan struct{}
	got     chan tandem.Promotion
	srv     *httptest.Server
}

func newConfirmReceiver(t *testing.T) *confirmReceiver {
	t.Helper()
	r := &confirmReceiver{release: make(chan struct{}), got: make(chan tandem.Promotion, 64)}
	r.status.Store(http.StatusOK)
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var p tandem.Promotion
		if req.Header.Get("Content-Type") != "application/json" || json.NewDecoder(req.Body).Decode(&p) != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		// Read to the end, so that the server notices the client leave.
		io.Copy(io.Discard, req.Body)
		r.got <- p
		if r.hold.Load() {
			select {
			case <-r.release:
			case <-req.Context().Done():
				return
			}
		}
		w.WriteHeader(int(r.status.Load()))
		w.Write([]byte("analysis says no\n"))
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// confirmEnv is an env whose plan asks r, with every answer told on answers.
type confirmEnv struct {
	*env
	answers chan tandem.AuditLogEntry
}

func newConfirmEnv(t *testing.T, modes ...tandem.Mode) *confirmEnv {
	t.Helper()
	e := &confirmEnv{answers: make(chan tandem.AuditLogEntry, 64)}
	e.env = newEnvWith(t, newMemStore(), "test", func(c *rollout.Controller) {
		c.Confirmer = &webhook.Confirmer{}
		c.OnChange = func(le tandem.AuditLogEntry) {
			if le.Action == rollout.ActionPlanConfirm {
				e.answers <- le
			}
		}
	}, modes...)
	return e
}

// start starts a plan without soaks whose promotions ask r.
func (e *confirmEnv) start(t *testing.T, r *confirmReceiver, timeout time.Duration, opts ...func(*tandem.PlanStart)) {
	t.Helper()
	zero := time.Duration(0)
	planStart(t, e.env, append([]func(*tandem.PlanStart){func(s *tandem.PlanStart) {
		s.ShadowSoak, s.MySQLSoak = &zero, &zero
		s.ConfirmWebhooks, s.ConfirmTimeout = []string{r.srv.URL}, &timeout
	}}, opts...)...)
}

// recv receives from ch, failing the test if nothing comes for long (a
// plan that never asks); it measures nothing.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(20 * time.Second):
		t.Fatalf("never: %s", what)
		panic("unreachable")
	}
}

// answer waits for the confirm webhooks' next answer about pod.
func (e *confirmEnv) answer(t *testing.T, pod string) tandem.AuditLogEntry {
	t.Helper()
	le := recv(t, e.answers, "an answer of the confirm webhooks about "+pod)
	if le.Pod != pod {
		t.Fatalf("got an answer about %s, want %s", le.Pod, pod)
	}
	return le
}

func waiting(p *tandem.Plan, pod string) string {
	for _, pp := range p.Pods {
		if pp.Pod == pod {
			return pp.Waiting
		}
	}
	return ""
}

func TestController_PlanConfirmWebhooks(t *testing.T) {
	shadow := []tandem.Mode{tandem.ModeShadow, tandem.ModeShadow, tandem.ModeShadow}

	t.Run("TwoXXPromotes", func(t *testing.T) {
		r := newConfirmReceiver(t)
		e := newConfirmEnv(t, shadow...)
		e.start(t, r, time.Minute)
		e.healthy()
		p := e.stepPlan(t)
		if e.ctl.Mode("pod-b") != tandem.ModeShadow || !strings.Contains(waiting(p, "pod-b"), "waiting for the answer of 1 confirm webhook") {
			t.Fatalf("got %s waiting %q, want shadow waiting for the webhook", e.ctl.Mode("pod-b"), waiting(p, "pod-b"))
		}
		got := recv(t, r.got, "a promotion at the confirm webhook")
		if got.Pod != "pod-b" || got.From != tandem.ModeShadow || got.To != tandem.ModeMySQL || got.PlanID == "" ||
			got.Driver != "test" || got.At.IsZero() || !got.Gates.Passing || len(got.Gates.Checks) == 0 {
			t.Fatalf("got promotion %+v, want pod-b shadow -> mysql with its plan, driver, passing gates and time", got)
		}
		for _, c := range got.Gates.Checks {
			if c.Gate == tandem.GateComparisons && (c.Threshold != 100 || c.Value < 100) {
				t.Errorf("got %+v, want comparisons with value and threshold 100", c)
			}
		}
		if a := e.answer(t, "pod-b"); a.After != "confirmed" {
			t.Fatalf("got answer %+v, want confirmed", a)
		}
		p = e.stepPlan(t)
		if e.ctl.Mode("pod-b") != tandem.ModeMySQL || step(p, "pod-b") != tandem.StepMySQLSoak {
			t.Fatalf("got %s step %s, want pod-b promoted into its mysql soak", e.ctl.Mode("pod-b"), step(p, "pod-b"))
		}
	})

	t.Run("RefusalKeepsThePodWaitingThenTwoXXPromotes", func(t *testing.T) {
		r := newConfirmReceiver(t)
		r.status.Store(http.StatusServiceUnavailable)
		e := newConfirmEnv(t, shadow...)
		e.start(t, r, time.Minute)
		e.healthy()
		e.stepPlan(t)
		if a := e.answer(t, "pod-b"); a.After != "not confirmed" || !strings.Contains(a.Reason, "answered 503") {
			t.Fatalf("got answer %+v, want a refusal with 503", a)
		}
		p := e.stepPlan(t)
		want := "confirm webhook " + r.srv.URL + " answered 503 Service Unavailable: analysis says no"
		if e.ctl.Mode("pod-b") != tandem.ModeShadow || !strings.Contains(waiting(p, "pod-b"), want) || !strings.Contains(p.Waiting, want) {
			t.Fatalf("got %s, pod waiting %q, plan waiting %q, want shadow and %q", e.ctl.Mode("pod-b"), waiting(p, "pod-b"), p.Waiting, want)
		}
		// The turn that showed the refusal asked again.
		e.answer(t, "pod-b")
		r.status.Store(http.StatusNoContent)
		e.stepPlan(t)
		if a := e.answer(t, "pod-b"); a.After != "confirmed" {
			t.Fatalf("got answer %+v, want confirmed", a)
		}
		if e.stepPlan(t); e.ctl.Mode("pod-b") != tandem.ModeMySQL {
			t.Fatalf("got %s, want mysql once the webhook answers 204", e.ctl.Mode("pod-b"))
		}
	})

	t.Run("TimeoutKeepsThePodWaiting", func(t *testing.T) {
		r := newConfirmReceiver(t)
		r.hold.Store(true)
		e := newConfirmEnv(t, shadow...)
		e.start(t, r, 20*time.Millisecond)
		e.healthy()
		e.stepPlan(t)
		e.answer(t, "pod-b")
		p := e.stepPlan(t)
		if w := waiting(p, "pod-b"); e.ctl.Mode("pod-b") != tandem.ModeShadow || !strings.Contains(w, "timed out after 20ms") {
			t.Fatalf("got %s waiting %q, want shadow waiting on the timeout", e.ctl.Mode("pod-b"), w)
		}
		e.answer(t, "pod-b")
		r.hold.Store(false)
		e.stepPlan(t)
		e.answer(t, "pod-b")
		if e.stepPlan(t); e.ctl.Mode("pod-b") != tandem.ModeMySQL {
			t.Fatalf("got %s, want mysql once the webhook answers in time", e.ctl.Mode("pod-b"))
		}
	})

	t.Run("TurnsKeepTheLeaseWhileTheReceiverThinks", func(t *testing.T) {
		r := newConfirmReceiver(t)
		r.hold.Store(true)
		e := newConfirmEnv(t, shadow...)
		e.start(t, r, time.Minute)
		e.healthy()
		e.stepPlan(t)
		recv(t, r.got, "a promotion at the confirm webhook")
		// The receiver holds the call: turns go on and renew the lease.
		for range 3 {
			e.clk.Advance(4 * time.Second)
			e.healthy()
			p := e.stepPlan(t)
			if p.Driver != "test" || p.LeaseUntil == nil || !p.LeaseUntil.After(e.clk.Now()) {
				t.Fatalf("got driver %q lease %v, want test's lease renewed", p.Driver, p.LeaseUntil)
			}
			if e.ctl.Mode("pod-b") != tandem.ModeShadow || !strings.Contains(waiting(p, "pod-b"), "waiting for the answer") {
				t.Fatalf("got %s waiting %q, want shadow waiting for the answer", e.ctl.Mode("pod-b"), waiting(p, "pod-b"))
			}
		}
		close(r.release)
		e.answer(t, "pod-b")
		if e.stepPlan(t); e.ctl.Mode("pod-b") != tandem.ModeMySQL {
			t.Fatalf("got %s, want mysql", e.ctl.Mode("pod-b"))
		}
	})

	t.Run("MySQLOnlyAsksToo", func(t *testing.T) {
		r := newConfirmReceiver(t)
		e := newConfirmEnv(t, tandem.ModeMySQL, tandem.ModeMySQL, tandem.ModeMySQL)
		final := tandem.ModeMySQLOnly
		e.start(t, r, time.Minute, func(s *tandem.PlanStart) { s.FinalMode = &final })
		e.healthy()
		e.stepPlan(t)
		if got := recv(t, r.got, "a promotion at the confirm webhook"); got.From != tandem.ModeMySQL || got.To != tandem.ModeMySQLOnly {
			t.Fatalf("got %s -> %s, want mysql -> mysql_only", got.From, got.To)
		}
		if e.ctl.Mode("pod-b") != tandem.ModeMySQL {
			t.Fatal("moved to mysql_only before the webhook answered")
		}
		e.answer(t, "pod-b")
		e.healthy()
		if e.stepPlan(t); e.ctl.Mode("pod-b") != tandem.ModeMySQLOnly {
			t.Fatalf("got %s, want mysql_only", e.ctl.Mode("pod-b"))
		}
	})

	t.Run("SettingsShownAndChecked", func(t *testing.T) {
		r := newConfirmReceiver(t)
		e := newConfirmEnv(t, shadow...)
		e.start(t, r, 3*time.Second)
		p, err := e.ctl.PlanStatus(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if s := p.Settings; len(s.ConfirmWebhooks) != 1 || s.ConfirmWebhooks[0] != r.srv.URL || s.ConfirmTimeout != "3s" {
			t.Fatalf("got settings %+v, want the webhook and 3s", s)
		}
		e.ctl.AbortPlan(context.Background(), why)
		for _, urls := range [][]string{{"ftp://x"}, {"not a url"}, {"http://"}} {
			_, err := e.ctl.StartPlan(context.Background(), tandem.PlanStart{Change: why, ConfirmWebhooks: urls})
			if tandem.ErrorCode(err) != tandem.EINVALID {
				t.Errorf("%v: got %v, want invalid", urls, err)
			}
		}
		long := time.Hour
		if _, err := e.ctl.StartPlan(context.Background(), tandem.PlanStart{Change: why, ConfirmTimeout: &long}); tandem.ErrorCode(err) != tandem.EINVALID {
			t.Errorf("confirm_timeout 1h: got %v, want invalid", err)
		}
	})
}
