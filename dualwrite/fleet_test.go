package dualwrite_test

import (
	"context"
	"errors"
	"testing"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/dualwrite"
)

// The fleet runs a named pod's backfill, audit and resync for the rollout
// controller: an unknown pod is EUNKNOWNPOD, BeforeBackfill runs first and
// can refuse, and the progress is the pod's last backfill.
func TestFleet_PodWork(t *testing.T) {
	t.Run("ErrUnknownPod", func(t *testing.T) {
		f := &dualwrite.Fleet{}
		if err := f.Backfill(ctx, "nope"); tandem.ErrorCode(err) != tandem.EUNKNOWNPOD {
			t.Errorf("backfill: got %v, want EUNKNOWNPOD", err)
		}
		if _, err := f.Audit(ctx, "nope"); tandem.ErrorCode(err) != tandem.EUNKNOWNPOD {
			t.Errorf("audit: got %v, want EUNKNOWNPOD", err)
		}
		if _, err := f.Resync(ctx, "nope"); tandem.ErrorCode(err) != tandem.EUNKNOWNPOD {
			t.Errorf("resync: got %v, want EUNKNOWNPOD", err)
		}
		if pr := f.BackfillProgress("nope"); pr != nil {
			t.Errorf("progress: got %+v, want nil", pr)
		}
	})
	p := mustOpenPod(t, tandem.ModeRedis)
	k := tandem.Key{ShopID: 1, ItemID: 1, GroupID: 1}
	if _, err := p.SetOnHand(ctx, k, 5); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Reserve(ctx, cart("c1", 1, one(1, 2, 1))); err != nil {
		t.Fatal(err)
	}
	t.Run("BeforeBackfillRefuses", func(t *testing.T) {
		refused := errors.New("held by the test")
		var asked string
		f := &dualwrite.Fleet{Routers: []*dualwrite.Router{p.Router}, BeforeBackfill: func(ctx context.Context, pod string) error {
			asked = pod
			return refused
		}}
		if err := f.Backfill(ctx, p.Pod); !errors.Is(err, refused) {
			t.Fatalf("got %v, want the hook's error", err)
		}
		if asked != p.Pod {
			t.Errorf("hook asked for %q, want %q", asked, p.Pod)
		}
		if pr := f.BackfillProgress(p.Pod); pr != nil {
			t.Errorf("progress: got %+v, want nil (no copy started)", pr)
		}
	})
	t.Run("BackfillAuditResync", func(t *testing.T) {
		f := &dualwrite.Fleet{Routers: []*dualwrite.Router{p.Router}}
		if err := f.Backfill(ctx, p.Pod); err != nil {
			t.Fatal(err)
		}
		if pr := f.BackfillProgress(p.Pod); pr == nil || pr.Step != "done" || pr.Copied != 1 || pr.Total != 1 {
			t.Errorf("progress: got %+v, want done with 1 of 1 copied", pr)
		}
		p.modes.set(tandem.ModeShadow)
		a, err := f.Audit(ctx, p.Pod)
		if err != nil {
			t.Fatal(err)
		}
		if !a.Clean {
			t.Errorf("audit after the backfill: got drift %+v, want clean", a.Drifted)
		}
		p.modes.set(tandem.ModeMySQL)
		if _, err := f.Resync(ctx, p.Pod); err != nil {
			t.Fatal(err)
		}
		p.mustConverge(t)
	})
}

// reportsAdmin answers Report with a report per pod it lists.
type reportsAdmin struct {
	tandem.AdminService
	pods []string
	err  error
}

func (a reportsAdmin) Report(context.Context) ([]tandem.Report, error) {
	var reps []tandem.Report
	for _, p := range a.pods {
		reps = append(reps, tandem.Report{Pod: p})
	}
	return reps, a.err
}

// The fleet's reports add each routed pod's convergence on this instance
// to the admin's reports, and leave alone the pods it does not route.
func TestFleet_Reports(t *testing.T) {
	p := mustOpenPod(t, tandem.ModeShadow)
	f := &dualwrite.Fleet{Routers: []*dualwrite.Router{p.Router}}
	failed := errors.New("part of the reports")
	reps, err := f.Reports(reportsAdmin{pods: []string{p.Pod, "elsewhere"}, err: failed}).Report(ctx)
	if !errors.Is(err, failed) {
		t.Errorf("error: got %v, want the admin's", err)
	}
	if len(reps) != 2 {
		t.Fatalf("got %d reports, want 2", len(reps))
	}
	if c := reps[0].Convergence; c == nil || c.DirtyCarts != 0 || c.Results == nil {
		t.Errorf("%s: got convergence %+v, want the router's (no dirty cart)", p.Pod, c)
	}
	if c := reps[1].Convergence; c != nil {
		t.Errorf("a pod the fleet does not route: got convergence %+v, want none", c)
	}
}
