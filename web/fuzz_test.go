package web_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/web"
)

// knownCodes are the error codes of the contract.
var knownCodes = map[string]bool{
	tandem.EINVALID: true, tandem.EUNAUTHORIZED: true, tandem.ENOTFOUND: true,
	tandem.EUNKNOWNSHOP: true, tandem.EUNKNOWNPOD: true, tandem.EINSUFFICIENT: true,
	tandem.ECONFLICT: true, tandem.ETRANSITIONREFUSED: true, tandem.EALREADYCLAIMED: true,
	tandem.EGONE: true, tandem.EPAYLOADTOOLARGE: true, tandem.EUNSUPPORTEDMEDIATYPE: true,
	tandem.EUNAVAILABLE: true, tandem.EINTERNAL: true,
}

// FuzzReserveDecode sends arbitrary bodies to POST /v1/reservations: the
// handler never panics, every non-2xx answer is the error JSON with a
// known code and its status, and the service only sees valid requests.
func FuzzReserveDecode(f *testing.F) {
	f.Add([]byte(reserveBody))
	f.Add([]byte(`{"cart_token":"c","shop_id":1,"lines":[{"inventory_item_id":1,"quantity":1,"group_ids":[1]}]}`))
	f.Add([]byte(`{"cart_token":"c","shop_id":1e400}`))
	f.Add([]byte(`{"lines":[{"quantity":-0}]} {}`))
	f.Add([]byte(``))
	f.Add([]byte(`null`))
	h, svc := newCheckout(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		r := httptest.NewRequest(http.MethodPost, "/v1/reservations", strings.NewReader(string(body)))
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		switch {
		case w.Code == http.StatusCreated || w.Code == http.StatusOK:
			req, ok := svc.Last().(tandem.ReserveRequest)
			if !ok {
				t.Fatalf("got %d without a Reserve call", w.Code)
			}
			if err := req.Validate(); err != nil {
				t.Fatalf("got %d for a request that fails validation: %v", w.Code, err)
			}
		default:
			var e errorJSON
			if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil {
				t.Fatalf("got %d with a body that is not JSON %q: %v", w.Code, w.Body.String(), err)
			}
			if !knownCodes[e.Error.Code] || web.ErrorStatusCode(e.Error.Code) != w.Code {
				t.Fatalf("got %d with code %q, want a known code and its status", w.Code, e.Error.Code)
			}
			if e.Error.Code == tandem.EINTERNAL {
				t.Fatalf("got internal for body %q, want a client error", body)
			}
		}
	})
}
