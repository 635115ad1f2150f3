package mysqlres_test

import (
	"context"
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
