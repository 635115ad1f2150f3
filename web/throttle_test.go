package web_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/web"
)

// fakeThrottles is a tandem.ThrottleService over pod-a alone.
type fakeThrottles struct {
	calls []string
}

func (f *fakeThrottles) SetThrottle(ctx context.Context, pod string, on bool, ch tandem.Change) (*tandem.PodStatus, error) {
	if pod != "pod-a" {
		return nil, tandem.Errorf(tandem.EUNKNOWNPOD, "unknown pod %q", pod)
	}
	f.calls = append(f.calls, ch.Actor+":"+ch.Reason)
	st := fakePod(pod, tandem.ModeShadow)
	if on {
		since := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
		m := tandem.ManualThrottle{On: true, Reason: ch.Reason, Actor: ch.Actor, Since: since}
		st.Throttle = &tandem.ThrottleState{Throttled: true, Signal: tandem.SignalManual, Reason: "manual: " + ch.Reason, Since: &since, Manual: &m}
	}
	return &st, nil
}

// TestAdmin_Throttle checks PUT /admin/pods/{pod}/throttle: the pod with
// its throttle, a clear 4xx for bad input that changes nothing, and 404
// when the server keeps no throttles.
func TestAdmin_Throttle(t *testing.T) {
	f := &fakeThrottles{}
	h, _ := newAdmin(t, func(s *web.AdminServer) { s.Throttle = f })
	w := do(t, h, req{method: "PUT", target: "/admin/pods/pod-a/throttle", token: adminToken,
		body: `{"throttled":true,"reason":"black friday","actor":"alice"}`})
	m := mustJSON(t, w, http.StatusOK)
	th, _ := m["throttle"].(map[string]any)
	if th["throttled"] != true || th["reason"] != "manual: black friday" || th["signal"] != "manual" {
		t.Fatalf("throttle %v, want on by hand", th)
	}
	for _, tc := range []struct {
		name, target, body string
		status             int
		code               string
	}{
		{"NoThrottled", "/admin/pods/pod-a/throttle", `{"reason":"r"}`, 400, "invalid_request"},
		{"NoReason", "/admin/pods/pod-a/throttle", `{"throttled":false}`, 400, "invalid_request"},
		{"NotABool", "/admin/pods/pod-a/throttle", `{"throttled":"on","reason":"r"}`, 400, "invalid_request"},
		{"UnknownField", "/admin/pods/pod-a/throttle", `{"throttled":true,"reason":"r","for":"1h"}`, 400, "invalid_request"},
		{"UnknownPod", "/admin/pods/pod-x/throttle", `{"throttled":true,"reason":"r"}`, 404, "unknown_pod"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mustError(t, do(t, h, req{method: "PUT", target: tc.target, token: adminToken, body: tc.body}), tc.status, tc.code)
		})
	}
	if len(f.calls) != 1 || f.calls[0] != "alice:black friday" {
		t.Fatalf("calls %v, want alice's alone", f.calls)
	}
	t.Run("ViewerForbidden", func(t *testing.T) {
		h, _ := newAdmin(t, func(s *web.AdminServer) { s.Throttle, s.ViewerToken = f, "viewer-token" })
		mustError(t, do(t, h, req{method: "PUT", target: "/admin/pods/pod-a/throttle", token: "viewer-token",
			body: `{"throttled":true,"reason":"r"}`}), 403, "forbidden")
	})
	t.Run("NoThrottles", func(t *testing.T) {
		h, _ := newAdmin(t)
		mustError(t, do(t, h, req{method: "PUT", target: "/admin/pods/pod-a/throttle", token: adminToken,
			body: `{"throttled":true,"reason":"r"}`, anyStatus: true}), 404, "not_found")
	})
}
