package main_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/tandemhq/tandem/internal/testenv"
)

// TestE2EPlanDefaultGates is issue 21's item 3: a plan with the default
// gates (1000 comparisons, 3 passes in a row, MySQL's p99 within 50ms and
// within max(3x Redis's, Redis's + 25ms), the abort on) promotes a quiet
// pod under paced traffic on this machine, where MySQL's commit is several
// times Redis's in-memory answer.
func TestE2EPlanDefaultGates(t *testing.T) {
	testenv.RequireIntegration(t)
	cfg, _ := MustConfig(t)
	in := MustRunMain(t, cfg) // the production plan interval (2 s) too
	api, admin := in.Checkout, in.Admin
	podA := cfg.Pods[0].Name
	for item := int64(100); item < 110; item++ {
		api.must(http.MethodPut, inventoryPath(shopA, item, 1), obj{"on_hand": 1000}, http.StatusOK)
	}

	// Paced traffic: a buyer reserves one of ten items and releases it
	// every 20 ms (100 comparisons a second).
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			token := fmt.Sprintf("g-%d", n)
			if st, _ := api.call(http.MethodPost, "/v1/reservations", cart(token, shopA, line(100+int64(n%10), 1, 1))); st == http.StatusCreated {
				api.call(http.MethodDelete, resPath(token, shopA, ""), nil)
			}
		}
	}()
	defer func() { close(stop); <-done }()

	admin.must(http.MethodPost, "/admin/plan/start", obj{"reason": "e2e default gates", "shadow_soak": "3s", "mysql_soak": "3s"}, http.StatusOK)
	var last obj
	waited := ""
	deadline := time.Now().Add(3 * time.Minute)
	for podStatus(admin, podA)["mode"] != "mysql" {
		last = admin.must(http.MethodGet, "/admin/plan", nil, http.StatusOK)
		if w, _ := last["waiting"].(string); w != waited {
			waited = w
			t.Logf("plan waiting: %s", w)
		}
		if last["phase"] == "aborted" || time.Now().After(deadline) {
			t.Fatalf("pod %s not promoted with the default gates: plan %v", podA, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !auditLogHasActor(admin, "set_mode", podA, "plan", "mysql") {
		t.Errorf("the audit log lacks the plan's shadow -> mysql of %s", podA)
	}
	for _, pp := range asSlice(last["pods"]) {
		pp := pp.(obj)
		if pp["pod"] != podA {
			continue
		}
		g := pp["gates"].(obj)
		if num(g["passes_required"]) != 3 {
			t.Errorf("got gates %v, want 3 passes required", g)
		}
		for _, ch := range asSlice(g["checks"]) {
			if ch := ch.(obj); ch["gate"] == "mysql_p99_factor" {
				t.Logf("p99 gate at the promotion: %v", ch)
				if ch["state"] == "fail" {
					t.Errorf("got the p99 gate %v, want it never failing on a quiet pod", ch)
				}
			}
		}
	}
	st := podStatus(admin, podA)
	if ab, _ := st["abort"].(obj); ab == nil || ab["armed"] != true || ab["would_trip"] != false || ab["window"] != "1m" {
		t.Errorf("got abort %v, want it armed on the promoted pod and not tripping", st["abort"])
	}
}
