package mysqlres_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/internal/testenv"
	"github.com/tandemhq/tandem/mysqlres"
)

// admissions counts the waits it is told.
type admissions struct{ n atomic.Int64 }

func (a *admissions) ObserveAdmission(time.Duration) { a.n.Add(1) }

// TestLoad_Signals checks the throttle's signals from MySQL: the server's
// Threads_running, the buyers' admission waits, and a replica's lag from
// the heartbeat row (the primary read as its own replica here, its row
// aged by hand).
func TestLoad_Signals(t *testing.T) {
	ctx := context.Background()
	dsn := testenv.MustCreateDatabase(t)
	adm := &admissions{}
	s := mysqlres.NewStore(dsn)
	s.Admissions = adm
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })

	t.Run("ThreadsRunning", func(t *testing.T) {
		n, err := s.ThreadsRunning(ctx)
		if err != nil || n < 1 {
			t.Fatalf("got %d, %v; want at least 1 (the statement itself)", n, err)
		}
	})
	t.Run("Admissions", func(t *testing.T) {
		k := tandem.Key{ShopID: 1, ItemID: 1, GroupID: 1}
		if _, err := s.SetOnHand(ctx, k, 5); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Reserve(ctx, tandem.ReserveRequest{CartToken: "c", ShopID: 1,
			Lines: []tandem.LineRequest{{ItemID: 1, Quantity: 1, GroupIDs: []int64{1}}}}); err != nil {
			t.Fatal(err)
		}
		if adm.n.Load() == 0 {
			t.Fatal("a reserve told no admission wait")
		}
	})
	t.Run("ReplicaLag", func(t *testing.T) {
		r, err := mysqlres.OpenReplica(dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		if _, err := r.Lag(ctx); err == nil {
			t.Fatal("a replica without the heartbeat row has a lag, want an error")
		}
		if err := s.Beat(ctx); err != nil {
			t.Fatal(err)
		}
		if lag, err := r.Lag(ctx); err != nil || lag >= time.Minute {
			t.Fatalf("lag after a beat: %v, %v", lag, err)
		}
		db, err := sql.Open("mysql", dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if _, err := db.ExecContext(ctx, "UPDATE tandem_heartbeat SET beat_at = UTC_TIMESTAMP(6) - INTERVAL 5 SECOND"); err != nil {
			t.Fatal(err)
		}
		if lag, err := r.Lag(ctx); err != nil || lag < 5*time.Second {
			t.Fatalf("lag of a row 5s old: %v, %v; want at least 5s", lag, err)
		}
	})
}

// countingThrottle counts the pages that asked it.
type countingThrottle struct{ n atomic.Int64 }

func (c *countingThrottle) Wait(context.Context, string) error {
	c.n.Add(1)
	return nil
}

// TestCheckInvariants_AsksTheThrottle checks that the invariant check
// asks the pod's throttle between its statements, each on a connection of
// its own, and still finds nothing wrong on a clean store.
func TestCheckInvariants_AsksTheThrottle(t *testing.T) {
	s := MustOpenStore(t)
	mustSetOnHand(t, s, tandem.Key{ShopID: 1, ItemID: 1, GroupID: 1}, 5)
	th := &countingThrottle{}
	vs, err := s.CheckInvariants(tandem.WithThrottle(context.Background(), th, tandem.JobAudit))
	if err != nil || len(vs) != 0 {
		t.Fatalf("got %v, %v; want no violation", vs, err)
	}
	if n := th.n.Load(); n != 3 {
		t.Fatalf("the throttle was asked %d times, want between the four statements (3: a page's three, and the reserved holds' page)", n)
	}
}

// TestCheckInvariants_Pages checks the invariant check over many pages of
// shops: it asks the throttle between every two statements, and finds
// what is wrong in any page, orphans of shops the ledger does not know
// (before its first shop, between two, after its last) included.
func TestCheckInvariants_Pages(t *testing.T) {
	ctx := context.Background()
	s := MustOpenStore(t)
	defer mysqlres.SetInvariantPageShops(2)()
	for shop := int64(10); shop <= 70; shop += 10 { // 7 shops: pages of 2, 2, 2 and the rest
		mustSetOnHand(t, s, tandem.Key{ShopID: shop, ItemID: 1, GroupID: 1}, 5)
	}
	flag := reserve1("flag", 1, 1, 1)
	flag.ShopID = 30
	if _, err := s.Reserve(ctx, flag); err != nil {
		t.Fatal(err)
	}
	exec := func(qs ...string) {
		for _, q := range qs {
			if _, err := s.DB().ExecContext(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
	}
	exec("UPDATE reservation_lines SET held = 0 WHERE shop_id = 30 AND cart_token = 'flag'",
		"UPDATE ledger SET on_hand = on_hand + 1 WHERE shop_id = 70",
		"INSERT INTO unit_pool (shop_id, inventory_item_id, inventory_group_id, id) VALUES (5, 1, 1, 1), (45, 1, 1, 1), (900, 1, 1, 1)")
	t.Cleanup(func() { // before the store's own check of its invariants
		exec("UPDATE reservation_lines SET held = 1 WHERE shop_id = 30 AND cart_token = 'flag'",
			"UPDATE ledger SET on_hand = on_hand - 1 WHERE shop_id = 70",
			"DELETE FROM unit_pool WHERE shop_id IN (5, 45, 900)")
	})
	th := &countingThrottle{}
	vs, err := s.CheckInvariants(tandem.WithThrottle(ctx, th, tandem.JobAudit))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, v := range vs {
		got[fmt.Sprintf("%d %s", v.Key.ShopID, strings.SplitN(v.Message, ":", 2)[0])] = true
	}
	for _, want := range []string{
		"30 reservation reserved has 0 of 1 lines held", "70 conservation",
		"5 pool rows without a ledger row", "45 pool rows without a ledger row", "900 pool rows without a ledger row",
	} {
		if !got[want] {
			t.Errorf("violations %v: want %q", got, want)
		}
	}
	if n := th.n.Load(); n != 4*3 {
		t.Errorf("the throttle was asked %d times, want between every two of the 13 statements (3 of each of 4 pages of shops, 1 of reserved holds): 12", n)
	}
	// The counters are listed in the same pages, every position once, in
	// order.
	cs, err := s.ListCounters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var shops []int64
	for _, c := range cs {
		shops = append(shops, c.ShopID)
	}
	if want := []int64{10, 20, 30, 40, 50, 60, 70}; !slices.Equal(shops, want) {
		t.Errorf("ListCounters: got the positions of shops %v, want %v", shops, want)
	}
}

// TestNextPageShops: a page of the invariant checks halves after a slow
// statement, doubles after a fast one, within 1..InvariantPageMax shops.
func TestNextPageShops(t *testing.T) {
	slow, fast, ok := 2*mysqlres.InvariantPageTarget, mysqlres.InvariantPageTarget/8, mysqlres.InvariantPageTarget/2
	for _, tc := range []struct {
		shops int
		took  time.Duration
		want  int
	}{
		{100, slow, 50}, {1, slow, 1}, {100, fast, 200}, {mysqlres.InvariantPageMax, fast, mysqlres.InvariantPageMax}, {100, ok, 100},
	} {
		if got := mysqlres.NextPageShops(tc.shops, tc.took); got != tc.want {
			t.Errorf("NextPageShops(%d, %v) = %d, want %d", tc.shops, tc.took, got, tc.want)
		}
	}
}

// TestCheckInvariants_ReservedPages: the reserved holds are checked in
// pages of ActiveHoldsPage headers; a reserved hold with a line not held
// is found on any page.
func TestCheckInvariants_ReservedPages(t *testing.T) {
	ctx := context.Background()
	s := MustOpenStore(t)
	k := tandem.Key{ShopID: 1, ItemID: 1, GroupID: 1}
	mustSetOnHand(t, s, k, 3000)
	mustInsertReservations(t, s, k, "bulk-", tandem.StatusReserved, mysqlres.ActiveHoldsPage+500, s.Now().Add(time.Hour))
	// bulk-999 is the last in the order of the index: on the second page.
	exec := func(q string) {
		if _, err := s.DB().ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	exec("UPDATE reservation_lines SET held = 0 WHERE shop_id = 1 AND cart_token = 'bulk-999'")
	t.Cleanup(func() { exec("UPDATE reservation_lines SET held = 1 WHERE shop_id = 1 AND cart_token = 'bulk-999'") })
	vs, err := s.CheckInvariants(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		if v.CartToken == "bulk-999" && strings.Contains(v.Message, "reservation reserved has 0 of 1 lines held") {
			return
		}
	}
	t.Fatalf("got violations %+v, want bulk-999's line not held", vs)
}
