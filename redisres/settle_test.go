package redisres_test

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/internal/memres"
	"github.com/tandemhq/tandem/redisres"
)

// hookLedger runs a hook after every DeductCart, to land in the window
// between the ledger step and the Redis step of a claim.
type hookLedger struct {
	*memres.Ledger
	afterDeduct func()
}

func (l *hookLedger) DeductCart(ctx context.Context, shopID int64, token string, lines []tandem.Line) (bool, error) {
	applied, err := l.Ledger.DeductCart(ctx, shopID, token, lines)
	if l.afterDeduct != nil {
		l.afterDeduct()
	}
	return applied, err
}

func TestStore_Claim(t *testing.T) {
	k := key(1, 100, 1)

	t.Run("OK", func(t *testing.T) {
		e, _ := MustOpenStore(t)
		e.MustStock(t, k, 10)
		e.MustReserve(t, cartReq("c-1", line(100, 2, 1)))
		res, err := e.Claim(ctx, 1, "c-1")
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != tandem.StatusClaimed || res.Replayed {
			t.Errorf("got status %s replayed %v, want claimed, not replayed", res.Status, res.Replayed)
		}
		e.WantLedger(t, k, 8)
		e.WantCounters(t, k, 8, 0, 8)
		e.WantStatus(t, 1, "c-1", tandem.StatusClaimed)
		e.WantClean(t)
	})

	t.Run("Replay", func(t *testing.T) {
		e, _ := MustOpenStore(t)
		e.MustStock(t, k, 10)
		e.MustReserve(t, cartReq("c-1", line(100, 2, 1)))
		if _, err := e.Claim(ctx, 1, "c-1"); err != nil {
			t.Fatal(err)
		}
		e.Clock.Add(time.Hour) // a claimed cart stays claimed past its expiry
		res, err := e.Claim(ctx, 1, "c-1")
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != tandem.StatusClaimed || !res.Replayed {
			t.Errorf("got status %s replayed %v, want claimed, replayed", res.Status, res.Replayed)
		}
		e.WantLedger(t, k, 8)
		e.WantCounters(t, k, 8, 0, 8)
	})

	t.Run("ErrNotFound", func(t *testing.T) {
		e, _ := MustOpenStore(t)
		_, err := e.Claim(ctx, 1, "nope")
		wantCode(t, err, tandem.ENOTFOUND)
	})

	t.Run("ErrGoneReleased", func(t *testing.T) {
		e, _ := MustOpenStore(t)
		e.MustStock(t, k, 10)
		e.MustReserve(t, cartReq("c-1", line(100, 2, 1)))
		if _, err := e.Release(ctx, 1, "c-1"); err != nil {
			t.Fatal(err)
		}
		_, err := e.Claim(ctx, 1, "c-1")
		wantCode(t, err, tandem.EGONE)
		e.WantLedger(t, k, 10)
		e.WantCounters(t, k, 10, 0, 10)
	})

	t.Run("ErrGoneExpiredNotReaped", func(t *testing.T) {
		e, _ := MustOpenStore(t)
		e.MustStock(t, k, 10)
		e.MustReserve(t, cartReq("c-1", line(100, 2, 1)))
		e.Clock.Add(tandem.DefaultTTL)
		_, err := e.Claim(ctx, 1, "c-1")
		wantCode(t, err, tandem.EGONE)
		e.WantLedger(t, k, 10)
		e.WantCounters(t, k, 10, 2, 8) // held until the reaper returns it
	})

	t.Run("ErrUnavailableLedgerDown", func(t *testing.T) {
		e, _ := MustOpenStore(t)
		e.MustStock(t, k, 10)
		e.MustReserve(t, cartReq("c-1", line(100, 2, 1)))
		e.Ledger.Err = errors.New("mysql: connection refused")
		_, err := e.Claim(ctx, 1, "c-1")
		wantCode(t, err, tandem.EUNAVAILABLE)
		e.Ledger.Err = nil
		e.WantLedger(t, k, 10)
		e.WantCounters(t, k, 10, 2, 8)
		e.WantStatus(t, 1, "c-1", tandem.StatusReserved)
	})

	t.Run("LedgerDeductedBefore", func(t *testing.T) {
		// A claim that died after the ledger step: the retry completes the
		// Redis step and the ledger deducts once.
		e, _ := MustOpenStore(t)
		e.MustStock(t, k, 10)
		res := e.MustReserve(t, cartReq("c-1", line(100, 2, 1)))
		if _, err := e.Ledger.DeductCart(ctx, 1, "c-1", res.Lines); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Claim(ctx, 1, "c-1"); err != nil {
			t.Fatal(err)
		}
		e.WantLedger(t, k, 8)
		e.WantCounters(t, k, 8, 0, 8)
		e.WantClean(t)
	})

	t.Run("HoldFreedDuringClaim", func(t *testing.T) {
		// A reaper runs between the two steps: the hold is claiming, so the
		// reaper leaves it alone (returning its units would let a second
		// buyer take units the ledger already sold), and the claim ends clean.
		mrEnv, _ := MustOpenStore(t)
		ledger := &hookLedger{Ledger: memres.NewLedger()}
		s := redisres.NewStore(mrEnv.RDB, ledger)
		s.Prefix = "h:"
		s.Now = mrEnv.Clock.Now
		if err := s.Open(ctx); err != nil {
			t.Fatal(err)
		}
		e := &env{Store: s, Ledger: ledger.Ledger, Clock: mrEnv.Clock, RDB: mrEnv.RDB}
		e.MustStock(t, k, 10)
		e.MustReserve(t, cartReq("c-1", line(100, 2, 1)))
		ledger.afterDeduct = func() {
			if n, err := s.ExpireDue(ctx, e.Clock.Now().Add(time.Hour), 10); n != 0 || err != nil {
				t.Errorf("expire in the window: got %d, %v, want 0, nil", n, err)
			}
		}
		res, err := e.Claim(ctx, 1, "c-1")
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != tandem.StatusClaimed {
			t.Errorf("status: got %s, want claimed", res.Status)
		}
		e.WantLedger(t, k, 8)
		e.WantCounters(t, k, 8, 0, 8)
		e.WantClean(t)
	})
}

func TestStore_Release(t *testing.T) {
	k := key(1, 100, 1)

	t.Run("OK", func(t *testing.T) {
		e, _ := MustOpenStore(t)
		e.MustStock(t, k, 10)
		e.MustReserve(t, cartReq("c-1", line(100, 2, 1)))
		res, err := e.Release(ctx, 1, "c-1")
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != tandem.StatusReleased || res.Replayed {
			t.Errorf("got status %s replayed %v, want released, not replayed", res.Status, res.Replayed)
		}
		e.WantCounters(t, k, 10, 0, 10)
		e.WantStatus(t, 1, "c-1", tandem.StatusReleased)
		e.WantClean(t)
	})

	t.Run("Replay", func(t *testing.T) {
		e, _ := MustOpenStore(t)
		e.MustStock(t, k, 10)
		e.MustReserve(t, cartReq("c-1", line(100, 2, 1)))
		if _, err := e.Release(ctx, 1, "c-1"); err != nil {
			t.Fatal(err)
		}
		res, err := e.Release(ctx, 1, "c-1")
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != tandem.StatusReleased || !res.Replayed {
			t.Errorf("got status %s replayed %v, want released, replayed", res.Status, res.Replayed)
		}
		e.WantCounters(t, k, 10, 0, 10)
	})

	t.Run("ErrNotFound", func(t *testing.T) {
		e, _ := MustOpenStore(t)
		_, err := e.Release(ctx, 1, "nope")
		wantCode(t, err, tandem.ENOTFOUND)
	})

	t.Run("ErrAlreadyClaimed", func(t *testing.T) {
		e, _ := MustOpenStore(t)
		e.MustStock(t, k, 10)
		e.MustReserve(t, cartReq("c-1", line(100, 2, 1)))
		if _, err := e.Claim(ctx, 1, "c-1"); err != nil {
			t.Fatal(err)
		}
		_, err := e.Release(ctx, 1, "c-1")
		wantCode(t, err, tandem.EALREADYCLAIMED)
		e.WantCounters(t, k, 8, 0, 8)
	})

	t.Run("ErrGoneExpired", func(t *testing.T) {
		e, _ := MustOpenStore(t)
		e.MustStock(t, k, 10)
		e.MustReserve(t, cartReq("c-1", line(100, 2, 1)))
		e.Clock.Add(tandem.DefaultTTL)
		_, err := e.Release(ctx, 1, "c-1")
		wantCode(t, err, tandem.EGONE)
		e.WantCounters(t, k, 10, 2, 8) // the reaper returns it, once
		if n, err := e.ExpireDue(ctx, e.Clock.Now(), 10); n != 1 || err != nil {
			t.Fatalf("expire: got %d, %v, want 1, nil", n, err)
		}
		_, err = e.Release(ctx, 1, "c-1")
		wantCode(t, err, tandem.EGONE)
		e.WantCounters(t, k, 10, 0, 10)
	})
}

func TestStore_Get(t *testing.T) {
	k := key(1, 100, 1)
	e, _ := MustOpenStore(t)
	e.MustStock(t, k, 10)
	first := e.MustReserve(t, cartReq("c-1", line(100, 2, 1)))
	res, err := e.Get(ctx, 1, "c-1")
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != tandem.StatusReserved || !res.ExpiresAt.Equal(first.ExpiresAt) || !reflect.DeepEqual(res.Lines, first.Lines) {
		t.Errorf("got %+v, want the reservation %+v", res, first)
	}
	t.Run("ExpiredBeforeReaped", func(t *testing.T) {
		e.Clock.Add(tandem.DefaultTTL)
		e.WantStatus(t, 1, "c-1", tandem.StatusExpired)
	})
	t.Run("ErrNotFound", func(t *testing.T) {
		_, err := e.Get(ctx, 1, "c-2")
		wantCode(t, err, tandem.ENOTFOUND)
		_, err = e.Get(ctx, 2, "c-1") // tokens are per shop
		wantCode(t, err, tandem.ENOTFOUND)
	})
}

func TestStore_ExpireDue(t *testing.T) {
	k := key(1, 100, 1)

	t.Run("ReturnsDueHolds", func(t *testing.T) {
		e, _ := MustOpenStore(t)
		e.MustStock(t, k, 10)
		short := cartReq("c-short", line(100, 2, 1))
		short.TTL = time.Minute
		e.MustReserve(t, short)
		e.MustReserve(t, cartReq("c-long", line(100, 3, 1)))
		if n, err := e.ExpireDue(ctx, e.Clock.Now().Add(time.Minute-time.Millisecond), 10); n != 0 || err != nil {
			t.Fatalf("before expiry: got %d, %v, want 0, nil", n, err)
		}
		e.Clock.Add(time.Minute)
		if n, err := e.ExpireDue(ctx, e.Clock.Now(), 10); n != 1 || err != nil {
			t.Fatalf("at expiry: got %d, %v, want 1, nil", n, err)
		}
		e.WantCounters(t, k, 10, 3, 7)
		e.WantStatus(t, 1, "c-short", tandem.StatusExpired)
		e.WantStatus(t, 1, "c-long", tandem.StatusReserved)
		if n, err := e.ExpireDue(ctx, e.Clock.Now(), 10); n != 0 || err != nil {
			t.Fatalf("again: got %d, %v, want 0, nil", n, err)
		}
		e.WantCounters(t, k, 10, 3, 7)
		e.WantClean(t)
	})

	t.Run("RespectsLimitAcrossShops", func(t *testing.T) {
		e, _ := MustOpenStore(t)
		for shop := int64(1); shop <= 3; shop++ {
			e.MustStock(t, key(shop, 100, 1), 10)
			for _, tok := range []string{"a", "b"} {
				req := cartReq(tok, line(100, 1, 1))
				req.ShopID = shop
				e.MustReserve(t, req)
			}
		}
		e.Clock.Add(tandem.DefaultTTL)
		var got []int
		for i := 0; i < 5; i++ {
			n, err := e.ExpireDue(ctx, e.Clock.Now(), 4)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, n)
		}
		if want := []int{4, 2, 0, 0, 0}; !reflect.DeepEqual(got, want) {
			t.Errorf("expired per call: got %v, want %v", got, want)
		}
		for shop := int64(1); shop <= 3; shop++ {
			e.WantCounters(t, key(shop, 100, 1), 10, 0, 10)
		}
		if n, err := e.ExpireDue(ctx, e.Clock.Now(), 0); n != 0 || err != nil {
			t.Errorf("limit 0: got %d, %v, want 0, nil", n, err)
		}
	})
}
