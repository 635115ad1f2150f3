package web_test

import (
	"context"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/web"
)

// fakePlan is a tandem.PlanService that records its calls and answers Err (with
// Status when ErrStatus is set) when Err is set, else a running plan.
type fakePlan struct {
	calls
	Err       error
	ErrStatus bool
	// NoAnswer makes every method return neither a status nor an error.
	NoAnswer bool
}

var _ tandem.PlanService = (*fakePlan)(nil)

func (f *fakePlan) answer(name string, arg any, phase tandem.PlanPhase) (*tandem.Plan, error) {
	f.record(name, arg)
	if f.NoAnswer {
		return nil, nil
	}
	soak := at.Add(30 * time.Minute)
	st := &tandem.Plan{Phase: phase, Order: []string{"pod-b", "pod-a"}, Promoted: []string{"pod-b"},
		Waiting: "soaking pod-b", Pods: []tandem.PlanPod{{Pod: "pod-b", Mode: tandem.ModeMySQL, Step: "mysql_soak", SoakUntil: &soak}}}
	if f.Err != nil {
		if f.ErrStatus {
			return st, f.Err
		}
		return nil, f.Err
	}
	return st, nil
}

func (f *fakePlan) PlanStatus(ctx context.Context) (*tandem.Plan, error) {
	return f.answer("PlanStatus", nil, "running")
}

func (f *fakePlan) StartPlan(ctx context.Context, st tandem.PlanStart) (*tandem.Plan, error) {
	if st.ShadowSoak == nil && st.MySQLSoak == nil && st.FinalMode == nil && st.Parallel == nil && st.Approval == nil &&
		st.ConfirmWebhooks == nil && st.ConfirmTimeout == nil && st.RehearsalSpeed == nil && st.RehearsalP99Max == nil {
		return f.answer("StartPlan", st.Change, "running")
	}
	return f.answer("StartPlan", st, "running")
}

func (f *fakePlan) PausePlan(ctx context.Context, ch tandem.Change) (*tandem.Plan, error) {
	return f.answer("PausePlan", ch, "paused")
}

func (f *fakePlan) ResumePlan(ctx context.Context, ch tandem.Change) (*tandem.Plan, error) {
	return f.answer("ResumePlan", ch, "running")
}

func (f *fakePlan) AbortPlan(ctx context.Context, ch tandem.Change) (*tandem.Plan, error) {
	return f.answer("AbortPlan", ch, "aborted")
}

func (f *fakePlan) ApprovePlan(ctx context.Context, ch tandem.Change, pod string) (*tandem.Plan, error) {
	return f.answer("ApprovePlan", pod, "running")
}

func (f *fakePlan) SkipPlan(ctx context.Context, ch tandem.Change, pod string) (*tandem.Plan, error) {
	return f.answer("SkipPlan", pod, "running")
}

// newPlanAdmin returns an admin handler with a fake plan.
func newPlanAdmin(t *testing.T) (http.Handler, *fakePlan) {
	t.Helper()
	p := &fakePlan{}
	h, _ := newAdmin(t, func(s *web.AdminServer) { s.Plan = p })
	return h, p
}

var planRoutes = []struct{ method, target, call string }{
	{"GET", "/admin/plan", "PlanStatus"},
	{"POST", "/admin/plan/start", "StartPlan"},
	{"POST", "/admin/plan/pause", "PausePlan"},
	{"POST", "/admin/plan/abort", "AbortPlan"},
	{"POST", "/admin/plan/resume", "ResumePlan"},
	{"POST", "/admin/plan/approve", "ApprovePlan"},
	{"POST", "/admin/plan/skip", "SkipPlan"},
}

func TestPlanRoutes(t *testing.T) {
	for _, tc := range []struct {
		name      string
		rq        req
		call      string
		arg       any
		wantPhase string
	}{
		{name: "Status", rq: req{method: "GET", target: "/admin/plan"}, call: "PlanStatus", wantPhase: "running"},
		{name: "Start", rq: req{method: "POST", target: "/admin/plan/start", body: `{"reason":"gates green","actor":"alice"}`},
			call: "StartPlan", arg: tandem.Change{Actor: "alice", Reason: "gates green"}, wantPhase: "running"},
		{name: "StartActorFromHeader", rq: req{method: "POST", target: "/admin/plan/start", body: `{"reason":"r"}`, header: map[string]string{"X-Actor": "bob"}},
			call: "StartPlan", arg: tandem.Change{Actor: "bob", Reason: "r"}, wantPhase: "running"},
		{name: "BodyActorBeatsHeader", rq: req{method: "POST", target: "/admin/plan/start", body: `{"reason":"r","actor":"alice"}`, header: map[string]string{"X-Actor": "bob"}},
			call: "StartPlan", arg: tandem.Change{Actor: "alice", Reason: "r"}, wantPhase: "running"},
		{name: "Pause", rq: req{method: "POST", target: "/admin/plan/pause", body: `{"reason":"peak hours"}`},
			call: "PausePlan", arg: tandem.Change{Actor: defaultActor, Reason: "peak hours"}, wantPhase: "paused"},
		{name: "Abort", rq: req{method: "POST", target: "/admin/plan/abort", body: `{"reason":"divergences on pod-b"}`},
			call: "AbortPlan", arg: tandem.Change{Actor: defaultActor, Reason: "divergences on pod-b"}, wantPhase: "aborted"},
		{name: "Resume", rq: req{method: "POST", target: "/admin/plan/resume", body: `{"reason":"after peak"}`},
			call: "ResumePlan", arg: tandem.Change{Actor: defaultActor, Reason: "after peak"}, wantPhase: "running"},
		{name: "Approve", rq: req{method: "POST", target: "/admin/plan/approve", body: `{"reason":"looks good","pod":"pod-b"}`},
			call: "ApprovePlan", arg: "pod-b", wantPhase: "running"},
		{name: "StartWithSettings", rq: req{method: "POST", target: "/admin/plan/start", body: `{"reason":"r","actor":"a","shadow_soak":"5m","parallel":2}`},
			call: "StartPlan", arg: tandem.PlanStart{Change: tandem.Change{Actor: "a", Reason: "r"}, ShadowSoak: ptr(5 * time.Minute), Parallel: ptr(2)}, wantPhase: "running"},
		{name: "StartWithConfirmWebhooks", rq: req{method: "POST", target: "/admin/plan/start", body: `{"reason":"r","actor":"a","confirm_webhooks":["http://127.0.0.1:9/confirm"],"confirm_timeout":"3s"}`},
			call: "StartPlan", arg: tandem.PlanStart{Change: tandem.Change{Actor: "a", Reason: "r"}, ConfirmWebhooks: []string{"http://127.0.0.1:9/confirm"}, ConfirmTimeout: ptr(3 * time.Second)}, wantPhase: "running"},
		{name: "StartWithRehearsal", rq: req{method: "POST", target: "/admin/plan/start", body: `{"reason":"r","actor":"a","rehearsal":{"speed":3,"p99_max":"40ms"}}`},
			call: "StartPlan", arg: tandem.PlanStart{Change: tandem.Change{Actor: "a", Reason: "r"}, RehearsalSpeed: ptr(3.0), RehearsalP99Max: ptr(40 * time.Millisecond)}, wantPhase: "running"},
		{name: "StartWithoutRehearsal", rq: req{method: "POST", target: "/admin/plan/start", body: `{"reason":"r","actor":"a","rehearsal":{"speed":0}}`},
			call: "StartPlan", arg: tandem.PlanStart{Change: tandem.Change{Actor: "a", Reason: "r"}, RehearsalSpeed: ptr(0.0)}, wantPhase: "running"},
		{name: "StartWithoutConfirmWebhooks", rq: req{method: "POST", target: "/admin/plan/start", body: `{"reason":"r","actor":"a","confirm_webhooks":[]}`},
			call: "StartPlan", arg: tandem.PlanStart{Change: tandem.Change{Actor: "a", Reason: "r"}, ConfirmWebhooks: []string{}}, wantPhase: "running"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, p := newPlanAdmin(t)
			tc.rq.token = adminToken
			got := mustJSON(t, do(t, h, tc.rq), http.StatusOK)
			if names := p.Names(); len(names) != 1 || names[0] != tc.call {
				t.Fatalf("got calls %v, want [%s]", names, tc.call)
			}
			if tc.arg != nil && !reflect.DeepEqual(p.Last(), tc.arg) {
				t.Fatalf("got argument %+v, want %+v", p.Last(), tc.arg)
			}
			want := map[string]any{"phase": tc.wantPhase, "order": []any{"pod-b", "pod-a"}, "promoted": []any{"pod-b"},
				"waiting": "soaking pod-b", "driver": "",
				"settings": map[string]any{"shadow_soak": "", "mysql_soak": "", "final_mode": "", "parallel": float64(0), "approval": false,
					"confirm_webhooks": []any{}, "confirm_timeout": ""},
				"pods": []any{map[string]any{"pod": "pod-b", "mode": "mysql", "step": "mysql_soak", "soak_until": "2026-11-30T10:30:00Z",
					"gates": map[string]any{"passing": false, "checks": []any{}}}}}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("got %v, want %v", got, want)
			}
		})
	}
	t.Run("EmptyListsAreArrays", func(t *testing.T) {
		h, _ := newAdmin(t, func(s *web.AdminServer) { s.Plan = idlePlan{} })
		got := mustJSON(t, do(t, h, req{method: "GET", target: "/admin/plan", token: adminToken}), http.StatusOK)
		want := map[string]any{"phase": "idle", "order": []any{}, "promoted": []any{}, "pods": []any{}, "driver": "",
			"settings": map[string]any{"shadow_soak": "", "mysql_soak": "", "final_mode": "", "parallel": float64(0), "approval": false,
				"confirm_webhooks": []any{}, "confirm_timeout": ""}}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("got %v, want %v", got, want)
		}
	})
}

// idlePlan answers an idle plan with nil lists and no soak.
type idlePlan struct{}

func ptr[T any](v T) *T { return &v }

func (idlePlan) PlanStatus(ctx context.Context) (*tandem.Plan, error) {
	return &tandem.Plan{Phase: "idle"}, nil
}

func (idlePlan) StartPlan(ctx context.Context, st tandem.PlanStart) (*tandem.Plan, error) {
	return &tandem.Plan{Phase: "running"}, nil
}

func (idlePlan) PausePlan(ctx context.Context, ch tandem.Change) (*tandem.Plan, error) {
	return &tandem.Plan{Phase: "paused"}, nil
}

func (idlePlan) ResumePlan(ctx context.Context, ch tandem.Change) (*tandem.Plan, error) {
	return &tandem.Plan{Phase: "running"}, nil
}

func (idlePlan) AbortPlan(ctx context.Context, ch tandem.Change) (*tandem.Plan, error) {
	return &tandem.Plan{Phase: "aborted"}, nil
}

func (idlePlan) ApprovePlan(ctx context.Context, ch tandem.Change, pod string) (*tandem.Plan, error) {
	return &tandem.Plan{Phase: "running"}, nil
}

func (idlePlan) SkipPlan(ctx context.Context, ch tandem.Change, pod string) (*tandem.Plan, error) {
	return &tandem.Plan{Phase: "running"}, nil
}

func TestPlanBadInput(t *testing.T) {
	long := strings.Repeat("é", web.MaxReasonLen+1)
	for _, tc := range []struct {
		name   string
		rq     req
		status int
		code   string
	}{
		{name: "MissingReason", rq: req{method: "POST", target: "/admin/plan/start", body: `{}`}, status: 400, code: tandem.EINVALID},
		{name: "BlankReason", rq: req{method: "POST", target: "/admin/plan/pause", body: `{"reason":"  "}`}, status: 400, code: tandem.EINVALID},
		{name: "ReasonTooLong", rq: req{method: "POST", target: "/admin/plan/abort", body: `{"reason":"` + long + `"}`}, status: 400, code: tandem.EINVALID},
		{name: "ActorTooLong", rq: req{method: "POST", target: "/admin/plan/start", body: `{"reason":"r","actor":"` + strings.Repeat("a", web.MaxActorLen+1) + `"}`}, status: 400, code: tandem.EINVALID},
		{name: "UnknownField", rq: req{method: "POST", target: "/admin/plan/start", body: `{"reason":"r","force":true}`}, status: 400, code: tandem.EINVALID},
		{name: "MalformedJSON", rq: req{method: "POST", target: "/admin/plan/start", body: `{"reason":`}, status: 400, code: tandem.EINVALID},
		{name: "NoBody", rq: req{method: "POST", target: "/admin/plan/start", contentType: "application/json"}, status: 400, code: tandem.EINVALID},
		{name: "TwoValues", rq: req{method: "POST", target: "/admin/plan/start", body: `{"reason":"r"} {"reason":"r"}`}, status: 400, code: tandem.EINVALID},
		{name: "NotJSON", rq: req{method: "POST", target: "/admin/plan/start", body: `reason=r`, contentType: "application/x-www-form-urlencoded"}, status: 415, code: tandem.EUNSUPPORTEDMEDIATYPE},
		{name: "TooLarge", rq: req{method: "POST", target: "/admin/plan/start", body: `{"reason":"` + strings.Repeat("a", web.MaxBodyBytes) + `"}`}, status: 413, code: tandem.EPAYLOADTOOLARGE},
		{name: "WrongMethod", rq: req{method: "PUT", target: "/admin/plan/start", body: `{"reason":"r"}`}, status: 405, code: tandem.EINVALID},
		{name: "UnknownAction", rq: req{method: "POST", target: "/admin/plan/restart", body: `{"reason":"r"}`}, status: 404, code: tandem.ENOTFOUND},
		{name: "ApproveWithoutPod", rq: req{method: "POST", target: "/admin/plan/approve", body: `{"reason":"r"}`}, status: 400, code: tandem.EINVALID},
		{name: "BadSoak", rq: req{method: "POST", target: "/admin/plan/start", body: `{"reason":"r","shadow_soak":"soon"}`}, status: 400, code: tandem.EINVALID},
		{name: "BadConfirmTimeout", rq: req{method: "POST", target: "/admin/plan/start", body: `{"reason":"r","confirm_timeout":"soon"}`}, status: 400, code: tandem.EINVALID},
		{name: "BadRehearsalP99Max", rq: req{method: "POST", target: "/admin/plan/start", body: `{"reason":"r","rehearsal":{"speed":2,"p99_max":"fast"}}`}, status: 400, code: tandem.EINVALID},
		{name: "UnknownRehearsalField", rq: req{method: "POST", target: "/admin/plan/start", body: `{"reason":"r","rehearsal":{"speed":2,"p99":"50ms"}}`}, status: 400, code: tandem.EINVALID},
		{name: "BadConfirmWebhooks", rq: req{method: "POST", target: "/admin/plan/start", body: `{"reason":"r","confirm_webhooks":"http://x"}`}, status: 400, code: tandem.EINVALID},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, p := newPlanAdmin(t)
			tc.rq.token = adminToken
			mustError(t, do(t, h, tc.rq), tc.status, tc.code)
			if names := p.Names(); len(names) != 0 {
				t.Fatalf("got calls %v, want none for bad input", names)
			}
		})
	}
}

func TestPlanAuth(t *testing.T) {
	for _, rt := range planRoutes {
		t.Run(rt.call, func(t *testing.T) {
			for name, rq := range map[string]req{
				"NoToken":    {method: rt.method, target: rt.target, body: bodyFor(rt.method)},
				"WrongToken": {method: rt.method, target: rt.target, body: bodyFor(rt.method), token: adminToken + "x"},
			} {
				h, p := newPlanAdmin(t)
				mustError(t, do(t, h, rq), http.StatusUnauthorized, tandem.EUNAUTHORIZED)
				if names := p.Names(); len(names) != 0 {
					t.Fatalf("%s: got calls %v, want none without the token", name, names)
				}
			}
		})
	}
}

func TestPlanErrors(t *testing.T) {
	t.Run("StartWhileRunningIsConflict", func(t *testing.T) {
		h, p := newPlanAdmin(t)
		p.Err, p.ErrStatus = tandem.Errorf(tandem.ECONFLICT, "the rollout plan is already running"), true
		e := mustError(t, do(t, h, req{method: "POST", target: "/admin/plan/start", token: adminToken, body: `{"reason":"r"}`}),
			http.StatusConflict, tandem.ECONFLICT)
		if got := e.Error.Details["phase"]; got != "running" {
			t.Fatalf("got details.phase %v, want running", got)
		}
		if e.Error.Message != "the rollout plan is already running" {
			t.Fatalf("got message %q, want the service's", e.Error.Message)
		}
	})
	t.Run("PauseWhenNotRunningIsConflict", func(t *testing.T) {
		h, p := newPlanAdmin(t)
		p.Err = tandem.Errorf(tandem.ECONFLICT, "the rollout plan is idle")
		e := mustError(t, do(t, h, req{method: "POST", target: "/admin/plan/pause", token: adminToken, body: `{"reason":"r"}`}),
			http.StatusConflict, tandem.ECONFLICT)
		if _, ok := e.Error.Details["phase"]; ok {
			t.Fatalf("got details %v, want no phase when the service gives no status", e.Error.Details)
		}
	})
	t.Run("ServiceRefusesChange", func(t *testing.T) {
		h, p := newPlanAdmin(t)
		p.Err = tandem.Errorf(tandem.EINVALID, "reason must be 1..500 characters")
		mustError(t, do(t, h, req{method: "POST", target: "/admin/plan/abort", token: adminToken, body: `{"reason":"r"}`}),
			http.StatusBadRequest, tandem.EINVALID)
	})
	t.Run("ControlDownIs503", func(t *testing.T) {
		h, p := newPlanAdmin(t)
		p.Err = tandem.Errorf(tandem.EUNAVAILABLE, "the control database cannot be reached")
		mustError(t, do(t, h, req{method: "POST", target: "/admin/plan/start", token: adminToken, body: `{"reason":"r"}`}),
			http.StatusServiceUnavailable, tandem.EUNAVAILABLE)
	})
	t.Run("NoAnswerIsInternal", func(t *testing.T) {
		h, p := newPlanAdmin(t)
		p.NoAnswer = true
		e := mustError(t, do(t, h, req{method: "GET", target: "/admin/plan", token: adminToken}),
			http.StatusInternalServerError, tandem.EINTERNAL)
		if e.Error.Message != "internal error" {
			t.Fatalf("got message %q, want the generic one", e.Error.Message)
		}
	})
	t.Run("NoPlanIs404", func(t *testing.T) {
		h, f := newAdmin(t)
		for _, rt := range planRoutes {
			mustError(t, do(t, h, req{method: rt.method, target: rt.target, token: adminToken, body: bodyFor(rt.method)}),
				http.StatusNotFound, tandem.ENOTFOUND)
		}
		if names := f.Names(); len(names) != 0 {
			t.Fatalf("got admin calls %v, want none", names)
		}
	})
	t.Run("NoPlanStillNeedsToken", func(t *testing.T) {
		h, _ := newAdmin(t)
		for _, rt := range planRoutes {
			mustError(t, do(t, h, req{method: rt.method, target: rt.target, body: bodyFor(rt.method)}),
				http.StatusUnauthorized, tandem.EUNAUTHORIZED)
		}
	})
}

// TestPlanRoutesListed checks that Routes, which the auth walk and the
// OpenAPI test read, lists every plan route.
func TestPlanRoutesListed(t *testing.T) {
	h, _ := newAdmin(t)
	have := map[string]bool{}
	for _, r := range web.Routes(h) {
		have[r] = true
	}
	for _, rt := range planRoutes {
		if r := rt.method + " " + rt.target; !have[r] {
			t.Errorf("got no route %s in %v, want it listed", r, web.Routes(h))
		}
	}
}
