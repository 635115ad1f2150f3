package mysqlres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
)

// The dirty-cart log keeps a cart's Suspect mark: a later mark with the
// same authority that is not suspect leaves it suspect, a mark with another
// authority replaces it, and the list and the lookup both return it.
func TestDirtyLog_Suspect(t *testing.T) {
	ctx := context.Background()
	s := MustOpenStore(t)
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	mark := func(token, authority string, suspect bool, n int) {
		t.Helper()
		c := tandem.DirtyCart{ShopID: 1, CartToken: token, Authority: authority, Suspect: suspect,
			Since: at, MarkedAt: at.Add(time.Duration(n) * time.Second)}
		if err := s.MarkDirty(ctx, []tandem.DirtyCart{c}); err != nil {
			t.Fatal(err)
		}
	}
	want := func(token, authority string, suspect bool) {
		t.Helper()
		c, err := s.LookupDirty(ctx, 1, token)
		if err != nil || c == nil {
			t.Fatalf("LookupDirty(%s): got %+v, %v", token, c, err)
		}
		if c.Authority != authority || c.Suspect != suspect {
			t.Errorf("LookupDirty(%s): got authority %s, suspect %t; want %s, %t", token, c.Authority, c.Suspect, authority, suspect)
		}
		list, err := s.DirtyCarts(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range list {
			if l.CartToken == token && (l.Authority != authority || l.Suspect != suspect) {
				t.Errorf("DirtyCarts: %s has authority %s, suspect %t; want %s, %t", token, l.Authority, l.Suspect, authority, suspect)
			}
		}
	}

	mark("failed-call", tandem.StoreRedis, false, 1)
	want("failed-call", tandem.StoreRedis, false)

	mark("refused", tandem.StoreRedis, true, 1)
	mark("refused", tandem.StoreRedis, false, 2) // a later failed call
	want("refused", tandem.StoreRedis, true)

	mark("refused", tandem.StoreMySQL, false, 3) // the authority changed
	want("refused", tandem.StoreMySQL, false)
	mark("refused", tandem.StoreMySQL, true, 4)
	want("refused", tandem.StoreMySQL, true)
}

// A backlog of marks and clears larger than one statement's chunk goes in
// and out whole; a clear removes only a mark made no later than the one
// it names, so a cart marked again after its convergence stays dirty.
func TestDirtyLog_MarkAndClearInChunks(t *testing.T) {
	ctx := context.Background()
	s := MustOpenStore(t)
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	var carts []tandem.DirtyCart
	for i := range 1234 {
		carts = append(carts, tandem.DirtyCart{ShopID: int64(1 + i%7), CartToken: fmt.Sprintf("c-%d", i),
			Authority: tandem.StoreRedis, Since: at, MarkedAt: at})
	}
	if err := s.MarkDirty(ctx, carts); err != nil {
		t.Fatal(err)
	}
	if got, err := s.DirtyCarts(ctx, 10_000); err != nil || len(got) != len(carts) {
		t.Fatalf("DirtyCarts after marking %d: got %d, %v", len(carts), len(got), err)
	}
	// c-5 is marked again after the convergence the clear reports.
	again := carts[5]
	again.MarkedAt = at.Add(time.Second)
	if err := s.MarkDirty(ctx, []tandem.DirtyCart{again}); err != nil {
		t.Fatal(err)
	}
	if err := s.ClearDirty(ctx, carts); err != nil {
		t.Fatal(err)
	}
	got, err := s.DirtyCarts(ctx, 10_000)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].CartToken != again.CartToken || !got[0].MarkedAt.Equal(again.MarkedAt) {
		t.Errorf("DirtyCarts after clearing every cart as of its first mark: got %+v, want only %s marked again", got, again.CartToken)
	}
}
