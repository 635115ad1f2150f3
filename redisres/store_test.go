package redisres_test

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/internal/memres"
	"github.com/tandemhq/tandem/redisres"
)

var ctx = context.Background()

func TestStore_Reserve(t *testing.T) {
	k := key(1, 100, 1)

	t.Run("OK", func(t *testing.T) {
		e, _ := MustOpenStore(t)
		e.MustStock(t, k, 10)
		res := e.MustReserve(t, cartReq("c-1", line(100, 2, 1)))
		if res.Status != tandem.StatusReserved || res.Replayed {
			t.Errorf("got status %s replayed %v, want reserved, not replayed", res.Status, res.Replayed)
		}
		if want := e.Clock.Now().Add(redisres.DefaultTTL); !res.ExpiresAt.Equal(want) {
			t.Errorf("expires_at: got %s, want %s", res.ExpiresAt, want)
		}
		if want := []tandem.Line{{ItemID: 100, Quantity: 2, GroupID: 1}}; !reflect.DeepEqual(res.Lines, want) {
			t.Errorf("lines: got %+v, want %+v", res.Lines, want)
		}
		e.WantCounters(t, k, 10, 2, 8)
		e.WantClean(t)
	})

	t.Run("RequestTTL", func(t *testing.T) {
		e, _ := MustOpenStore(t)
		e.MustStock(t, k, 10)
		req := cartReq("c-1", line(100, 1, 1))
		req.TTL = 30 * time.Second
		res := e.MustReserve(t, req)
		if want := e.Clock.Now().Add(30 * time.Second); !res.ExpiresAt.Equal(want) {
			t.Errorf("expires_at: got %s, want %s", res.ExpiresAt, want)
		}
	})

	t.Run("ReplayKeepsFirstAnswer", func(t *testing.T) {
		e, _ := MustOpenStore(t)
		e.MustStock(t, k, 10)
		first := e.MustReserve(t, cartReq("c-1", line(100, 2, 1)))
		e.Clock.Add(time.Minute)
		retry := cartReq("c-1", line(100, 2, 1))
		retry.TTL = 5 * time.Second // the TTL is not part of the request's identity
		again := e.MustReserve(t, retry)
		if !again.Replayed {
			t.Errorf("replayed: got false, want true")
		}
		if !again.ExpiresAt.Equal(first.ExpiresAt) {
			t.Errorf("expires_at: got %s, want the first answer's %s", again.ExpiresAt, first.ExpiresAt)
		}
		e.WantCounters(t, k, 10, 2, 8)
	})

	t.Run("ErrConflictDifferentRequest", func(t *testing.T) {
		e, _ := MustOpenStore(t)
		e.MustStock(t, k, 10)
		e.MustReserve(t, cartReq("c-1", line(100, 2, 1)))
		_, err := e.Reserve(ctx, cartReq("c-1", line(100, 3, 1)))
		wantCode(t, err, tandem.ECONFLICT)
		e.WantCounters(t, k, 10, 2, 8)
	})

	t.Run("ErrConflictTerminalCart", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			end  func(e *env) error
		}{
			{"Claimed", func(e *env) error { _, err := e.Claim(ctx, 1, "c-1"); return err }},
			{"Released", func(e *env) error { _, err := e.Release(ctx, 1, "c-1"); return err }},
			{"ExpiredNotReaped", func(e *env) error { e.Clock.Add(redisres.DefaultTTL); return nil }},
			{"ExpiredAndReaped", func(e *env) error {
				e.Clock.Add(redisres.DefaultTTL)
				_, err := e.ExpireDue(ctx, e.Clock.Now(), 10)
				return err
			}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				e, _ := MustOpenStore(t)
				e.MustStock(t, k, 10)
				e.MustReserve(t, cartReq("c-1", line(100, 2, 1)))
				if err := tc.end(e); err != nil {
					t.Fatal(err)
				}
				before, _ := e.Counters(ctx, k)
				_, err := e.Reserve(ctx, cartReq("c-1", line(100, 2, 1)))
				wantCode(t, err, tandem.ECONFLICT)
				after, _ := e.Counters(ctx, k)
				if *before != *after {
					t.Errorf("counters: got %+v, want unchanged %+v", after, before)
				}
			})
		}
	})

	t.Run("TokenReusableAfterRetention", func(t *testing.T) {
		e, mr := MustOpenStore(t)
		e.MustStock(t, k, 10)
		e.MustReserve(t, cartReq("c-1", line(100, 2, 1)))
		if _, err := e.Release(ctx, 1, "c-1"); err != nil {
			t.Fatal(err)
		}
		mr.FastForward(redisres.DefaultRetention + time.Second)
		if res := e.MustReserve(t, cartReq("c-1", line(100, 3, 1))); res.Replayed {
			t.Errorf("replayed: got true, want a new reservation")
		}
		e.WantCounters(t, k, 10, 3, 7)
	})

	t.Run("ErrInsufficient", func(t *testing.T) {
		e, _ := MustOpenStore(t)
		e.MustStock(t, k, 1)
		_, err := e.Reserve(ctx, cartReq("c-1", line(100, 2, 1)))
		wantCode(t, err, tandem.EINSUFFICIENT)
		if got, want := tandem.ErrorMessage(err), "item 100 has 1 sellable unit, 2 requested"; got != want {
			t.Errorf("message: got %q, want %q", got, want)
		}
		if got := tandem.ErrorDetails(err)["inventory_item_id"]; got != int64(100) {
			t.Errorf("details.inventory_item_id: got %v, want 100", got)
		}
		e.WantCounters(t, k, 1, 0, 1)
		_, err = e.Get(ctx, 1, "c-1")
		wantCode(t, err, tandem.ENOTFOUND)
	})

	t.Run("ErrInsufficientSumsGroups", func(t *testing.T) {
		e, _ := MustOpenStore(t)
		e.MustStock(t, key(1, 100, 1), 1)
		e.MustStock(t, key(1, 100, 2), 1)
		_, err := e.Reserve(ctx, cartReq("c-1", line(100, 2, 1, 2)))
		wantCode(t, err, tandem.EINSUFFICIENT)
		if got, want := tandem.ErrorMessage(err), "item 100 has 2 sellable units, 2 requested"; got != want {
			t.Errorf("message: got %q, want %q (a line is never split)", got, want)
		}
	})

	t.Run("ErrInsufficientUnknownPosition", func(t *testing.T) {
		e, _ := MustOpenStore(t)
		_, err := e.Reserve(ctx, cartReq("c-1", line(100, 1, 1)))
		wantCode(t, err, tandem.EINSUFFICIENT)
		e.WantCounters(t, k, 0, 0, 0)
	})

	t.Run("GroupPreference", func(t *testing.T) {
		e, _ := MustOpenStore(t)
		e.MustStock(t, key(1, 100, 1), 1)
		e.MustStock(t, key(1, 100, 2), 5)
		e.MustStock(t, key(1, 200, 1), 5)
		e.MustStock(t, key(1, 200, 2), 5)
		res := e.MustReserve(t, cartReq("c-1", line(100, 2, 1, 2), line(200, 1, 2, 1)))
		want := []tandem.Line{{ItemID: 100, Quantity: 2, GroupID: 2}, {ItemID: 200, Quantity: 1, GroupID: 2}}
		if !reflect.DeepEqual(res.Lines, want) {
			t.Errorf("lines: got %+v, want %+v", res.Lines, want)
		}
		res = e.MustReserve(t, cartReq("c-2", line(100, 1, 1, 2)))
		if res.Lines[0].GroupID != 1 {
			t.Errorf("group: got %d, want the first group that covers the line (1)", res.Lines[0].GroupID)
		}
		e.WantCounters(t, key(1, 100, 1), 1, 1, 0)
		e.WantCounters(t, key(1, 100, 2), 5, 2, 3)
		e.WantCounters(t, key(1, 200, 1), 5, 0, 5)
		e.WantCounters(t, key(1, 200, 2), 5, 1, 4)
	})

	t.Run("AllOrNothing", func(t *testing.T) {
		e, _ := MustOpenStore(t)
		e.MustStock(t, key(1, 100, 1), 5)
		e.MustStock(t, key(1, 200, 1), 1)
		e.MustStock(t, key(1, 300, 1), 0)
		_, err := e.Reserve(ctx, cartReq("c-1", line(100, 2, 1), line(200, 2, 1), line(300, 1, 1)))
		wantCode(t, err, tandem.EINSUFFICIENT)
		if got := tandem.ErrorDetails(err)["inventory_item_id"]; got != int64(200) {
			t.Errorf("details.inventory_item_id: got %v, want the first failing line 200", got)
		}
		e.WantCounters(t, key(1, 100, 1), 5, 0, 5)
		e.WantCounters(t, key(1, 200, 1), 1, 0, 1)
		e.WantClean(t)
	})

	t.Run("ErrInvalid", func(t *testing.T) {
		e, _ := MustOpenStore(t)
		e.MustStock(t, k, 10)
		for name, req := range map[string]tandem.ReserveRequest{
			"EmptyToken":    cartReq("", line(100, 1, 1)),
			"BadToken":      cartReq("c 1", line(100, 1, 1)),
			"NoLines":       cartReq("c-1"),
			"ZeroQuantity":  cartReq("c-1", line(100, 0, 1)),
			"SameItemTwice": cartReq("c-1", line(100, 1, 1), line(100, 1, 2)),
			"RepeatedGroup": cartReq("c-1", line(100, 1, 1, 1)),
			"NoShop":        {CartToken: "c-1", Lines: []tandem.LineRequest{line(100, 1, 1)}},
		} {
			t.Run(name, func(t *testing.T) {
				_, err := e.Reserve(ctx, req)
				wantCode(t, err, tandem.EINVALID)
			})
		}
		e.WantCounters(t, k, 10, 0, 10)
	})
}

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
		e.Clock.Add(redisres.DefaultTTL)
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
		if err := s.Open(); err != nil {
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
		e.Clock.Add(redisres.DefaultTTL)
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
		e.Clock.Add(redisres.DefaultTTL)
		e.WantStatus(t, 1, "c-1", tandem.StatusExpired)
	})
	t.Run("ErrNotFound", func(t *testing.T) {
		_, err := e.Get(ctx, 1, "c-2")
		wantCode(t, err, tandem.ENOTFOUND)
		_, err = e.Get(ctx, 2, "c-1") // tokens are per shop
		wantCode(t, err, tandem.ENOTFOUND)
	})
}

func TestStore_Unavailable(t *testing.T) {
	mr := miniredis.RunT(t)
	// No retries: the answer is the same, only sooner.
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	e := MustOpenStoreOn(t, rdb, "t:", memres.NewLedger(), newClock())
	e.MustStock(t, key(1, 100, 1), 10)
	mr.Close()
	_, err := e.Reserve(ctx, cartReq("c-1", line(100, 1, 1)))
	wantCode(t, err, tandem.EUNAVAILABLE)
	_, err = e.Counters(ctx, key(1, 100, 1))
	wantCode(t, err, tandem.EUNAVAILABLE)
	_, err = e.ExpireDue(ctx, e.Clock.Now(), 10)
	wantCode(t, err, tandem.EUNAVAILABLE)

	t.Run("DeadlineExceeded", func(t *testing.T) {
		c, cancel := context.WithCancel(ctx)
		cancel()
		_, err := e.Get(c, 1, "c-1")
		wantCode(t, err, tandem.EUNAVAILABLE)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("got %v, want it to wrap context.Canceled", err)
		}
	})
}

func TestStore_Metrics(t *testing.T) {
	e, _ := MustOpenStore(t)
	e.MustStock(t, key(1, 100, 1), 1)
	e.MustReserve(t, cartReq("c-1", line(100, 1, 1)))
	e.Reserve(ctx, cartReq("c-2", line(100, 1, 1)))
	families, err := e.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	for _, f := range families {
		if f.GetName() == "tandem_redis_op_duration_seconds" {
			n = len(f.GetMetric())
		}
	}
	// set_on_hand/ok, reserve/ok, reserve/insufficient_inventory
	if n != 3 {
		t.Errorf("series: got %d, want 3", n)
	}

	t.Run("CloseTwiceAndReopen", func(t *testing.T) {
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		if err := e.Close(); err != nil {
			t.Fatalf("second close: got %v, want nil", err)
		}
		s := redisres.NewStore(e.RDB, e.Ledger)
		s.Registerer = e.Registry
		if err := s.Open(); err != nil {
			t.Fatalf("open on the registry of a closed store: %v", err)
		}
		s.Close()
	})

	t.Run("NoRegisterer", func(t *testing.T) {
		s := redisres.NewStore(e.RDB, e.Ledger)
		if err := s.Open(); err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if _, err := s.Counters(ctx, key(1, 100, 1)); err != nil {
			t.Fatal(err)
		}
	})
}

func TestStore_InternalErrors(t *testing.T) {
	t.Run("WrongTypeIsInternal", func(t *testing.T) {
		// A server that answers, wrongly, is a bug to log, not an outage.
		e, _ := MustOpenStore(t)
		if err := e.RDB.Set(ctx, e.Prefix+"{1}:item:100:1", "x", 0).Err(); err != nil {
			t.Fatal(err)
		}
		_, err := e.Counters(ctx, key(1, 100, 1))
		wantCode(t, err, tandem.EINTERNAL)
	})

	t.Run("PrefixWithBraces", func(t *testing.T) {
		e, _ := MustOpenStore(t)
		s := redisres.NewStore(e.RDB, e.Ledger)
		s.Prefix = "{pod}:"
		wantCode(t, s.Open(), tandem.EINVALID)
	})
}
