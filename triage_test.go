package tandem_test

import (
	"testing"
	"time"

	"github.com/tandemhq/tandem"
)

func TestExplanation(t *testing.T) {
	reserved := tandem.Outcome{Store: tandem.StoreRedis, Status: tandem.StatusOf(tandem.StatusReserved),
		Lines: []tandem.Line{{ItemID: 7, Quantity: 2, GroupID: 1}}}
	zero, fifteen := int64(0), int64(15)
	drift := tandem.Drift{ShopID: 1, ItemID: 7, GroupID: 1, LedgerOnHand: 15, RedisAvailable: &zero, MySQLAvailable: &fifteen}
	for _, tc := range []struct {
		name string
		d    tandem.Divergence
		want string
	}{
		{"OutcomeMismatch", tandem.Divergence{Kind: tandem.KindOutcomeMismatch,
			Primary: tandem.Outcome{Store: tandem.StoreRedis, Status: tandem.EINSUFFICIENT, Message: "item 7: 0 available"},
			Shadow:  tandem.Outcome{Store: tandem.StoreMySQL, Status: tandem.StatusOf(tandem.StatusReserved), Lines: []tandem.Line{{ItemID: 7, Quantity: 1, GroupID: 2}}}},
			"redis refused (insufficient_inventory): item 7: 0 available, but mysql reserved 1 x item 7 group 2"},
		{"LocationMismatch", tandem.Divergence{Kind: tandem.KindLocationMismatch, Primary: reserved,
			Shadow: tandem.Outcome{Store: tandem.StoreMySQL, Status: tandem.StatusOf(tandem.StatusReserved), Lines: []tandem.Line{{ItemID: 7, Quantity: 2, GroupID: 3}}}},
			"both reserved, from different groups: redis took 2 x item 7 group 1, mysql took 2 x item 7 group 3"},
		{"ShadowError", tandem.Divergence{Kind: tandem.KindShadowError, Primary: reserved,
			Shadow: tandem.Outcome{Store: tandem.StoreMySQL, Status: tandem.EUNAVAILABLE, Message: "connection refused"}},
			"mysql failed (unavailable): connection refused; redis reserved 2 x item 7 group 1"},
		{"ShadowTimeout", tandem.Divergence{Kind: tandem.KindShadowTimeout, Primary: reserved,
			Shadow: tandem.Outcome{Store: tandem.StoreMySQL, Status: tandem.OutcomeTimeout}},
			"mysql gave no answer within shadow.timeout (its work may have landed); redis reserved 2 x item 7 group 1"},
		{"ShadowDropped", tandem.Divergence{Kind: tandem.KindShadowDropped, Primary: reserved,
			Shadow: tandem.Outcome{Store: tandem.StoreMySQL, Status: tandem.OutcomeDropped}},
			"mysql did not run it: the shadow's in-flight cap was reached (the cart is converged later); redis reserved 2 x item 7 group 1"},
		{"StateDrift", tandem.Divergence{Kind: tandem.KindStateDrift, Position: &drift},
			"state drift: item 7 group 1: ledger on_hand 15, redis available=0, mysql available=15"},
		{"SweepDrift", tandem.Divergence{Kind: tandem.KindStateDrift,
			Primary: tandem.Outcome{Store: tandem.StoreRedis, Status: tandem.OutcomeNoHold, Message: "cart c-1: redis holds nothing, mysql 2 units"}},
			"state drift: cart c-1: redis holds nothing, mysql 2 units"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tandem.Explanation(tc.d); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestGroupDivergences(t *testing.T) {
	at := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	d := func(id int64, sec int, pod string, item int64) tandem.Divergence {
		return tandem.Divergence{ID: id, At: at.Add(time.Duration(sec) * time.Second), Pod: pod, Op: tandem.OpReserve,
			Kind: tandem.KindShadowTimeout, ShopID: 1,
			Primary: tandem.Outcome{Store: tandem.StoreRedis, Status: "reserved", Lines: []tandem.Line{{ItemID: item, Quantity: 1, GroupID: 1}}}}
	}
	gs := tandem.GroupDivergences([]tandem.Divergence{d(4, 3, "a", 7), d(3, 2, "b", 7), d(2, 9, "a", 7), d(1, 0, "a", 8)})
	if len(gs) != 3 {
		t.Fatalf("got %d groups, want 3 (pod a item 7, pod b item 7, pod a item 8)", len(gs))
	}
	g := gs[0]
	if g.Pod != "a" || g.Position.ItemID != 7 || g.Count != 2 || !g.FirstSeen.Equal(at.Add(3*time.Second)) || !g.LastSeen.Equal(at.Add(9*time.Second)) || g.Example.ID != 2 {
		t.Errorf("got first group %+v, want pod a item 7: 2, seen 3s..9s, example the latest (2)", g)
	}
	if gs[1].Pod != "b" || gs[2].Position.ItemID != 8 {
		t.Errorf("got %+v then %+v, want the singles by last seen: pod b (2s) then item 8 (0s)", gs[1], gs[2])
	}
	if got := tandem.GroupDivergences(nil); got == nil || len(got) != 0 {
		t.Errorf("got %v for none, want an empty list", got)
	}
}
