package mysqlres_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/mysqlres"
)

// TestAdmission runs buyer flows through an admission of one slot on a real
// server: the counts stay exact at the sold-out boundary, a flow queued
// behind a stuck one gives up at its deadline with a fast EUNAVAILABLE and
// changes nothing, and background work passes the queue.
func TestAdmission(t *testing.T) {
	t.Run("HotItemThroughOneSlot", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		s := MustOpenStore(t, func(s *mysqlres.Store) {
			s.MaxOpenConns, s.MaxInflight, s.Registerer = 3, 1, reg
		})
		mustSellOutExactly(t, s, 50, 150)
		if n := counterValue(t, reg, "tandem_mysql_admission_wait_seconds", "reserve"); n < 150 {
			t.Fatalf("%v reserves went through the admission, want every one of 150", n)
		}
	})
	t.Run("QueuedFlowGivesUpAtItsDeadline", func(t *testing.T) {
		ctx := context.Background()
		s := MustOpenStore(t, func(s *mysqlres.Store) { s.MaxOpenConns, s.MaxInflight = 4, 1 })
		mustSetOnHand(t, s, key(100, 1), 10)
		if _, err := s.Reserve(ctx, reserve1("stuck", 100, 1, 1)); err != nil {
			t.Fatal(err)
		}
		// A claim that waits on the cart's header, locked by another
		// session, holds the only slot.
		holder, err := s.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer holder.Rollback()
		if _, err := holder.ExecContext(ctx, "SELECT * FROM reservations WHERE shop_id = 1 AND cart_token = 'stuck' FOR UPDATE"); err != nil {
			t.Fatal(err)
		}
		claimed := make(chan error, 1)
		go func() {
			_, err := s.Claim(ctx, 1, "stuck")
			claimed <- err
		}()
		waitForQuery(t, s, "%conn_tag=''claim''%FOR UPDATE")

		qctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		_, err = s.Reserve(qctx, reserve1("queued", 100, 2, 1))
		cancel()
		wantCode(t, err, tandem.EUNAVAILABLE)
		// Background work does not queue behind buyers.
		if _, err := s.SetOnHand(ctx, key(100, 1), 12); err != nil {
			t.Fatalf("SetOnHand while the buyers' slot is taken: %v", err)
		}

		if err := holder.Rollback(); err != nil {
			t.Fatal(err)
		}
		if err := <-claimed; err != nil {
			t.Fatalf("Claim after the header lock went: %v", err)
		}
		if _, err := s.Get(ctx, 1, "queued"); tandem.ErrorCode(err) != tandem.ENOTFOUND {
			t.Fatalf("the reserve that gave up left a hold behind (Get: %v)", err)
		}
		if _, err := s.Reserve(ctx, reserve1("queued", 100, 2, 1)); err != nil {
			t.Fatalf("Reserve once the slot is free: %v", err)
		}
		if c := mustCounters(t, s, key(100, 1)); c.OnHand != 11 || c.Reserved != 2 || c.Available != 9 {
			t.Fatalf("got %+v, want on_hand 11 (12 less the claim), reserved 2, available 9", c)
		}
	})
}

// waitForQuery waits until a session of s's database runs a statement whose
// text is LIKE pattern.
func waitForQuery(t *testing.T, s *mysqlres.Store, pattern string) {
	t.Helper()
	q := "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = DATABASE() AND INFO LIKE '" + pattern + "'"
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		var n int
		if err := s.DB().QueryRow(q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
	}
	t.Fatalf("no session ran a statement like %s", pattern)
}
