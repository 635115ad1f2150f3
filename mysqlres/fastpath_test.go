package mysqlres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/mysqlres"
)

// counterValue sums the series of the counter or histogram count name.
func counterValue(tb testing.TB, g prometheus.Gatherer, name, tag string) float64 {
	tb.Helper()
	mfs, err := g.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := tag == ""
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "conn_tag" && lp.GetValue() == tag {
					match = true
				}
			}
			if !match {
				continue
			}
			if h := m.GetHistogram(); h != nil {
				sum += float64(h.GetSampleCount())
			} else {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

func TestReserveFastPath(t *testing.T) {
	ctx := context.Background()
	t.Run("RandomStartWrapsAroundWithoutSlowPath", func(t *testing.T) {
		// Once a refill has told the store its pool's id range, every scan
		// starts at a random id; a start above every free unit must wrap
		// around to the units below it, never fall to the slow path while
		// the pool holds units.
		reg := prometheus.NewRegistry()
		const pool, stock = 40, 140
		s := MustOpenStore(t, func(s *mysqlres.Store) { s.PoolCap = pool; s.Registerer = reg })
		mustSetOnHand(t, s, key(100, 1), stock)
		// Past the low-water mark (at most 3/4 of the pool): the replenisher refills
		// the pool from the unpooled units and learns its id range.
		const first = pool/2 + 1
		if _, err := s.Reserve(ctx, reserve1("c-0", 100, first, 1)); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for counterValue(t, reg, "tandem_mysql_conn_hold_seconds", "replenish") == 0 {
			if time.Now().After(deadline) {
				t.Fatal("the replenisher never ran after the pool fell below its low-water mark")
			}
			time.Sleep(10 * time.Millisecond)
		}
		// pool-1 single units, one at a time, from a pool of pool units: a
		// free unit is always left, so none may take the slow path, even
		// when its random start lies above every free unit.
		for i := 1; i < pool; i++ {
			if _, err := s.Reserve(ctx, reserve1(fmt.Sprintf("c-%d", i), 100, 1, 1)); err != nil {
				t.Fatalf("reserve %d: %v", i, err)
			}
		}
		if got := counterValue(t, reg, "tandem_mysql_reserve_slow_total", ""); got != 0 {
			t.Fatalf("got %v reserves on the slow path, want 0 (the pool always held a free unit)", got)
		}
		want := int64(first + pool - 1)
		if c := mustCounters(t, s, key(100, 1)); c.Reserved != want || c.Available != stock-want {
			t.Fatalf("got %+v, want reserved %d available %d", c, want, stock-want)
		}
	})
	t.Run("RetryAfterSoldOutReplays", func(t *testing.T) {
		// Reserves no longer read the token first: a retry of an active
		// hold whose item has since sold out must still be answered with
		// the hold, not insufficient_inventory.
		s := MustOpenStore(t)
		mustSetOnHand(t, s, key(100, 1), 2)
		first, err := s.Reserve(ctx, reserve1("a", 100, 2, 1))
		if err != nil {
			t.Fatal(err)
		}
		retry, err := s.Reserve(ctx, reserve1("a", 100, 2, 1))
		if err != nil || !retry.Replayed || !retry.ExpiresAt.Equal(first.ExpiresAt) {
			t.Fatalf("got %+v, %v, want the hold replayed", retry, err)
		}
		_, err = s.Reserve(ctx, reserve1("a", 100, 1, 1))
		wantCode(t, err, tandem.ECONFLICT)
	})
	t.Run("MultiLineCartOneBatch", func(t *testing.T) {
		s := MustOpenStore(t)
		mustSetOnHand(t, s, key(100, 1), 5)
		mustSetOnHand(t, s, key(200, 2), 5)
		req := tandem.ReserveRequest{CartToken: "m", ShopID: 1, Lines: []tandem.LineRequest{
			{ItemID: 100, Quantity: 3, GroupIDs: []int64{1}},
			{ItemID: 200, Quantity: 2, GroupIDs: []int64{1, 2}},
		}}
		res, err := s.Reserve(ctx, req)
		if err != nil || len(res.Lines) != 2 || res.Lines[1].GroupID != 2 {
			t.Fatalf("got %+v, %v, want both lines held, item 200 from group 2", res, err)
		}
		if c := mustCounters(t, s, key(100, 1)); c.Reserved != 3 {
			t.Fatalf("item 100 got reserved %d, want 3", c.Reserved)
		}
		if c := mustCounters(t, s, key(200, 2)); c.Reserved != 2 {
			t.Fatalf("item 200 got reserved %d, want 2", c.Reserved)
		}
	})
}
