package web_test

import (
	"reflect"
	"testing"

	"github.com/tandemhq/tandem/web"
)

// reserveBodies are bodies on both sides of the reserve decoder's fast
// path: the plain ones it parses, and the ones it must leave to
// encoding/json.
var reserveBodies = []string{
	reserveBody,
	`{"cart_token":"c","shop_id":1,"lines":[{"inventory_item_id":1,"quantity":1,"group_ids":[1]}]}`,
	` { "cart_token" : "c-1" , "shop_id" : 12 , "ttl_seconds" : null , "lines" : [ ] } ` + "\n",
	`{"lines":[{},{"group_ids":[]}],"ttl_seconds":-0,"shop_id":-9223372036854775808}`,
	`{}`,
	`{"cart_token":"c","shop_id":1e400}`,
	`{"shop_id":1.0}`,
	`{"shop_id":01}`,
	`{"shop_id":9223372036854775808}`,
	`{"cart_token":"a\"b"}`,
	`{"cart_token":"café"}`,
	`{"CART_TOKEN":"c"}`,
	`{"cart_token":"a","cart_token":"b"}`,
	`{"lines":[{"quantity":1,"quantity":2}]}`,
	`{"lines":null}`,
	`{"lines":[{"group_ids":null}]}`,
	`{"shop_id":null}`,
	`{"unknown":1}`,
	`{"lines":[{"quantity":-0}]} {}`,
	`{"shop_id":1}x`,
	`{"shop_id":1,}`,
	`{"shop_id":"1"}`,
	`{"ttl_seconds":nul}`,
	`[]`,
	`null`,
	``,
	`{"shop_id":1`,
}

// TestReserveFastPath checks the reserve decoder's fast path against
// encoding/json: whenever it parses a body, the strict decoder gives the
// same value and no error.
func TestReserveFastPath(t *testing.T) {
	parsed := 0
	for _, body := range reserveBodies {
		if checkFastPath(t, []byte(body)) {
			parsed++
		}
	}
	if parsed < 4 {
		t.Errorf("got %d bodies on the fast path, want the 4 plain ones at least", parsed)
	}
}

// FuzzReserveFastPath is TestReserveFastPath on arbitrary bodies.
func FuzzReserveFastPath(f *testing.F) {
	for _, b := range reserveBodies {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkFastPath(t, body) })
}

func checkFastPath(t *testing.T, body []byte) bool {
	t.Helper()
	fast, ok := web.ParseReserveFast(body)
	if !ok {
		return false
	}
	strict, err := web.DecodeReserveStrict(body)
	if err != nil {
		t.Errorf("body %q: the fast path parsed %+v, encoding/json refused it: %v", body, fast, err)
	} else if !reflect.DeepEqual(fast, strict) {
		t.Errorf("body %q: fast path %+v, encoding/json %+v", body, fast, strict)
	}
	return true
}
