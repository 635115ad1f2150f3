package mysqlres_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/mysqlres"
)

func countRows(tb testing.TB, s *mysqlres.Store, table string) int {
	tb.Helper()
	var n int
	if err := s.DB().QueryRow("SELECT COUNT(*) FROM " + table).Scan(&n); err != nil {
		tb.Fatal(err)
	}
	return n
}

// mustOpenClockedStore is MustOpenStore with a clock at t0 that setNow
// moves.
func mustOpenClockedStore(t *testing.T, t0 time.Time) (s *mysqlres.Store, setNow func(time.Time)) {
	t.Helper()
	var mu sync.Mutex
	now := t0
	s = MustOpenStore(t, func(s *mysqlres.Store) {
		s.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	})
	return s, func(t time.Time) { mu.Lock(); now = t; mu.Unlock() }
}

func TestPurgeEnded(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	s, setNow := mustOpenClockedStore(t, t0)
	mustSetOnHand(t, s, key(100, 1), 100)
	for _, token := range []string{"released", "claimed", "active", "broken"} {
		if _, err := s.Reserve(ctx, reserve1(token, 100, 1, 1)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Release(ctx, 1, "released"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, 1, "claimed"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Release(ctx, 1, "broken"); err != nil {
		t.Fatal(err)
	}
	// Older traffic, long ended.
	mustInsertReservations(t, s, key(100, 1), "old-", tandem.StatusClaimed, 1200, t0.Add(-48*time.Hour))

	t.Run("KeepsRecent", func(t *testing.T) {
		n, err := s.PurgeEnded(ctx, t0.Add(time.Hour), 10_000)
		if err != nil || n != 1200 {
			t.Fatalf("got %d purged, %v, want the 1200 old ones", n, err)
		}
		if got := countRows(t, s, "reservations"); got != 4 {
			t.Fatalf("got %d reservations left, want 4", got)
		}
		if r, err := s.Get(ctx, 1, "released"); err != nil || r.Status != tandem.StatusReleased {
			t.Fatalf("Get(released) got %+v, %v, want released", r, err)
		}
	})
	t.Run("Limit", func(t *testing.T) {
		mustInsertReservations(t, s, key(100, 1), "older-", tandem.StatusClaimed, 30, t0.Add(-48*time.Hour))
		if n, err := s.PurgeEnded(ctx, t0, 20); err != nil || n != 20 {
			t.Fatalf("got %d purged, %v, want 20 (the limit)", n, err)
		}
		if n, err := s.PurgeEnded(ctx, t0, 20); err != nil || n != 10 {
			t.Fatalf("got %d purged, %v, want the 10 left", n, err)
		}
	})
	t.Run("AfterRetention", func(t *testing.T) {
		// A line held by an ended reservation is an inconsistency the
		// audit must go on seeing: that reservation stays.
		if _, err := s.DB().ExecContext(ctx, "UPDATE reservation_lines SET held = 1 WHERE cart_token = 'broken'"); err != nil {
			t.Fatal(err)
		}
		defer s.DB().ExecContext(ctx, "UPDATE reservation_lines SET held = 0 WHERE cart_token = 'broken'")
		later := t0.Add(s.Retention + time.Hour)
		setNow(later)
		n, err := s.PurgeEnded(ctx, later, 10_000)
		if err != nil || n != 2 {
			t.Fatalf("got %d purged, %v, want 2 (released, claimed; not broken)", n, err)
		}
		for _, token := range []string{"released", "claimed"} {
			if _, err := s.Get(ctx, 1, token); tandem.ErrorCode(err) != tandem.ENOTFOUND {
				t.Fatalf("Get(%s) after its retention: got %v, want not_found", token, err)
			}
		}
		if _, err := s.Get(ctx, 1, "broken"); err != nil {
			t.Fatalf("Get(broken): got %v, want it kept", err)
		}
		// An active hold is the reaper's, whatever its age.
		if r, err := s.Get(ctx, 1, "active"); err != nil || r.Status != tandem.StatusExpired {
			t.Fatalf("Get(active) got %+v, %v, want it kept (expired, not reaped)", r, err)
		}
		if got := countRows(t, s, "reservation_lines"); got != 2 {
			t.Fatalf("got %d lines left, want 2 (active, broken)", got)
		}
	})
	t.Run("ReadsDueRowsOnly", func(t *testing.T) {
		// 100,000 ended reservations still kept: a purge batch finds the
		// due ones without reading those.
		now := s.Now()
		mustInsertReservations(t, s, key(100, 1), "kept-", tandem.StatusClaimed, 100_000, now)
		conn, err := s.DB().Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		cutoff := now.Add(-s.Retention)
		if n := rowsExamined(t, conn, mysqlres.PurgeDueSQL, "claimed", cutoff, cutoff, 500); n > 100 {
			t.Fatalf("got %d rows examined with nothing due, want at most 100", n)
		}
		if _, err := s.DB().ExecContext(ctx, "DELETE l, r FROM reservations r JOIN reservation_lines l ON l.shop_id = r.shop_id AND l.cart_token = r.cart_token WHERE r.cart_token LIKE 'kept-%'"); err != nil {
			t.Fatal(err)
		}
	})
}

// PurgeClaims removes the ledger's claim records past their retention
// whose reservation is gone (purged, or never in MySQL: a cart only Redis
// held) and whose cart is not dirty; a recent record, one whose
// reservation is still kept and one of a dirty cart stay.
func TestPurgeClaims(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	s, setNow := mustOpenClockedStore(t, t0)
	mustSetOnHand(t, s, key(100, 1), 100)
	line := []tandem.Line{{ItemID: 100, Quantity: 1, GroupID: 1}}
	if _, err := s.Reserve(ctx, reserve1("claimed-here", 100, 1, 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, 1, "claimed-here"); err != nil {
		t.Fatal(err)
	}
	for _, token := range []string{"redis-only", "dirty"} {
		if _, err := s.Ledger().DeductCart(ctx, 1, token, line); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.MarkDirty(ctx, []tandem.DirtyCart{{ShopID: 1, CartToken: "dirty", Authority: tandem.StoreRedis, Since: t0, MarkedAt: t0}}); err != nil {
		t.Fatal(err)
	}
	claimed := func(token string) bool {
		t.Helper()
		ok, err := s.Ledger().Claimed(ctx, 1, token)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}

	if n, err := s.PurgeClaims(ctx, t0.Add(time.Hour), 10_000); err != nil || n != 0 {
		t.Fatalf("within the retention: got %d purged, %v, want none", n, err)
	}
	later := t0.Add(s.Retention + time.Hour)
	setNow(later)
	if n, err := s.PurgeClaims(ctx, later, 10_000); err != nil || n != 1 {
		t.Fatalf("past the retention: got %d purged, %v, want 1 (redis-only; claimed-here's reservation is kept, dirty is dirty)", n, err)
	}
	if claimed("redis-only") || !claimed("claimed-here") || !claimed("dirty") {
		t.Fatalf("claim records after the purge: redis-only %t, claimed-here %t, dirty %t; want false, true, true",
			claimed("redis-only"), claimed("claimed-here"), claimed("dirty"))
	}
	if _, err := s.PurgeEnded(ctx, later, 10_000); err != nil {
		t.Fatal(err)
	}
	if n, err := s.PurgeClaims(ctx, later, 10_000); err != nil || n != 1 {
		t.Fatalf("after its reservation was purged: got %d purged, %v, want 1 (claimed-here)", n, err)
	}
	if claimed("claimed-here") || !claimed("dirty") {
		t.Fatalf("claim records: claimed-here %t, dirty %t; want false, true", claimed("claimed-here"), claimed("dirty"))
	}
	// Every store has forgotten the token: it is a new cart.
	if _, err := s.Reserve(ctx, reserve1("claimed-here", 100, 1, 1)); err != nil {
		t.Fatalf("reserve of a token forgotten everywhere: %v", err)
	}
	if got := countRows(t, s, "claims"); got != 1 {
		t.Fatalf("got %d claim records, want 1 (dirty)", got)
	}

	// Batches: more records than one statement removes.
	mustInsertClaims(t, s, "old-", 1200, t0)
	if n, err := s.PurgeClaims(ctx, later, 1100); err != nil || n != 1100 {
		t.Fatalf("got %d purged, %v, want 1100 (the limit)", n, err)
	}
	if n, err := s.PurgeClaims(ctx, later, 10_000); err != nil || n != 100 {
		t.Fatalf("got %d purged, %v, want the 100 left", n, err)
	}
}

// mustInsertClaims writes n claim records of shop 1 claimed at at, tokens
// prefix0..prefix(n-1), without their reservations.
func mustInsertClaims(tb testing.TB, s *mysqlres.Store, prefix string, n int, at time.Time) {
	tb.Helper()
	q := "INSERT INTO claims (shop_id, cart_token, claimed_at) SELECT 1, CONCAT(?, x.n), ? FROM (" + numbersSQL() + ") x WHERE x.n < ?"
	if _, err := s.DB().ExecContext(context.Background(), q, prefix, at, n); err != nil {
		tb.Fatalf("%s: %v", q, err)
	}
}
