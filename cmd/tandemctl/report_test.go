package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tandemhq/tandem"
)

// TestPrintReportContention: the report shows explained contention apart
// from the divergences, with its share, and n/a without comparisons.
func TestPrintReportContention(t *testing.T) {
	var b bytes.Buffer
	printReport(&b, []tandem.Report{
		{Pod: "pod-a", Mode: tandem.ModeShadow, Window: "15m", Comparisons: 200, Matches: 200, Contention: 5, ContentionRate: 0.025},
		{Pod: "pod-b", Mode: tandem.ModeRedis, Window: "15m"},
	})
	out := b.String()
	if !strings.Contains(out, "CONTENTION") {
		t.Fatalf("got report without a CONTENTION column:\n%s", out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.Contains(lines[1], "5 (2.500%)") || !strings.Contains(lines[2], "n/a") {
		t.Errorf("got report\n%s\nwant pod-a's contention as 5 (2.500%%) and pod-b's as n/a", out)
	}
}

// TestPrintDivergencesDetail: a state_drift row names its item, group, the
// ledger's figure and each store's, with the cause and the fix; another
// row shows the shadow's message.
func TestPrintDivergencesDetail(t *testing.T) {
	avail, zero := int64(10), int64(0)
	held := int64(2)
	var b bytes.Buffer
	printDivergences(&b, explain(
		tandem.Divergence{ID: 2, Pod: "pod-b", Op: tandem.OpReserve, Kind: tandem.KindStateDrift, ShopID: 1, SourceOfTruth: "ledger",
			Position: &tandem.Drift{ShopID: 1, ItemID: 100, GroupID: 3, LedgerOnHand: 10, RedisAvailable: &zero, RedisHeld: &held,
				MySQLAvailable: &avail, MySQLHeld: &held, Cause: "redis's counter says 0 available", Fixed: "redis recounted from the ledger"}},
		tandem.Divergence{ID: 1, Pod: "pod-b", Op: tandem.OpReserve, Kind: tandem.KindOutcomeMismatch, ShopID: 1, CartToken: "c-1", SourceOfTruth: "mysql",
			Shadow: tandem.Outcome{Store: "redis", Status: tandem.EINSUFFICIENT, Message: "not contention: item 100 group 3 drifted"}},
	))
	out := b.String()
	for _, want := range []string{"DETAIL", "item 100 group 3: ledger on_hand 10, redis available=0 held=2, mysql available=10 held=2",
		"redis's counter says 0 available", "fixed: redis recounted from the ledger", "not contention: item 100 group 3 drifted"} {
		if !strings.Contains(out, want) {
			t.Errorf("got\n%s\nwant it to contain %q", out, want)
		}
	}
}

func explain(ds ...tandem.Divergence) []tandem.ExplainedDivergence {
	out := make([]tandem.ExplainedDivergence, len(ds))
	for i, d := range ds {
		out[i] = tandem.Explain(d)
	}
	return out
}

// TestTransitionProgressYielding: a gentle copy says it yields to buyers,
// beside its rate.
func TestTransitionProgressYielding(t *testing.T) {
	tr := tandem.Transition{To: tandem.ModeShadow, Phase: "backfill", Step: "copy", Copied: 1000, Total: 4000,
		HoldsPerSec: 500, ETASeconds: 6, YieldingToBuyers: true}
	got := transitionProgress(tr)
	for _, want := range []string{"1000 of 4000 holds copied (25%)", "500 holds/s, about 6s left", "yielding to buyers"} {
		if !strings.Contains(got, want) {
			t.Errorf("got %q, want it to say %q", got, want)
		}
	}
	tr.YieldingToBuyers = false
	if got := transitionProgress(tr); strings.Contains(got, "yielding") {
		t.Errorf("got %q for a copy at full speed, want no yielding", got)
	}
}
