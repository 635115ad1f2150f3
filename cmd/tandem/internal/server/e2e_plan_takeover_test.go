package server_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tandemhq/tandem/cmd/tandem/internal/server"
	"github.com/tandemhq/tandem/internal/testenv"
)

// TestE2EPlanTakeover runs two instances on one control plane: the plan's
// driver stops mid-plan without a word (its lease is left to run out) and
// the other instance takes the lease and finishes the plan.
func TestE2EPlanTakeover(t *testing.T) {
	testenv.RequireIntegration(t)
	cfg, _ := MustConfig(t)
	latencyBlindGates(&cfg)
	fast := func(m *server.Main) { m.PlanInterval, m.PlanLease = 50*time.Millisecond, time.Second }
	ins := []*Instance{MustRunMain(t, cfg, fast), MustRunMain(t, cfg, fast)}
	shops := []int64{shopA, shopB}
	const stock = 40
	for _, s := range shops {
		ins[0].Checkout.must(http.MethodPut, inventoryPath(s, 100, 1), obj{"on_hand": stock}, http.StatusOK)
	}
	// Buyers through both instances while they run: reserve one unit,
	// claim every other cart.
	claimed := map[int64]int64{}
	n := 0
	buy := func(in *Instance) {
		for _, s := range shops {
			n++
			token := fmt.Sprintf("t-%d", n)
			if st, _ := in.Checkout.call(http.MethodPost, "/v1/reservations", cart(token, s, line(100, 1, 1))); st == http.StatusCreated && n%2 == 0 {
				if st, _ := in.Checkout.call(http.MethodPost, resPath(token, s, "/claim"), nil); st == http.StatusOK {
					claimed[s]++
				}
			}
		}
	}
	ins[0].Admin.must(http.MethodPost, "/admin/plan/start", obj{"reason": "takeover", "shadow_soak": "1s", "mysql_soak": "1s"}, http.StatusOK)

	var driver string
	eventually(t, "a driver", func() bool {
		buy(ins[0])
		buy(ins[1])
		driver, _ = ins[0].Admin.must(http.MethodGet, "/admin/plan", nil, http.StatusOK)["driver"].(string)
		return driver != ""
	})
	dead, alive := ins[0], ins[1]
	if alive.Main.InstanceID == driver {
		dead, alive = alive, dead
	}
	if dead.Main.InstanceID != driver {
		t.Fatalf("got driver %q, want one of the two instances", driver)
	}
	dead.Main.Close()
	var last obj
	defer func() {
		if t.Failed() {
			t.Logf("last plan: %v", last)
			t.Logf("divergences: %v", alive.Admin.must(http.MethodGet, "/admin/divergences?limit=20", nil, http.StatusOK)["divergences"])
		}
	}()
	poll(t, "the other instance finishing the plan", 50*time.Millisecond, func() bool {
		buy(alive)
		p := alive.Admin.must(http.MethodGet, "/admin/plan", nil, http.StatusOK)
		last = p
		if p["phase"] == "aborted" {
			t.Fatalf("the plan aborted: %v", p["waiting"])
		}
		return p["phase"] == "done"
	})
	for _, p := range cfg.Pods {
		if st := podStatus(alive.Admin, p.Name); st["mode"] != "mysql" {
			t.Errorf("%s: got mode %v, want mysql", p.Name, st["mode"])
		}
	}
	if !auditLogHasActor(alive.Admin, "plan_done", "", "plan", "done") {
		t.Error("no plan_done by plan in the audit log")
	}
	for _, s := range shops {
		mustStoresAgree(t, alive.Checkout, s, 100, stock-claimed[s])
	}
}

// TestE2EPlanKillSwitchAborts: a kill switch on a pod the plan promoted
// stops the plan, which says why.
func TestE2EPlanKillSwitchAborts(t *testing.T) {
	testenv.RequireIntegration(t)
	cfg, _ := MustConfig(t)
	latencyBlindGates(&cfg)
	in := MustRunMain(t, cfg, func(m *server.Main) { m.PlanInterval = 50 * time.Millisecond })
	podA := cfg.Pods[0].Name
	in.Admin.must(http.MethodPost, "/admin/plan/start", obj{"reason": "kill drill", "shadow_soak": "0s", "mysql_soak": "1h"}, http.StatusOK)
	eventually(t, podA+" soaking in mysql", func() bool {
		return podStatus(in.Admin, podA)["mode"] == "mysql"
	})
	in.Admin.must(http.MethodPost, "/admin/killswitch", obj{"reason": "drill", "pods": []string{podA}}, http.StatusOK)
	var p obj
	eventually(t, "the plan aborted", func() bool {
		p = in.Admin.must(http.MethodGet, "/admin/plan", nil, http.StatusOK)
		return p["phase"] == "aborted"
	})
	if w, _ := p["waiting"].(string); !strings.Contains(w, "kill switch engaged on "+podA) {
		t.Errorf("got waiting %q, want the kill switch on %s named", w, podA)
	}
}
