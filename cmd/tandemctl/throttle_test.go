package main_test

import (
	"reflect"
	"strings"
	"testing"
)

const throttledAnswer = `{"pod":"pod-a","mode":"redis","source_of_truth":"redis","shadow":"","kill_switch":false,"shops":"1-3","updated_at":"2026-11-30T10:00:00Z",` +
	`"gates":{"comparisons":0,"divergence_rate":0,"last_audit_clean":false,"passing":false,"failed_gates":[]},` +
	`"throttle":{"throttled":true,"reason":"manual: black friday","signal":"manual","since":"2026-11-30T10:00:00Z",` +
	`"manual":{"on":true,"reason":"black friday","actor":"alice","since":"2026-11-30T10:00:00Z"}}}`

// TestThrottle checks `tandemctl throttle POD on|off --reason R`: the
// request, what it prints, the throttle in `pods`, and usage errors that
// send nothing.
func TestThrottle(t *testing.T) {
	t.Run("On", func(t *testing.T) {
		api := newFakeAPI(t, 200, throttledAnswer)
		code, stdout, stderr := run(t, envFor(api.URL), "throttle", "pod-a", "on", "--reason", "black friday")
		if code != 0 {
			t.Fatalf("exit %d, stderr %q", code, stderr)
		}
		reqs := api.requests()
		if len(reqs) != 1 || reqs[0].Method != "PUT" || reqs[0].Path != "/admin/pods/pod-a/throttle" ||
			!reflect.DeepEqual(reqs[0].Body, map[string]any{"throttled": true, "reason": "black friday"}) {
			t.Fatalf("requests %+v, want one PUT /admin/pods/pod-a/throttle turning it on", reqs)
		}
		if want := "pod-a: background work throttled: manual: black friday since 10:00:00"; !strings.Contains(stdout, want) {
			t.Fatalf("stdout %q, want %q", stdout, want)
		}
	})
	t.Run("Off", func(t *testing.T) {
		api := newFakeAPI(t, 200, podAnswer)
		code, stdout, _ := run(t, envFor(api.URL), "throttle", "pod-a", "off", "--reason", "sale over")
		if code != 0 || !strings.Contains(stdout, "pod-a: background work runs (not throttled)") {
			t.Fatalf("exit %d, stdout %q", code, stdout)
		}
		if b := api.requests()[0].Body; !reflect.DeepEqual(b, map[string]any{"throttled": false, "reason": "sale over"}) {
			t.Fatalf("body %v", b)
		}
	})
	t.Run("PodsShowsIt", func(t *testing.T) {
		api := newFakeAPI(t, 200, throttledAnswer)
		_, stdout, _ := run(t, envFor(api.URL), "pods", "pod-a")
		if !strings.Contains(stdout, "pod-a: background work throttled: manual: black friday") {
			t.Fatalf("stdout %q, want the throttle", stdout)
		}
	})
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"NoState", []string{"throttle", "pod-a", "--reason", "r"}, "throttle takes POD and on or off"},
		{"BadState", []string{"throttle", "pod-a", "maybe", "--reason", "r"}, `throttle takes on or off, got "maybe"`},
		{"NoReason", []string{"throttle", "pod-a", "on"}, "--reason is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := newFakeAPI(t, 200, podAnswer)
			code, _, stderr := run(t, envFor(api.URL), tc.args...)
			if code != 2 || !strings.Contains(stderr, tc.wantErr) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", code, stderr, tc.wantErr)
			}
			if n := len(api.requests()); n != 0 {
				t.Fatalf("%d requests for a usage error, want none", n)
			}
		})
	}
}
