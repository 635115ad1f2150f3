package web_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/web"
)

// benchCheckout answers every reserve at once with the hold asked for, so
// that a benchmark measures the HTTP path alone.
type benchCheckout struct{ tandem.CheckoutService }

func (benchCheckout) Reserve(ctx context.Context, req tandem.ReserveRequest) (*tandem.Reservation, error) {
	lines := make([]tandem.Line, len(req.Lines))
	for i, l := range req.Lines {
		lines[i] = tandem.Line{ItemID: l.ItemID, Quantity: l.Quantity, GroupID: l.GroupIDs[0]}
	}
	return &tandem.Reservation{CartToken: req.CartToken, ShopID: req.ShopID, Status: tandem.StatusReserved,
		ExpiresAt: time.Unix(1_900_000_000, 0), Lines: lines, Pod: "pod-a", SourceOfTruth: tandem.StoreRedis}, nil
}

// BenchmarkCheckoutReserve is the cost of one POST /v1/reservations through
// the checkout API's whole handler (request id, metrics, access log check,
// bearer token, in-flight limit, decoding, validation, JSON answer) on a
// service that answers at once.
func BenchmarkCheckoutReserve(b *testing.B) {
	srv := &web.Server{Checkout: benchCheckout{}, APIToken: "t0ken", Metrics: web.NewMetrics(prometheus.NewRegistry())}
	h := srv.Handler()
	const body = `{"cart_token":"cart-1","shop_id":1,"ttl_seconds":600,"lines":[{"inventory_item_id":100,"quantity":2,"group_ids":[1,2]}]}`
	b.ReportAllocs()
	defer reportCPU(b)()
	for b.Loop() {
		r := httptest.NewRequest(http.MethodPost, "/v1/reservations", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Authorization", "Bearer t0ken")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusCreated {
			b.Fatalf("got status %d, want 201: %s", w.Code, w.Body)
		}
	}
}
