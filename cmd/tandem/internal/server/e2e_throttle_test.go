package server_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// TestE2EThrottle checks the manual throttle over HTTP on a real serve: on
// with its reason in POD.throttle, the convergence worker's rounds held
// (tandem_throttled_seconds_total by job and reason), the audit log, and
// the throttle still on after a restart until turned off; bad input
// changes nothing.
func TestE2EThrottle(t *testing.T) {
	cfg, _ := MustConfig(t)
	pod := cfg.Pods[0].Name
	in := MustRunMain(t, cfg)
	path := "/admin/pods/" + pod + "/throttle"

	in.Admin.mustErr(http.MethodPut, path, obj{"reason": "no state"}, 400, "invalid_request")
	in.Admin.mustErr(http.MethodPut, "/admin/pods/no-such-pod/throttle", obj{"throttled": true, "reason": "r"}, 404, "unknown_pod")
	if th, _ := in.Admin.must(http.MethodGet, "/admin/pods/"+pod, nil, 200)["throttle"].(obj); th != nil && th["throttled"] == true {
		t.Fatalf("throttle %v after a refused change, want not throttled", th)
	}

	st := in.Admin.must(http.MethodPut, path, obj{"throttled": true, "reason": "black friday"}, 200)
	th, _ := st["throttle"].(obj)
	if th["throttled"] != true || th["signal"] != "manual" || th["reason"] != "manual: black friday" {
		t.Fatalf("POD.throttle %v, want on by hand", th)
	}
	series := fmt.Sprintf(`tandem_throttled_seconds_total{job="converge",pod=%q,reason="manual"}`, pod)
	eventually(t, "the convergence worker held by the manual throttle", func() bool {
		_, body := in.Admin.getText("/metrics")
		return strings.Contains(body, series)
	})
	log := in.Admin.must(http.MethodGet, "/admin/audit-log?limit=10", nil, 200)
	entries, _ := log["entries"].([]any)
	found := false
	for _, e := range entries {
		if e, _ := e.(obj); e["action"] == "throttle" && e["pod"] == pod && e["after"] == "on" && e["reason"] == "black friday" {
			found = true
		}
	}
	if !found {
		t.Fatalf("audit log %v, want the throttle turned on", entries)
	}

	// A restart: the throttle is still on.
	in.Main.Close()
	in = MustRunMain(t, cfg)
	th, _ = in.Admin.must(http.MethodGet, "/admin/pods/"+pod, nil, 200)["throttle"].(obj)
	if th["throttled"] != true || th["reason"] != "manual: black friday" {
		t.Fatalf("POD.throttle after a restart: %v, want still on", th)
	}
	th, _ = in.Admin.must(http.MethodPut, path, obj{"throttled": false, "reason": "sale over"}, 200)["throttle"].(obj)
	if th["throttled"] == true {
		t.Fatalf("POD.throttle after turning it off: %v", th)
	}
}
