package redisres_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/redisres"
)

func TestStore_Reserve(t *testing.T) {
	k := key(1, 100, 1)

	t.Run("OK", func(t *testing.T) {
		e, _ := MustOpenStore(t)
		e.MustStock(t, k, 10)
		res := e.MustReserve(t, cartReq("c-1", line(100, 2, 1)))
		if res.Status != tandem.StatusReserved || res.Replayed {
			t.Errorf("got status %s replayed %v, want reserved, not replayed", res.Status, res.Replayed)
		}
		if want := e.Clock.Now().Add(tandem.DefaultTTL); !res.ExpiresAt.Equal(want) {
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
			{"ExpiredNotReaped", func(e *env) error { e.Clock.Add(tandem.DefaultTTL); return nil }},
			{"ExpiredAndReaped", func(e *env) error {
				e.Clock.Add(tandem.DefaultTTL)
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
