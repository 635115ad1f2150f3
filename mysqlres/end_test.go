package mysqlres_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/mysqlres"
)

// SettleClaim records a cart another store claimed through the ledger:
// never held here, it becomes a claimed cart (a reserve of its token is a
// conflict) and the count, the ledger's own, is not lowered again; held
// here, it is settled without a second deduction; not claimed in the
// ledger, nothing changes.
func TestSettleClaim(t *testing.T) {
	ctx := context.Background()
	s := MustOpenStore(t)
	k := key(1, 1)
	mustSetOnHand(t, s, k, 10)
	line := tandem.Line{ItemID: 1, Quantity: 2, GroupID: 1}
	sold := func(token string) tandem.Reservation {
		return tandem.Reservation{ShopID: 1, CartToken: token, Status: tandem.StatusClaimed,
			ExpiresAt: time.Now().Add(time.Minute), Lines: []tandem.Line{line}}
	}

	// Not claimed in the ledger: refused, nothing recorded.
	wantCode(t, s.SettleClaim(ctx, sold("early")), tandem.ECONFLICT)
	if _, err := s.Get(ctx, 1, "early"); tandem.ErrorCode(err) != tandem.ENOTFOUND {
		t.Errorf("Get of a cart refused by SettleClaim: got %v, want %s", err, tandem.ENOTFOUND)
	}
	if ok, err := s.Ledger().Claimed(ctx, 1, "early"); err != nil || ok {
		t.Errorf("ledger claim record of a cart refused by SettleClaim: got %t, %v, want none", ok, err)
	}

	// Claimed elsewhere, never seen here.
	if _, err := s.Ledger().DeductCart(ctx, 1, "elsewhere", []tandem.Line{line}); err != nil {
		t.Fatal(err)
	}
	for range 2 { // idempotent
		if err := s.SettleClaim(ctx, sold("elsewhere")); err != nil {
			t.Fatalf("SettleClaim of a cart claimed elsewhere: %v", err)
		}
	}
	if res, err := s.Get(ctx, 1, "elsewhere"); err != nil || res.Status != tandem.StatusClaimed || len(res.Lines) != 1 || res.Lines[0] != line {
		t.Errorf("Get after SettleClaim: got %+v, %v, want claimed with %+v", res, err, line)
	}
	wantCode(t, func() error { _, err := s.Reserve(ctx, reserve1("elsewhere", 1, 2, 1)); return err }(), tandem.ECONFLICT)
	if got := mustCounters(t, s, k); got.OnHand != 8 || got.Reserved != 0 {
		t.Errorf("counters: got %+v, want on_hand 8 (deducted once), none held", got)
	}

	// Claimed elsewhere while its copy was landing here (the claim did not
	// see the copy's hold): the copy is settled, not deducted again.
	if _, err := s.Reserve(ctx, reserve1("late", 1, 2, 1)); err != nil {
		t.Fatal(err)
	}
	if err := mysqlres.DeductUnseen(ctx, s, 1, "late", []tandem.Line{line}); err != nil {
		t.Fatal(err)
	}
	if err := s.SettleClaim(ctx, sold("late")); err != nil {
		t.Fatalf("SettleClaim of a cart held here: %v", err)
	}
	if res, err := s.Get(ctx, 1, "late"); err != nil || res.Status != tandem.StatusClaimed {
		t.Errorf("Get after SettleClaim of a hold: got %+v, %v, want claimed", res, err)
	}
	if got := mustCounters(t, s, k); got.OnHand != 6 || got.Reserved != 0 {
		t.Errorf("counters: got %+v, want on_hand 6, none held", got)
	}
}

// TestReserveClaimedToken: a token the ledger records as claimed is never
// held again, on every path of Reserve, though this store never held it
// (a cart reserved and claimed in Redis before the backfill followed):
// ECONFLICT, no unit taken, nothing recorded. Granted, the hold would keep
// units for a cart already sold, and the stores could never converge.
func TestReserveClaimedToken(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		poolCap  int
		req      tandem.ReserveRequest
		wantSlow float64
	}{
		{"OneTrip", 0, reserve1("sold", 1, 2, 1), 0},
		{"TwoTrips", 0, reserve1("sold", 1, 2, 2, 1), 0},
		{"SlowPath", 1, reserve1("sold", 1, 3, 1, 2), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			s := MustOpenStore(t, func(s *mysqlres.Store) {
				s.Registerer = reg
				if tc.poolCap > 0 {
					s.PoolCap = tc.poolCap
				}
			})
			mustSetOnHand(t, s, key(1, 1), 10)
			mustSetOnHand(t, s, key(1, 2), 10)
			if _, err := s.Ledger().DeductCart(ctx, 1, "sold", []tandem.Line{{ItemID: 1, Quantity: 2, GroupID: 1}}); err != nil {
				t.Fatal(err)
			}
			for range 2 {
				res, err := s.Reserve(ctx, tc.req)
				wantCode(t, err, tandem.ECONFLICT)
				if res != nil || !strings.Contains(err.Error(), "already claimed") {
					t.Errorf("Reserve of a claimed token: got %+v, %v, want no reservation and \"already claimed\"", res, err)
				}
			}
			if got := counterValue(t, reg, "tandem_mysql_reserve_slow_total", ""); got != 2*tc.wantSlow {
				t.Errorf("%v reserves on the slow path, want %v", got, 2*tc.wantSlow)
			}
			if _, err := s.Get(ctx, 1, "sold"); tandem.ErrorCode(err) != tandem.ENOTFOUND {
				t.Errorf("Get of the refused token: got %v, want %s", err, tandem.ENOTFOUND)
			}
			for _, k := range []tandem.Key{key(1, 1), key(1, 2)} {
				want := int64(10)
				if k.GroupID == 1 {
					want = 8
				}
				if got := mustCounters(t, s, k); got.OnHand != want || got.Reserved != 0 || got.Available != want {
					t.Errorf("%s: got %+v, want on_hand %d, nothing held", k, got, want)
				}
			}
			// Another token is held as before.
			if _, err := s.Reserve(ctx, reserve1("next", 1, 2, 1)); err != nil {
				t.Fatal(err)
			}
			MustHaveNoViolations(t, s)
		})
	}
}
