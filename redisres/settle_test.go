package redisres_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/redisres"
)

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
		e.Clock.Add(redisres.DefaultTTL)
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
