package server_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tandemhq/tandem/internal/testenv"
)

// TestE2EPlanDefaultGates is issue 21's item 3: a plan with the default
// gates (1000 comparisons, 3 passes in a row, MySQL's p99 within 50ms and
// within max(3x Redis's, Redis's + 25ms), the abort on) promotes a quiet
// pod under paced traffic on this machine, where MySQL's commit is several
// times Redis's in-memory answer.
//
// A pod is quiet only on a machine that runs it when it asks: with the CPU
// shared many times over (the whole suite on two cores), MySQL's p99 goes
// past the 50 ms budget and shadow calls past their 250 ms timeout, and
// the plan is right to hold the pod back. So the test measures how late
// this process's timers fire while it runs (the delay the machine adds to
// every answer, the pod's included): a pod the plan does not promote fails
// the test unless every gate that held it is one of those latency gates
// on a starved machine (timer lateness p99 at least starvedLateness); any
// other gate (too few comparisons, a drift audit, an abort) fails it on any
// machine, and on a machine that is not starved every gate does. The
// divergences other than timeouts are logged either way.
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
	late := startLateness(t)

	admin.must(http.MethodPost, "/admin/plan/start", obj{"reason": "e2e default gates", "shadow_soak": "3s", "mysql_soak": "3s"}, http.StatusOK)
	var last obj
	waited := ""
	// A pod held by latency gates alone on a starved machine for a minute
	// is judged then: its p99 over the 15m window does not come back soon.
	deadline := time.Now().Add(3 * time.Minute)
	var starvedSince time.Time
	for podStatus(admin, podA)["mode"] != "mysql" {
		last = admin.must(http.MethodGet, "/admin/plan", nil, http.StatusOK)
		if w, _ := last["waiting"].(string); w != waited {
			waited = w
			t.Logf("plan waiting: %s (timer lateness p99 so far %s)", w, late.p99())
		}
		if last["phase"] == "aborted" {
			t.Fatalf("pod %s: the plan aborted: %v", podA, last)
		}
		switch {
		case starved(blockingGates(last, podA), late.p99(), nil) == "":
			starvedSince = time.Time{}
		case starvedSince.IsZero():
			starvedSince = time.Now()
		}
		if time.Now().After(deadline) || !starvedSince.IsZero() && time.Since(starvedSince) > time.Minute {
			blocked := blockingGates(last, podA)
			report := podReport(admin, podA)
			divs, _ := report["divergences"].(obj)
			for kind, n := range divs {
				if kind != "shadow_timeout" && num(n) > 0 {
					t.Logf("%s divergences, the latest: %v", kind, admin.must(http.MethodGet,
						"/admin/divergences?limit=5&pod="+podA+"&kind="+kind, nil, http.StatusOK)["divergences"])
				}
			}
			if why := starved(blocked, late.p99(), report); why != "" {
				t.Logf("pod %s not promoted, rightly: %s; plan %v; report %v", podA, why, last, report)
				return
			}
			t.Fatalf("pod %s not promoted with the default gates, held by %v (timer lateness p99 %s): plan %v; report %v",
				podA, blocked, late.p99(), last, report)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("promoted; timer lateness p99 %s", late.p99())
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

// starvedLateness is the timer lateness p99 from which the machine, not
// the pod, explains a MySQL p99 over the 50 ms budget: on a quiet machine
// a timer of this -race process fires within a millisecond or two.
const starvedLateness = 10 * time.Millisecond

// latencyGates are the gates a starved machine fails on a healthy pod:
// MySQL's p99, and MySQL errors and divergences, which start as shadow
// calls past shadow.timeout (shadow_timeout) and go on as the later
// operations of those carts while their convergence times out too
// (outcome_mismatch "follows this cart's earlier difference").
var latencyGates = []string{"mysql_p99_factor", "mysql_error_rate", "max_divergence_rate"}

// starved says why the gates that held the pod back (blocked) are the
// machine's doing, or "" when they are not: each one a latency gate, and
// this process's timers late by at least starvedLateness at p99. A drift
// audit counts too when the pod's report (nil: not yet read) shows copies
// whose convergence failed: a copy that timed out, not yet converged,
// is drift to an audit that runs meanwhile.
func starved(blocked []string, lateness time.Duration, report obj) string {
	if len(blocked) == 0 || lateness < starvedLateness {
		return ""
	}
	conv, _ := report["convergence"].(obj)
	results, _ := conv["results"].(obj)
	for _, g := range blocked {
		if !slices.Contains(latencyGates, g) && (g != "audit_clean" || num(results["failed"]) == 0) {
			return ""
		}
	}
	return fmt.Sprintf("held by %s on a starved machine (timer lateness p99 %s, at least %s; convergences %v)",
		strings.Join(blocked, ", "), lateness, starvedLateness, results)
}

// blockingGates returns the gates of pod in the plan that are not passing.
func blockingGates(plan obj, pod string) []string {
	var out []string
	for _, pp := range asSlice(plan["pods"]) {
		if pp := pp.(obj); pp["pod"] == pod {
			g, _ := pp["gates"].(obj)
			for _, ch := range asSlice(g["checks"]) {
				if ch := ch.(obj); ch["state"] != "pass" {
					out = append(out, fmt.Sprint(ch["gate"]))
				}
			}
		}
	}
	return out
}

// podReport returns pod's entry of /admin/report.
func podReport(c *apiClient, pod string) obj {
	for _, r := range asSlice(c.must(http.MethodGet, "/admin/report", nil, http.StatusOK)["pods"]) {
		if r := r.(obj); r["pod"] == pod {
			return r
		}
	}
	return nil
}

// lateness records how late a 10 ms timer of this process fires, every
// 10 ms until the test ends.
type lateness struct {
	mu      sync.Mutex
	samples []time.Duration
}

func startLateness(t *testing.T) *lateness {
	l := &lateness{}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		const every = 10 * time.Millisecond
		for {
			start := time.Now()
			select {
			case <-stop:
				return
			case <-time.After(every):
			}
			l.mu.Lock()
			l.samples = append(l.samples, time.Since(start)-every)
			l.mu.Unlock()
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
	return l
}

// p99 returns the 99th percentile of the lateness so far.
func (l *lateness) p99() time.Duration {
	l.mu.Lock()
	s := slices.Clone(l.samples)
	l.mu.Unlock()
	if len(s) == 0 {
		return 0
	}
	slices.Sort(s)
	return s[len(s)*99/100].Round(100 * time.Microsecond)
}
