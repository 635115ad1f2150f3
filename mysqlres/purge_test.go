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

func TestPurgeEnded(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	now := t0
	s := MustOpenStore(t, func(s *mysqlres.Store) {
		s.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	})
	setNow := func(t time.Time) { mu.Lock(); now = t; mu.Unlock() }
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
