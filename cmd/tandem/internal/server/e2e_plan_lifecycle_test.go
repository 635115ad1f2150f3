package server_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/tandemhq/tandem/cmd/tandem/internal/server"
	"github.com/tandemhq/tandem/internal/testenv"
)

// TestE2EPlanLifecycle runs the persisted plan over three pods of
// different sizes with short soaks while buyers reserve and claim: every
// pod goes from where it is to mysql, smallest first, the audit log has
// every step by the plan, and at the end every position's on_hand is the
// stock minus what was claimed and both stores agree.
func TestE2EPlanLifecycle(t *testing.T) {
	testenv.RequireIntegration(t)
	cfg, _ := MustConfig(t)
	third := cfg.Pods[1]
	third.Name = testenv.RandomName("pr-")
	third.Shops = []string{"20-49"}
	third.MySQLDSN = testenv.MustCreateDatabase(t)
	third.RedisPrefix = cfg.Pods[1].RedisPrefix + "third:"
	cfg.Pods = append(cfg.Pods, third)
	latencyBlindGates(&cfg)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	in := MustRunMain(t, cfg, func(m *server.Main) { m.PlanInterval = 50 * time.Millisecond })
	api, admin := in.Checkout, in.Admin
	shops := []int64{shopA, shopB, 20}
	const stock = 50
	for _, s := range shops {
		api.must(http.MethodPut, inventoryPath(s, 100, 1), obj{"on_hand": stock}, http.StatusOK)
	}

	got := admin.must(http.MethodPost, "/admin/plan/start", obj{"reason": "e2e lifecycle", "shadow_soak": "300ms", "mysql_soak": "300ms"}, http.StatusOK)
	if got["phase"] != "running" {
		t.Fatalf("got %v, want running", got)
	}
	claimed := map[int64]int64{}
	n := 0
	order := []string{}
	var last obj
	defer func() {
		if t.Failed() {
			t.Logf("last plan: %v", last)
		}
	}()
	poll(t, "the plan done", 20*time.Millisecond, func() bool {
		// A buyer per turn on every pod: reserve 1, claim every other.
		for _, s := range shops {
			n++
			token := fmt.Sprintf("c-%d", n)
			if st, _ := api.call(http.MethodPost, "/v1/reservations", cart(token, s, line(100, 1, 1))); st == http.StatusCreated && n%2 == 0 {
				if st, _ := api.call(http.MethodPost, resPath(token, s, "/claim"), nil); st == http.StatusOK {
					claimed[s]++
				}
			}
		}
		p := admin.must(http.MethodGet, "/admin/plan", nil, http.StatusOK)
		last = p
		for _, pp := range asSlice(p["pods"]) {
			pp := pp.(obj)
			if pp["step"] != "pending" && !contains(order, pp["pod"].(string)) {
				order = append(order, pp["pod"].(string))
			}
		}
		if p["phase"] == "aborted" {
			t.Fatalf("the plan aborted: %v", p["waiting"])
		}
		return p["phase"] == "done"
	})
	want := []string{cfg.Pods[0].Name, cfg.Pods[1].Name, third.Name}
	if fmt.Sprint(order) != fmt.Sprint(want) {
		t.Errorf("got pods entering %v, want %v (smallest first)", order, want)
	}
	for _, p := range want {
		if st := podStatus(admin, p); st["mode"] != "mysql" {
			t.Errorf("%s: got mode %v, want mysql", p, st["mode"])
		}
	}
	for _, p := range []string{cfg.Pods[1].Name, third.Name} {
		if !auditLogHasActor(admin, "set_mode", p, "plan", "shadow") || !auditLogHasActor(admin, "set_mode", p, "plan", "mysql") {
			t.Errorf("%s: the audit log lacks the plan's steps to shadow and mysql", p)
		}
	}
	for _, s := range shops {
		mustStoresAgree(t, api, s, 100, stock-claimed[s])
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}

// auditLogHasActor reports whether the audit log holds an entry of the
// action on pod by actor whose after is after.
func auditLogHasActor(c *apiClient, action, pod, actor, after string) bool {
	c.tb.Helper()
	log := c.must(http.MethodGet, "/admin/audit-log?limit=1000", nil, http.StatusOK)
	for _, e := range asSlice(log["entries"]) {
		e := e.(obj)
		if e["action"] == action && e["pod"] == pod && e["actor"] == actor && e["after"] == after {
			return true
		}
	}
	return false
}

// latencyBlindGates turns off what the plan judges of this machine's
// latency: the p99 gates (budget, factor, slack), the MySQL error rate, the
// divergence rate (MySQL past shadow.timeout on a loaded machine is a
// shadow_timeout, an error and a divergence; with two instances a mode
// change reaches the other within about 250 ms, a documented window that
// can show as a divergence) and the automatic abort; and gates on any
// number of comparisons. A plan e2e about the plan's steps, not its
// verdicts, uses it and checks the stores at rest (mustStoresAgree);
// TestE2EPlanDefaultGates judges the verdicts.
func latencyBlindGates(cfg *server.Config) {
	cfg.Rollout.GateMinComparisons = 0
	cfg.Rollout.GateMaxP99Factor = 0
	cfg.Rollout.GateMySQLP99Max = 0
	cfg.Rollout.GateP99Slack = 0
	cfg.Rollout.GateMaxMySQLErrorRate = 0
	cfg.Rollout.GateMaxDivergenceRate = 1
	cfg.Rollout.AbortDivergenceRate = 0
}

// mustStoresAgree checks item's position in shop (group 1): on_hand is
// want, and Redis and MySQL agree at rest. A shadow call that timed out
// leaves its cart to the convergence worker and the sweep (every 5 s), so
// the stores are compared once they are at rest, not at the first read.
func mustStoresAgree(t *testing.T, api *apiClient, shop, item, want int64) {
	t.Helper()
	var inv obj
	agree := func() bool {
		inv = api.must(http.MethodGet, inventoryPath(shop, item, 1), nil, http.StatusOK)
		stores, _ := inv["stores"].(obj)
		r, _ := stores["redis"].(obj)
		m, _ := stores["mysql"].(obj)
		return r != nil && m != nil && num(r["available"]) == num(m["available"]) && num(r["reserved"]) == num(m["reserved"])
	}
	deadline := time.Now().Add(30 * time.Second)
	for !agree() {
		if time.Now().After(deadline) {
			t.Errorf("shop %d: got stores %v, want Redis and MySQL to agree at rest", shop, inv["stores"])
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if num(inv["on_hand"]) != want {
		t.Errorf("shop %d: got on_hand %v, want %d", shop, inv["on_hand"], want)
	}
}
