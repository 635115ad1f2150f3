package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/mysqlres"
	"github.com/tandemhq/tandem/redisres"
)

// PlanEntry is `tandem bench plan`: a pod of Shops shops holding Holds
// active holds in Redis, as a legacy pod has them, in an in-process `tandem
// serve` started in mode redis; the rollout plan is started through the
// admin API and the bench times how long the pod takes to reach its shadow
// soak (the copy into MySQL included), then audits the pod.
type PlanEntry struct {
	Holds, Shops int
	MySQLDSN     string
	Redis        Redis
	Start        StartFunc
	// Timeout bounds the wait for the shadow soak.
	Timeout time.Duration
}

// PlanEntryResult is one run of the plan bench.
type PlanEntryResult struct {
	Suite string `json:"suite"`
	Holds int    `json:"holds"`
	Shops int    `json:"shops"`
	// SoakSeconds is from POST /admin/plan/start to the pod's step
	// shadow_soak; ShadowSeconds to its mode shadow.
	SoakSeconds   float64 `json:"soak_seconds"`
	ShadowSeconds float64 `json:"shadow_seconds"`
	// HoldsPerSec is the copy's own rate as POD.transition last showed it.
	HoldsPerSec float64 `json:"holds_per_sec"`
	// Steps are the plan steps the pod went through, with when (seconds
	// from the start) the bench first saw each.
	Steps []PlanStepSeen `json:"steps"`
	// AuditSeconds and AuditClean are the pod's audit once in its soak.
	AuditSeconds float64  `json:"audit_seconds"`
	AuditClean   bool     `json:"audit_clean"`
	AuditChecked int      `json:"audit_checked"`
	Run          *RunInfo `json:"run,omitempty"`
}

// PlanStepSeen is a plan step and when the bench first saw it.
type PlanStepSeen struct {
	Step    string  `json:"step"`
	Seconds float64 `json:"seconds"`
	Waiting string  `json:"waiting,omitempty"`
}

// PrintPlanEntry prints the run, or its JSON.
func PrintPlanEntry(w io.Writer, run *RunInfo, r PlanEntryResult, asJSON bool) error {
	if asJSON {
		r.Run = run
		return json.NewEncoder(w).Encode(r)
	}
	fmt.Fprintf(w, "a pod of %d holds over %d shops, redis -> shadow through the plan: shadow after %.2fs, shadow soak after %.2fs (the copy at %.0f holds/s)\n",
		r.Holds, r.Shops, r.ShadowSeconds, r.SoakSeconds, r.HoldsPerSec)
	for _, s := range r.Steps {
		fmt.Fprintf(w, "  %6.2fs %s %s\n", s.Seconds, s.Step, s.Waiting)
	}
	verdict := "clean"
	if !r.AuditClean {
		verdict = "NOT clean"
	}
	_, err := fmt.Fprintf(w, "audit in the soak: %s, %d positions checked in %.2fs\n", verdict, r.AuditChecked, r.AuditSeconds)
	return err
}

// Run starts the server, writes the legacy holds, starts the plan and
// waits for the pod's shadow soak.
func (b *PlanEntry) Run(ctx context.Context, progress io.Writer) (PlanEntryResult, error) {
	res := PlanEntryResult{Suite: "plan", Holds: b.Holds, Shops: b.Shops}
	srv, err := newServers(ctx, b.Start, b.MySQLDSN, b.Redis, 1, tandem.ModeRedis)
	if err != nil {
		return res, err
	}
	defer srv.close()
	srv.spec.Shops = b.Shops
	// The holds are there before the server starts, as on a legacy pod:
	// written while it runs, its Redis would look to it as one that lost
	// its data (ledger positions without counters).
	if err := b.legacyHolds(ctx, srv.spec, progress); err != nil {
		return res, err
	}
	token := randomHex(16)
	m, err := srv.run(ctx, token, progress)
	if err != nil {
		return res, err
	}
	defer m.Close()
	c := newClient(&target{admin: m.AdminAddr(), adminToken: token, pod: srv.spec.Pod}, 1)
	defer c.close()
	fmt.Fprintf(progress, "bench plan: starting the rollout plan of pod %s\n", srv.spec.Pod)
	start := time.Now()
	if err := c.call(ctx, "POST", "/admin/plan/start", map[string]any{"reason": "tandem bench plan", "shadow_soak": "1h", "mysql_soak": "1h"}, nil); err != nil {
		return res, err
	}
	if err := b.awaitSoak(ctx, c, srv.spec.Pod, start, &res); err != nil {
		return res, err
	}
	var audit struct {
		Clean   bool `json:"clean"`
		Checked int  `json:"checked"`
	}
	astart := time.Now()
	if err := c.call(ctx, "POST", "/admin/pods/"+srv.spec.Pod+"/audit", map[string]any{"reason": "tandem bench plan"}, &audit); err != nil {
		return res, err
	}
	res.AuditSeconds, res.AuditClean, res.AuditChecked = time.Since(astart).Seconds(), audit.Clean, audit.Checked
	return res, nil
}

// awaitSoak polls the plan and the pod until the pod's step is
// shadow_soak, recording each step seen.
func (b *PlanEntry) awaitSoak(ctx context.Context, c *client, pod string, start time.Time, res *PlanEntryResult) error {
	deadline := start.Add(b.Timeout)
	for {
		var plan struct {
			Phase string `json:"phase"`
			Pods  []struct {
				Pod     string `json:"pod"`
				Mode    string `json:"mode"`
				Step    string `json:"step"`
				Waiting string `json:"waiting"`
			} `json:"pods"`
		}
		if err := c.call(ctx, "GET", "/admin/plan", nil, &plan); err != nil {
			return err
		}
		at := time.Since(start).Seconds()
		for _, p := range plan.Pods {
			if p.Pod != pod {
				continue
			}
			if n := len(res.Steps); n == 0 || res.Steps[n-1].Step != p.Step {
				res.Steps = append(res.Steps, PlanStepSeen{Step: p.Step, Seconds: at, Waiting: p.Waiting})
			}
			if p.Mode == string(tandem.ModeShadow) && res.ShadowSeconds == 0 {
				res.ShadowSeconds = at
			}
			if p.Step == string(tandem.StepShadowSoak) {
				res.SoakSeconds = at
				return nil
			}
		}
		if plan.Phase == string(tandem.PlanAborted) {
			return fmt.Errorf("bench plan: the plan aborted: %+v", plan)
		}
		var st struct {
			Transition *struct {
				HoldsPerSec float64 `json:"holds_per_sec"`
			} `json:"transition"`
		}
		if err := c.call(ctx, "GET", "/admin/pods/"+pod, nil, &st); err != nil {
			return err
		}
		if st.Transition != nil && st.Transition.HoldsPerSec > 0 {
			res.HoldsPerSec = st.Transition.HoldsPerSec
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench plan: pod %s not in its shadow soak after %s (steps seen: %+v)", pod, b.Timeout, res.Steps)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// legacyHolds writes the holds into the pod's Redis as a legacy pod has
// them, on the pod's ledger.
func (b *PlanEntry) legacyHolds(ctx context.Context, spec ServeSpec, progress io.Writer) error {
	fmt.Fprintf(progress, "bench plan: writing %d holds over %d shops into Redis\n", b.Holds, b.Shops)
	my := mysqlres.NewStore(spec.PodDSN)
	if err := my.Open(ctx); err != nil {
		return err
	}
	defer my.Close()
	if err := my.Migrate(ctx); err != nil {
		return err
	}
	rdb := spec.Redis.client()
	defer rdb.Close()
	rs := redisres.NewStore(rdb, my.Ledger())
	rs.Prefix = spec.PodPrefix
	if err := rs.Open(ctx); err != nil {
		return err
	}
	defer rs.Close()
	return writeLegacyHolds(ctx, rs, b.Holds, b.Shops, my.Ledger().SetOnHand)
}
