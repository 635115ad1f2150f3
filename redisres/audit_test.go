package redisres_test

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/internal/memres"
	"github.com/tandemhq/tandem/internal/testenv"
)

func TestStore_ListCounters(t *testing.T) {
	e, _ := MustOpenStore(t)
	if got, err := e.ListCounters(ctx); len(got) != 0 || err != nil {
		t.Fatalf("empty store: got %v, %v, want none", got, err)
	}
	for _, k := range []tandem.Key{key(2, 5, 1), key(1, 200, 1), key(1, 100, 2), key(1, 100, 1)} {
		e.MustStock(t, k, 10)
	}
	e.MustReserve(t, cartReq("c-1", line(100, 4, 2)))
	got, err := e.ListCounters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []tandem.Counters{
		{Key: key(1, 100, 1), OnHand: 10, Available: 10},
		{Key: key(1, 100, 2), OnHand: 10, Reserved: 4, Available: 6},
		{Key: key(1, 200, 1), OnHand: 10, Available: 10},
		{Key: key(2, 5, 1), OnHand: 10, Available: 10},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestStore_CheckInvariants(t *testing.T) {
	k := key(1, 100, 1)

	t.Run("Clean", func(t *testing.T) {
		e, _ := MustOpenStore(t)
		e.MustStock(t, k, 10)
		e.MustReserve(t, cartReq("c-1", line(100, 2, 1)))
		e.MustReserve(t, cartReq("c-2", line(100, 3, 1)))
		e.Clock.Add(tandem.DefaultTTL) // due but not reaped: still held
		e.WantClean(t)
	})

	t.Run("CounterDrift", func(t *testing.T) {
		e, _ := MustOpenStore(t)
		e.MustStock(t, k, 10)
		e.MustReserve(t, cartReq("c-1", line(100, 2, 1)))
		if err := e.RDB.HIncrBy(ctx, e.Prefix+"{1}:item:100:1", "available", 1).Err(); err != nil {
			t.Fatal(err)
		}
		v, err := e.CheckInvariants(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(v) != 1 || v[0].Key != k {
			t.Errorf("got %+v, want one violation on %s", v, k)
		}
	})

	t.Run("NegativeAvailable", func(t *testing.T) {
		e, _ := MustOpenStore(t)
		e.MustStock(t, k, 1)
		if err := e.RDB.HSet(ctx, e.Prefix+"{1}:item:100:1", "available", -1, "on_hand", -1).Err(); err != nil {
			t.Fatal(err)
		}
		v, err := e.CheckInvariants(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(v) != 1 || v[0].Key != k {
			t.Errorf("got %+v, want one violation on %s", v, k)
		}
	})
}

func TestStore_Rebuild(t *testing.T) {
	e, _ := MustOpenStore(t)
	a, b := key(1, 100, 1), key(1, 200, 1)
	e.MustStock(t, a, 10)
	e.MustStock(t, b, 10)
	keep := e.MustReserve(t, cartReq("keep", line(100, 2, 1), line(200, 1, 1)))
	e.MustReserve(t, cartReq("drop", line(100, 3, 1)))
	e.MustReserve(t, cartReq("gone", line(200, 1, 1)))
	if _, err := e.Release(ctx, 1, "gone"); err != nil {
		t.Fatal(err)
	}

	holds, err := e.ActiveHolds(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var tokens []string
	for _, h := range holds {
		tokens = append(tokens, h.CartToken)
	}
	if want := []string{"drop", "keep"}; !reflect.DeepEqual(tokens, want) {
		t.Fatalf("active holds: got %v, want %v", tokens, want)
	}

	// The ledger moved on (a count the Redis path missed) and MySQL holds
	// only "keep" plus a cart Redis never saw.
	c := key(1, 300, 1)
	e.Ledger.SetOnHand(ctx, a, 20)
	e.Ledger.SetOnHand(ctx, c, 5)
	fresh := tandem.Reservation{CartToken: "fresh", ShopID: 1, Status: tandem.StatusReserved,
		ExpiresAt: e.Clock.Now().Add(time.Minute), Lines: []tandem.Line{{ItemID: 300, Quantity: 2, GroupID: 1}}}
	n, err := e.Rebuild(ctx, []tandem.Reservation{*keep, fresh})
	if err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Errorf("positions rewritten: got %d, want 3", n)
	}
	e.WantCounters(t, a, 20, 2, 18)
	e.WantCounters(t, b, 10, 1, 9)
	e.WantCounters(t, c, 5, 2, 3)
	e.WantStatus(t, 1, "drop", tandem.StatusExpired)
	e.WantStatus(t, 1, "gone", tandem.StatusReleased)
	e.WantStatus(t, 1, "fresh", tandem.StatusReserved)
	e.WantClean(t)

	t.Run("RetryMatchesRebuiltHold", func(t *testing.T) {
		res, err := e.Reserve(ctx, cartReq("fresh", line(300, 2, 1, 2)))
		if err != nil {
			t.Fatal(err)
		}
		if !res.Replayed {
			t.Errorf("replayed: got false, want true")
		}
		e.WantCounters(t, c, 5, 2, 3)
	})

	t.Run("RebuiltHoldClaims", func(t *testing.T) {
		if _, err := e.Claim(ctx, 1, "fresh"); err != nil {
			t.Fatal(err)
		}
		e.WantLedger(t, c, 3)
		e.WantCounters(t, c, 3, 0, 3)
	})

	t.Run("ErrInvalidHold", func(t *testing.T) {
		_, err := e.Rebuild(ctx, []tandem.Reservation{{CartToken: "x", ShopID: 1}})
		wantCode(t, err, tandem.EINVALID)
		e.WantCounters(t, a, 20, 2, 18)
	})
}

// A cart Redis holds that the other store claimed meanwhile (a mysql_only
// pod writes Redis no more) is sold: the rebuild marks it claimed, not
// expired, so that a repeated claim answers claimed once Redis answers the
// buyer again, and a convergence that settles the claim here changes no
// counter a second time.
func TestStore_RebuildClaimedElsewhere(t *testing.T) {
	e, _ := MustOpenStore(t)
	k := key(1, 100, 1)
	e.MustStock(t, k, 5)
	sold := e.MustReserve(t, cartReq("sold", line(100, 2, 1)))
	if applied, err := e.Ledger.DeductCart(ctx, 1, "sold", sold.Lines); err != nil || !applied {
		t.Fatalf("deduct: applied %v, err %v", applied, err)
	}
	if _, err := e.Rebuild(ctx, nil); err != nil {
		t.Fatal(err)
	}
	e.WantStatus(t, 1, "sold", tandem.StatusClaimed)
	e.WantCounters(t, k, 3, 0, 3)
	res, err := e.Claim(ctx, 1, "sold")
	if err != nil {
		t.Fatalf("repeated claim: %v", err)
	}
	if res.Status != tandem.StatusClaimed {
		t.Errorf("repeated claim: got %s, want claimed", res.Status)
	}
	if err := e.SettleClaim(ctx, *sold); err != nil {
		t.Fatal(err)
	}
	e.WantCounters(t, k, 3, 0, 3)
	e.WantLedger(t, k, 3)
	e.WantClean(t)
}

// cmdHook records the largest round trip (commands per pipeline or
// transaction) and every command name sent while it is installed.
type cmdHook struct {
	mu       sync.Mutex
	maxRound int
	names    map[string]bool
}

func (h *cmdHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *cmdHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.record([]redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}

func (h *cmdHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.record(cmds)
		return next(ctx, cmds)
	}
}

func (h *cmdHook) record(cmds []redis.Cmder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.maxRound = max(h.maxRound, len(cmds))
	for _, c := range cmds {
		h.names[c.Name()] = true
	}
}

// A shop's holds are listed in bounded round trips: a shop of a flash sale
// holds tens of thousands of carts, and one reply of them all held Redis
// and outlasted the client's read timeout (the backfill of a bench pod
// failed so: "list redis holds: i/o timeout").
func TestStore_ActiveHoldsInBatches(t *testing.T) {
	e, _ := MustOpenStore(t)
	big, small := key(1, 100, 1), key(2, 100, 1)
	e.Ledger.SetOnHand(ctx, big, 10_000)
	e.Ledger.SetOnHand(ctx, small, 10)
	var holds []tandem.Reservation
	exp := e.Clock.Now().Add(time.Minute)
	for i := range 3000 {
		holds = append(holds, tandem.Reservation{CartToken: fmt.Sprintf("c-%04d", i), ShopID: 1, Status: tandem.StatusReserved,
			ExpiresAt: exp, Lines: []tandem.Line{{ItemID: 100, Quantity: 1, GroupID: 1}}})
	}
	holds = append(holds, tandem.Reservation{CartToken: "s", ShopID: 2, Status: tandem.StatusReserved,
		ExpiresAt: exp, Lines: []tandem.Line{{ItemID: 100, Quantity: 2, GroupID: 1}}})
	if _, err := e.Rebuild(ctx, holds); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Release(ctx, 1, "c-0007"); err != nil {
		t.Fatal(err)
	}

	hook := &cmdHook{names: map[string]bool{}}
	e.RDB.(*redis.Client).AddHook(hook)
	got, err := e.ActiveHolds(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Delete(slices.Clone(holds), 7, 8)
	if len(got) != len(want) {
		t.Fatalf("got %d holds, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].ShopID != want[i].ShopID || got[i].CartToken != want[i].CartToken || !reflect.DeepEqual(got[i].Lines, want[i].Lines) ||
			!got[i].ExpiresAt.Equal(want[i].ExpiresAt.Truncate(time.Millisecond)) {
			t.Fatalf("hold %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	if hook.maxRound > 500 {
		t.Errorf("ActiveHolds: got a round trip of %d commands, want at most 500", hook.maxRound)
	}
	// Paced (the sweep's listing), the round trips rest in between and
	// read the same holds.
	if paced, err := e.ActiveHolds(tandem.WithPace(ctx, 0.5)); err != nil || !reflect.DeepEqual(paced, got) {
		t.Fatalf("paced ActiveHolds got %d holds, %v; want the %d of the listing at full speed", len(paced), err, len(got))
	}
	for _, name := range []string{"keys", "zrange", "multi"} {
		if hook.names[name] {
			t.Errorf("ActiveHolds: got a %s command, want none (the listing scans: ZSCAN, pipelined HMGET)", strings.ToUpper(name))
		}
	}

	// The invariant check reads each shop atomically, but not its carts
	// in the same round trip.
	hook.maxRound = 0
	e.WantClean(t)
	if hook.maxRound > 500 {
		t.Errorf("CheckInvariants: got a round trip of %d commands, want at most 500", hook.maxRound)
	}
}

// TestStore_CheckInvariantsBrokenCarts checks what the check finds in a
// shop's expiry set: a cart with no hash, and an ended cart.
func TestStore_CheckInvariantsBrokenCarts(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		breakIt    func(e *env) error
	}{
		{"NoHash", "cart in the expiry set has no cart hash", func(e *env) error {
			return e.RDB.Del(ctx, e.Prefix+"{1}:cart:c-1").Err()
		}},
		{"Ended", "cart in the expiry set is released", func(e *env) error {
			return e.RDB.HSet(ctx, e.Prefix+"{1}:cart:c-1", "status", "released").Err()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, _ := MustOpenStore(t)
			e.MustStock(t, key(1, 100, 1), 10)
			e.MustReserve(t, cartReq("c-1", line(100, 2, 1)))
			e.MustReserve(t, cartReq("c-2", line(100, 1, 1)))
			if err := tc.breakIt(e); err != nil {
				t.Fatal(err)
			}
			vs, err := e.CheckInvariants(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range vs {
				if v.CartToken == "c-1" && v.Message == tc.want {
					return
				}
			}
			t.Fatalf("got %+v, want c-1: %s", vs, tc.want)
		})
	}
}

// The check reads the carts before the MULTI that reads the counters: with
// reserves and releases running on one hot position meanwhile, it must
// find nothing broken (no false violation).
func TestStore_CheckInvariantsUnderTraffic(t *testing.T) {
	rdb, prefix := testenv.MustRedis(t)
	e := MustOpenStoreOn(t, rdb, prefix, memres.NewLedger(), newClock())
	hot := key(1, 100, 1)
	e.MustStock(t, hot, 1_000_000)
	for i := range 2000 {
		e.MustReserve(t, cartReq(fmt.Sprintf("old-%d", i), line(100, 1, 1)))
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				token := fmt.Sprintf("w%d-%d", w, i)
				if _, err := e.Reserve(ctx, cartReq(token, line(100, 1+int64(i%3), 1))); err != nil {
					t.Error(err)
					return
				}
				if i%2 == 0 {
					if _, err := e.Release(ctx, 1, token); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	for range 20 {
		vs, err := e.CheckInvariants(ctx)
		if err != nil {
			t.Error(err)
			break
		}
		if len(vs) != 0 {
			t.Errorf("got violations %+v under traffic, want none", vs)
			break
		}
	}
	close(stop)
	wg.Wait()
	e.WantClean(t)
}
