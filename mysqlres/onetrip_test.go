package mysqlres_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/mysqlres"
)

// holdUnits locks n pool rows of k in a transaction of its own, as an
// in-flight reserve would, and returns a func that rolls it back.
func holdUnits(t *testing.T, s *mysqlres.Store, k tandem.Key, n int) func() {
	t.Helper()
	ctx := context.Background()
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := tx.QueryContext(ctx, "SELECT id FROM unit_pool WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = ? ORDER BY id LIMIT ? FOR UPDATE",
		k.ShopID, k.ItemID, k.GroupID, n)
	if err != nil {
		tx.Rollback()
		t.Fatal(err)
	}
	got := 0
	for rows.Next() {
		got++
	}
	rows.Close()
	if got != n {
		tx.Rollback()
		t.Fatalf("holder locked %d units, want %d", got, n)
	}
	var once sync.Once
	rollback := func() {
		once.Do(func() {
			if err := tx.Rollback(); err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(rollback)
	return rollback
}

// mustNotOversell checks invariant 1 at rest for k: held units never
// exceed on_hand and nothing is left unaccounted.
func mustNotOversell(t *testing.T, s *mysqlres.Store, k tandem.Key) tandem.Counters {
	t.Helper()
	c := mustCounters(t, s, k)
	if c.Reserved > c.OnHand || c.Available != c.OnHand-c.Reserved {
		t.Fatalf("%s got %+v, want reserved <= on_hand and available = on_hand - reserved", k, c)
	}
	return c
}

func TestReserveOneTrip(t *testing.T) {
	ctx := context.Background()
	t.Run("SingleGroupCartsTakeOneTrip", func(t *testing.T) {
		// One unit per line from full pools: a random start always finds a
		// free unit at or above it, so no cart may leave the one-trip batch.
		reg := prometheus.NewRegistry()
		s := MustOpenStore(t, func(s *mysqlres.Store) { s.Registerer = reg })
		mustSetOnHand(t, s, key(100, 1), 1000)
		mustSetOnHand(t, s, key(200, 1), 1000)
		for i := range 10 {
			req := tandem.ReserveRequest{CartToken: fmt.Sprintf("c-%d", i), ShopID: 1, Lines: []tandem.LineRequest{
				{ItemID: 100, Quantity: 1, GroupIDs: []int64{1}},
				{ItemID: 200, Quantity: 1, GroupIDs: []int64{1}},
			}}
			res, err := s.Reserve(ctx, req)
			if err != nil || len(res.Lines) != 2 || res.Lines[0].GroupID != 1 || res.Lines[1].GroupID != 1 {
				t.Fatalf("reserve %d: got %+v, %v, want both lines held in group 1", i, res, err)
			}
		}
		if got := counterValue(t, reg, "tandem_mysql_reserve_one_trip_short_total", ""); got != 0 {
			t.Fatalf("got %v carts off the one-trip batch, want 0", got)
		}
		if got := counterValue(t, reg, "tandem_mysql_reserve_slow_total", ""); got != 0 {
			t.Fatalf("got %v carts on the slow path, want 0", got)
		}
		for _, k := range []tandem.Key{key(100, 1), key(200, 1)} {
			if c := mustNotOversell(t, s, k); c.Reserved != 10 {
				t.Fatalf("%s got reserved %d, want 10", k, c.Reserved)
			}
		}
		MustHaveNoViolations(t, s)
	})
	t.Run("LockedUnitsRolledBackAreNoFalseSoldOut", func(t *testing.T) {
		// Every unit is locked by a transaction that rolls back: the
		// one-trip batch sees none, and the cart must wait for them on the
		// slow path instead of answering insufficient_inventory.
		reg := prometheus.NewRegistry()
		s := MustOpenStore(t, func(s *mysqlres.Store) { s.Registerer = reg })
		mustSetOnHand(t, s, key(100, 1), 3)
		release := holdUnits(t, s, key(100, 1), 3)
		done := make(chan error, 1)
		go func() {
			_, err := s.Reserve(ctx, reserve1("c", 100, 3, 1))
			done <- err
		}()
		waitForLockWait(t, s)
		release()
		if err := <-done; err != nil {
			t.Fatalf("got %v, want the cart held once the locks went away", err)
		}
		if got := counterValue(t, reg, "tandem_mysql_reserve_one_trip_short_total", ""); got != 1 {
			t.Fatalf("got %v carts off the one-trip batch, want 1", got)
		}
		if c := mustNotOversell(t, s, key(100, 1)); c.Reserved != 3 || c.Available != 0 {
			t.Fatalf("got %+v, want reserved 3 available 0", c)
		}
		MustHaveNoViolations(t, s)
	})
	t.Run("SoldOutBoundaryExactCounts", func(t *testing.T) {
		// N units, M > N concurrent single-unit carts, while a transaction
		// holds some of the units and then rolls back: exactly N succeed.
		const n, m = 20, 60
		s := MustOpenStore(t)
		mustSetOnHand(t, s, key(100, 1), n)
		release := holdUnits(t, s, key(100, 1), 5)
		reqs := make([]tandem.ReserveRequest, m)
		for i := range reqs {
			reqs[i] = reserve1(fmt.Sprintf("c-%d", i), 100, 1, 1)
		}
		var counts map[string]int
		done := make(chan struct{})
		go func() {
			defer close(done)
			counts = reserveMany(t, s, reqs)
		}()
		waitForLockWait(t, s)
		release()
		<-done
		if counts["ok"] != n || counts[tandem.EINSUFFICIENT] != m-n {
			t.Fatalf("got %v, want %d ok and %d insufficient", counts, n, m-n)
		}
		if c := mustNotOversell(t, s, key(100, 1)); c.Reserved != n || c.Available != 0 {
			t.Fatalf("got %+v, want reserved %d available 0", c, n)
		}
		MustHaveNoViolations(t, s)
	})
	t.Run("MultiGroupLinePrefersFirstGroup", func(t *testing.T) {
		// A multi-group line takes its whole quantity from the first group
		// that can cover it, beside a single-group line of the same cart.
		s := MustOpenStore(t)
		mustSetOnHand(t, s, key(100, 1), 5)
		mustSetOnHand(t, s, key(200, 1), 2)
		mustSetOnHand(t, s, key(200, 2), 5)
		mustSetOnHand(t, s, key(200, 3), 5)
		req := func(token string) tandem.ReserveRequest {
			return tandem.ReserveRequest{CartToken: token, ShopID: 1, Lines: []tandem.LineRequest{
				{ItemID: 100, Quantity: 1, GroupIDs: []int64{1}},
				{ItemID: 200, Quantity: 2, GroupIDs: []int64{1, 2, 3}},
			}}
		}
		for i, want := range []int64{1, 2, 2} {
			res, err := s.Reserve(ctx, req(fmt.Sprintf("g-%d", i)))
			if err != nil || res.Lines[1].GroupID != want {
				t.Fatalf("cart %d: got %+v, %v, want item 200 from group %d", i, res, err, want)
			}
		}
		for k, want := range map[tandem.Key]int64{key(100, 1): 3, key(200, 1): 2, key(200, 2): 4, key(200, 3): 0} {
			if c := mustNotOversell(t, s, k); c.Reserved != want {
				t.Fatalf("%s got reserved %d, want %d", k, c.Reserved, want)
			}
		}
		MustHaveNoViolations(t, s)
	})
	t.Run("ConcurrentRetriesHoldOnce", func(t *testing.T) {
		// The same cart sent eight times at once is held once: every answer
		// is the hold (the first, or a replay of it) or a conflict.
		s := MustOpenStore(t)
		mustSetOnHand(t, s, key(100, 1), 100)
		var wg sync.WaitGroup
		errs := make([]error, 8)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = s.Reserve(ctx, reserve1("same", 100, 5, 1))
			}()
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil && tandem.ErrorCode(err) != tandem.ECONFLICT {
				t.Fatalf("try %d: got %v, want the hold or a conflict", i, err)
			}
		}
		retry, err := s.Reserve(ctx, reserve1("same", 100, 5, 1))
		if err != nil || !retry.Replayed {
			t.Fatalf("got %+v, %v, want the hold replayed", retry, err)
		}
		if c := mustNotOversell(t, s, key(100, 1)); c.Reserved != 5 || c.Available != 95 {
			t.Fatalf("got %+v, want reserved 5 available 95", c)
		}
		MustHaveNoViolations(t, s)
	})
}
