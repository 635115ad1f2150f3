package server_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/tandemhq/tandem/cmd/tandem/internal/server"
	"github.com/tandemhq/tandem/internal/testenv"
	"github.com/tandemhq/tandem/rollout"
)

// TestE2EPlanRehearsal: a plan with the rehearsal gate keeps a pod in
// shadow while it has no capture, then rehearses the capture an operator
// takes on a real scratch database and promotes the pod once it held.
func TestE2EPlanRehearsal(t *testing.T) {
	testenv.RequireIntegration(t)
	cfg, _ := MustConfig(t)
	// The shadow's latency on a shared test machine is no subject here:
	// only the rehearsal judges MySQL.
	latencyBlindGates(&cfg)
	cfg.Rollout.Plan.Rehearsal.Server = testenv.RootDSN()
	core, logs := observer.New(zapcore.InfoLevel)
	in := MustRunMain(t, cfg, func(m *server.Main) { m.PlanInterval, m.Logger = 50*time.Millisecond, zap.New(core) })
	adm, api := in.Admin, in.Checkout
	podA := cfg.Pods[0].Name

	p := adm.must(http.MethodPost, "/admin/plan/start",
		obj{"reason": "e2e rehearsal", "shadow_soak": "0s", "mysql_soak": "1h", "rehearsal": obj{"speed": 2, "p99_max": "5s"}}, http.StatusOK)
	if s, _ := p["settings"].(obj); fmt.Sprint(s["rehearsal"]) != fmt.Sprint(obj{"speed": 2.0, "p99_max": "5s"}) {
		t.Fatalf("got settings %v, want the rehearsal at 2x under 5s", s)
	}
	gate := func() obj {
		p = adm.must(http.MethodGet, "/admin/plan", nil, http.StatusOK)
		for _, pp := range asSlice(p["pods"]) {
			if pod := pp.(obj); pod["pod"] == podA {
				for _, ch := range asSlice(pod["gates"].(obj)["checks"]) {
					if ch.(obj)["gate"] == rollout.GateRehearsal {
						return ch.(obj)
					}
				}
			}
		}
		return nil
	}
	eventually(t, podA+" waiting for a capture", func() bool {
		ch := gate()
		w, _ := p["waiting"].(string)
		return ch != nil && ch["state"] == "inconclusive" && strings.Contains(w, "no capture of "+podA)
	})
	if ch := gate(); num(ch["threshold"]) != 5000 || ch["passing"] != false {
		t.Fatalf("got %v, want the rehearsal gate not passing with threshold 5000 ms", ch)
	}
	if st := podStatus(adm, podA); st["mode"] != "shadow" {
		t.Fatalf("got %s in %v without a rehearsal, want shadow", podA, st["mode"])
	}

	// A flash sale: 8 carts for 5 units, captured.
	api.must(http.MethodPut, inventoryPath(shopA, 700, 1), obj{"on_hand": 5}, http.StatusOK)
	adm.must(http.MethodPost, "/admin/pods/"+podA+"/capture", obj{"reason": "e2e rehearsal", "duration": "1h", "max_ops": 8}, http.StatusOK)
	for i := range 8 {
		api.call(http.MethodPost, "/v1/reservations", cart(fmt.Sprintf("e2e-rh-%d", i), shopA, line(700, 1, 1)))
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("PLAN: %v", adm.must(http.MethodGet, "/admin/plan", nil, http.StatusOK))
			for _, e := range logs.All() {
				t.Logf("log: %s %v", e.Message, e.ContextMap())
			}
		}
	})
	eventually(t, podA+" promoted once its rehearsal held", func() bool {
		return podStatus(adm, podA)["mode"] == "mysql"
	})
	if !auditLogHasActor(adm, "set_mode", podA, "plan", "mysql") {
		t.Errorf("the audit log lacks the plan's promotion of %s", podA)
	}
	ended := logs.FilterMessage("rehearsal ended").All()
	if len(ended) != 1 {
		t.Fatalf("got %d rehearsals, want 1", len(ended))
	}
	f := ended[0].ContextMap()
	if f["pod"] != podA || f["ops"] != int64(8) || f["errors"] != int64(0) || f["violations"] != int64(0) ||
		f["granted_then_refused"] != f["refused_then_granted"] {
		t.Fatalf("got rehearsal %v, want the 8 captured ops of %s held: no error, no violation, no diff", f, podA)
	}
}
