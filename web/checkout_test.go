package web_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/web"
)

const reserveBody = `{"cart_token":"c-123","shop_id":1,"ttl_seconds":600,
 "lines":[{"inventory_item_id":100,"quantity":2,"group_ids":[1,2]}]}`

func TestReserve(t *testing.T) {
	t.Run("Created", func(t *testing.T) {
		h, f := newCheckout(t)
		w := do(t, h, req{method: "POST", target: "/v1/reservations", body: reserveBody})
		got := mustJSON(t, w, http.StatusCreated)
		want := map[string]any{
			"cart_token": "c-123", "shop_id": 1.0, "status": "reserved", "pod": "pod-a",
			"source_of_truth": "redis", "expires_at": "2026-11-30T10:10:00Z", "replayed": false,
			"lines": []any{map[string]any{"inventory_item_id": 100.0, "quantity": 2.0, "group_id": 1.0}},
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("got %v, want %v", got, want)
		}
		wantReq := tandem.ReserveRequest{CartToken: "c-123", ShopID: 1, TTL: 600 * time.Second,
			Lines: []tandem.LineRequest{{ItemID: 100, Quantity: 2, GroupIDs: []int64{1, 2}}}}
		if req := f.Last(); !reflect.DeepEqual(req, wantReq) {
			t.Fatalf("got request %+v, want %+v", req, wantReq)
		}
	})
	t.Run("ReplayedIs200", func(t *testing.T) {
		h, f := newCheckout(t)
		f.Replayed = true
		w := do(t, h, req{method: "POST", target: "/v1/reservations", body: reserveBody})
		if got := mustJSON(t, w, http.StatusOK); got["status"] != "reserved" {
			t.Fatalf("got status %v, want reserved", got["status"])
		}
	})
	t.Run("DefaultTTLIsZero", func(t *testing.T) {
		h, f := newCheckout(t)
		body := `{"cart_token":"c-1","shop_id":1,"lines":[{"inventory_item_id":1,"quantity":1,"group_ids":[1]}]}`
		mustJSON(t, do(t, h, req{method: "POST", target: "/v1/reservations", body: body}), http.StatusCreated)
		if got := f.Last().(tandem.ReserveRequest).TTL; got != 0 {
			t.Fatalf("got TTL %v, want 0 (the store's default)", got)
		}
	})
	t.Run("ContentTypeWithCharset", func(t *testing.T) {
		h, _ := newCheckout(t)
		w := do(t, h, req{method: "POST", target: "/v1/reservations", body: reserveBody,
			contentType: "application/json; charset=utf-8"})
		mustJSON(t, w, http.StatusCreated)
	})
	t.Run("ErrInsufficientKeepsDetails", func(t *testing.T) {
		h, f := newCheckout(t)
		f.Err = tandem.Errorf(tandem.EINSUFFICIENT, "item 100 has 1 sellable unit, 2 requested").
			WithDetail("inventory_item_id", 100)
		e := mustError(t, do(t, h, req{method: "POST", target: "/v1/reservations", body: reserveBody}),
			http.StatusConflict, tandem.EINSUFFICIENT)
		if got := e.Error.Details["inventory_item_id"]; got != 100.0 {
			t.Fatalf("got details.inventory_item_id %v, want 100", got)
		}
		if e.Error.Message != "item 100 has 1 sellable unit, 2 requested" {
			t.Fatalf("got message %q, want the service's", e.Error.Message)
		}
	})
}

func TestCartRoutes(t *testing.T) {
	for _, tc := range []struct {
		name, method, target, call string
		status                     tandem.Status
	}{
		{"Claim", "POST", "/v1/reservations/c-123/claim?shop_id=1", "Claim", tandem.StatusClaimed},
		{"Release", "DELETE", "/v1/reservations/c-123?shop_id=1", "Release", tandem.StatusReleased},
		{"Get", "GET", "/v1/reservations/c-123?shop_id=1", "Get", tandem.StatusReserved},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, f := newCheckout(t)
			got := mustJSON(t, do(t, h, req{method: tc.method, target: tc.target}), http.StatusOK)
			if got["status"] != string(tc.status) || got["cart_token"] != "c-123" || got["shop_id"] != 1.0 {
				t.Fatalf("got %v, want status %s of c-123 in shop 1", got, tc.status)
			}
			for _, field := range []string{"pod", "source_of_truth", "expires_at", "lines"} {
				if _, ok := got[field]; !ok {
					t.Fatalf("got no %s in %v, want it", field, got)
				}
			}
			if names := f.Names(); len(names) != 1 || names[0] != tc.call {
				t.Fatalf("got calls %v, want [%s]", names, tc.call)
			}
			if c := f.Last().(cartCall); c != (cartCall{ShopID: 1, CartToken: "c-123"}) {
				t.Fatalf("got %+v, want shop 1 cart c-123", c)
			}
		})
	}
	t.Run("ErrGone", func(t *testing.T) {
		h, f := newCheckout(t)
		f.Err = tandem.Errorf(tandem.EGONE, "reservation expired")
		mustError(t, do(t, h, req{method: "POST", target: "/v1/reservations/c-1/claim?shop_id=1"}), http.StatusGone, tandem.EGONE)
	})
	t.Run("ErrAlreadyClaimed", func(t *testing.T) {
		h, f := newCheckout(t)
		f.Err = tandem.Errorf(tandem.EALREADYCLAIMED, "claimed")
		mustError(t, do(t, h, req{method: "DELETE", target: "/v1/reservations/c-1?shop_id=1"}), http.StatusConflict, tandem.EALREADYCLAIMED)
	})
}

func TestInventory(t *testing.T) {
	t.Run("Put", func(t *testing.T) {
		h, f := newCheckout(t)
		w := do(t, h, req{method: "PUT", target: "/v1/inventory/1/100/1", body: `{"on_hand": 50}`})
		got := mustJSON(t, w, http.StatusOK)
		if got["on_hand"] != 50.0 || got["available"] != 48.0 || got["pod"] != "pod-a" {
			t.Fatalf("got %v, want on_hand 50, available 48 in pod-a", got)
		}
		if c := f.Last().(onHandCall); c != (onHandCall{Key: tandem.Key{ShopID: 1, ItemID: 100, GroupID: 1}, OnHand: 50}) {
			t.Fatalf("got %+v, want 1/100/1 to 50", c)
		}
	})
	t.Run("PutZero", func(t *testing.T) {
		h, f := newCheckout(t)
		mustJSON(t, do(t, h, req{method: "PUT", target: "/v1/inventory/1/100/1", body: `{"on_hand": 0}`}), http.StatusOK)
		if c := f.Last().(onHandCall); c.OnHand != 0 {
			t.Fatalf("got on_hand %d, want 0", c.OnHand)
		}
	})
	t.Run("PutMax", func(t *testing.T) {
		h, _ := newCheckout(t)
		mustJSON(t, do(t, h, req{method: "PUT", target: "/v1/inventory/1/100/1", body: `{"on_hand": 10000000}`}), http.StatusOK)
	})
	t.Run("Get", func(t *testing.T) {
		h, f := newCheckout(t)
		got := mustJSON(t, do(t, h, req{method: "GET", target: "/v1/inventory/1/100/1"}), http.StatusOK)
		stores, _ := got["stores"].(map[string]any)
		if got["shop_id"] != 1.0 || got["inventory_item_id"] != 100.0 || got["group_id"] != 1.0 || len(stores) != 2 {
			t.Fatalf("got %v, want position 1/100/1 with two stores", got)
		}
		if k := f.Last().(tandem.Key); k != (tandem.Key{ShopID: 1, ItemID: 100, GroupID: 1}) {
			t.Fatalf("got key %v, want 1/100/1", k)
		}
	})
	t.Run("ErrConflictBelowHeld", func(t *testing.T) {
		h, f := newCheckout(t)
		f.Err = tandem.Errorf(tandem.ECONFLICT, "on_hand 1 is below the 2 units held")
		mustError(t, do(t, h, req{method: "PUT", target: "/v1/inventory/1/100/1", body: `{"on_hand": 1}`}), http.StatusConflict, tandem.ECONFLICT)
	})
}

// TestErrorStatus maps every code of the contract to its status, through
// the checkout API.
func TestErrorStatus(t *testing.T) {
	for code, status := range map[string]int{
		tandem.EINVALID:              400,
		tandem.EUNAUTHORIZED:         401,
		tandem.ENOTFOUND:             404,
		tandem.EUNKNOWNSHOP:          404,
		tandem.EUNKNOWNPOD:           404,
		tandem.EINSUFFICIENT:         409,
		tandem.ECONFLICT:             409,
		tandem.ETRANSITIONREFUSED:    409,
		tandem.EALREADYCLAIMED:       409,
		tandem.EGONE:                 410,
		tandem.EPAYLOADTOOLARGE:      413,
		tandem.EUNSUPPORTEDMEDIATYPE: 415,
		tandem.EUNAVAILABLE:          503,
		tandem.EINTERNAL:             500,
	} {
		t.Run(code, func(t *testing.T) {
			if got := web.ErrorStatusCode(code); got != status {
				t.Fatalf("got ErrorStatusCode %d, want %d", got, status)
			}
			h, f := newCheckout(t)
			f.Err = fmt.Errorf("get: %w", tandem.Errorf(code, "the %s message", code))
			// The fake answers with every code, which GET need not document.
			e := mustError(t, do(t, h, req{method: "GET", target: "/v1/reservations/c-1?shop_id=1", anyStatus: true}), status, code)
			if code != tandem.EINTERNAL && e.Error.Message != "the "+code+" message" {
				t.Fatalf("got message %q, want the service's", e.Error.Message)
			}
		})
	}
	t.Run("UnknownCodeIsInternal", func(t *testing.T) {
		h, f := newCheckout(t)
		f.Err = tandem.Errorf("made_up", "secret detail")
		e := mustError(t, do(t, h, req{method: "GET", target: "/v1/reservations/c-1?shop_id=1"}), 500, tandem.EINTERNAL)
		if strings.Contains(e.Error.Message, "secret") {
			t.Fatalf("got message %q, want a generic one", e.Error.Message)
		}
	})
	t.Run("DeadlineIsUnavailable", func(t *testing.T) {
		h, f := newCheckout(t)
		f.Err = fmt.Errorf("redis: %w", context.DeadlineExceeded)
		mustError(t, do(t, h, req{method: "GET", target: "/v1/reservations/c-1?shop_id=1"}), 503, tandem.EUNAVAILABLE)
	})
}

func TestInternalError(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	h, f := newCheckout(t, func(s *web.Server) { s.Logger = zap.New(core) })
	f.Err = errors.New("dial tcp 10.0.0.1:3306: password=hunter2 refused")
	w := do(t, h, req{method: "GET", target: "/v1/reservations/c-1?shop_id=1", token: "x",
		header: map[string]string{"X-Request-Id": "req-42"}})
	e := mustError(t, w, http.StatusInternalServerError, tandem.EINTERNAL)
	if strings.Contains(w.Body.String(), "hunter2") || e.Error.Message != "internal error" {
		t.Fatalf("got message %q, want a generic one", e.Error.Message)
	}
	errs := logs.FilterLevelExact(zapcore.ErrorLevel).All()
	if len(errs) != 1 {
		t.Fatalf("got %d error logs, want 1", len(errs))
	}
	if got := errs[0].ContextMap()["request_id"]; got != "req-42" {
		t.Fatalf("got logged request_id %v, want req-42", got)
	}
	for _, entry := range logs.All() {
		for k, v := range entry.ContextMap() {
			if strings.Contains(fmt.Sprint(v), "Bearer") || strings.EqualFold(k, "authorization") {
				t.Fatalf("got %s=%v in the logs, want no authorization header logged", k, v)
			}
		}
	}

	t.Run("ClientErrorsAreNotLoggedAsErrors", func(t *testing.T) {
		core, logs := observer.New(zapcore.DebugLevel)
		h, f := newCheckout(t, func(s *web.Server) { s.Logger = zap.New(core) })
		f.Err = tandem.Errorf(tandem.ENOTFOUND, "never reserved")
		mustError(t, do(t, h, req{method: "GET", target: "/v1/reservations/c-1?shop_id=1"}), 404, tandem.ENOTFOUND)
		mustError(t, do(t, h, req{method: "GET", target: "/v1/reservations/c-1"}), 400, tandem.EINVALID)
		if n := logs.FilterLevelExact(zapcore.ErrorLevel).Len(); n != 0 {
			t.Fatalf("got %d error logs, want 0", n)
		}
	})
}

func TestPanicIsJSON500(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	h, f := newCheckout(t, func(s *web.Server) { s.Logger = zap.New(core) })
	f.Panic = true
	w := do(t, h, req{method: "POST", target: "/v1/reservations", body: reserveBody})
	mustError(t, w, http.StatusInternalServerError, tandem.EINTERNAL)
	if n := logs.FilterMessage("panic serving request").Len(); n != 1 {
		t.Fatalf("got %d panic logs, want 1", n)
	}
}

func TestRequestID(t *testing.T) {
	h, _ := newCheckout(t)
	t.Run("Echoed", func(t *testing.T) {
		w := do(t, h, req{method: "GET", target: "/v1/reservations/c-1?shop_id=1",
			header: map[string]string{"X-Request-Id": "abc-123"}})
		if got := w.Header().Get("X-Request-Id"); got != "abc-123" {
			t.Fatalf("got X-Request-Id %q, want abc-123", got)
		}
	})
	t.Run("Generated", func(t *testing.T) {
		w := do(t, h, req{method: "GET", target: "/v1/reservations/c-1?shop_id=1"})
		if got := w.Header().Get("X-Request-Id"); got == "" {
			t.Fatalf("got no X-Request-Id, want a generated one")
		}
	})
	t.Run("HostileReplaced", func(t *testing.T) {
		w := do(t, h, req{method: "GET", target: "/v1/reservations/c-1?shop_id=1",
			header: map[string]string{"X-Request-Id": "a\tb{\"level\":\"error\"}"}})
		if got := w.Header().Get("X-Request-Id"); got == "" || strings.ContainsAny(got, "\t{\"") {
			t.Fatalf("got X-Request-Id %q, want a generated plain one", got)
		}
	})
}

func TestAPIToken(t *testing.T) {
	h, f := newCheckout(t, func(s *web.Server) { s.APIToken = apiToken })
	t.Run("Required", func(t *testing.T) {
		w := do(t, h, req{method: "POST", target: "/v1/reservations", body: reserveBody})
		mustError(t, w, http.StatusUnauthorized, tandem.EUNAUTHORIZED)
		if got := w.Header().Get("WWW-Authenticate"); !strings.HasPrefix(got, "Bearer") {
			t.Fatalf("got WWW-Authenticate %q, want Bearer", got)
		}
	})
	t.Run("Wrong", func(t *testing.T) {
		mustError(t, do(t, h, req{method: "GET", target: "/v1/inventory/1/1/1", token: apiToken + "x"}),
			http.StatusUnauthorized, tandem.EUNAUTHORIZED)
	})
	t.Run("Prefix", func(t *testing.T) {
		mustError(t, do(t, h, req{method: "GET", target: "/v1/inventory/1/1/1", token: apiToken[:4]}),
			http.StatusUnauthorized, tandem.EUNAUTHORIZED)
	})
	t.Run("WrongScheme", func(t *testing.T) {
		mustError(t, do(t, h, req{method: "GET", target: "/v1/inventory/1/1/1",
			header: map[string]string{"Authorization": "Basic " + apiToken}}), http.StatusUnauthorized, tandem.EUNAUTHORIZED)
	})
	if n := len(f.Names()); n != 0 {
		t.Fatalf("got %d calls without the token, want 0", n)
	}
	t.Run("OK", func(t *testing.T) {
		mustJSON(t, do(t, h, req{method: "GET", target: "/v1/inventory/1/1/1", token: apiToken}), http.StatusOK)
	})
	t.Run("EveryRoute", func(t *testing.T) {
		h, f := newCheckout(t, func(s *web.Server) { s.APIToken = apiToken })
		for _, rt := range web.Routes(h) {
			method, pattern, _ := strings.Cut(rt, " ")
			w := do(t, h, req{method: method, target: fillPattern(pattern) + "?shop_id=1", body: bodyFor(method)})
			mustError(t, w, http.StatusUnauthorized, tandem.EUNAUTHORIZED)
		}
		if n := len(f.Names()); n != 0 {
			t.Fatalf("got %d calls without the token, want 0", n)
		}
	})
}

// TestInFlightLimit fills the checkout API's only slot and checks that the
// next request is refused at once with 503 while a free API would serve it.
func TestInFlightLimit(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := web.NewMetrics(reg)
	h, f := newCheckout(t, func(s *web.Server) {
		s.MaxInFlight, s.MaxBacklog, s.Metrics = 1, -1, m
	})
	f.Block, f.Entered = make(chan struct{}), make(chan struct{}, 1)

	var wg sync.WaitGroup
	wg.Add(1)
	var first int
	go func() {
		defer wg.Done()
		first = do(t, h, req{method: "POST", target: "/v1/reservations", body: reserveBody}).Code
	}()
	<-f.Entered // the first request holds the slot

	w := do(t, h, req{method: "GET", target: "/v1/inventory/1/1/1"})
	mustError(t, w, http.StatusServiceUnavailable, tandem.EUNAVAILABLE)
	if got := w.Header().Get("Retry-After"); got == "" {
		t.Fatalf("got no Retry-After, want one")
	}
	if got := series(t, reg, "tandem_http_shed_requests_total", "api"); !reflect.DeepEqual(got, map[string]float64{"checkout": 1}) {
		t.Fatalf("got shed requests %v, want checkout 1", got)
	}

	close(f.Block)
	wg.Wait()
	if first != http.StatusCreated {
		t.Fatalf("got first status %d, want 201", first)
	}
	mustJSON(t, do(t, h, req{method: "GET", target: "/v1/inventory/1/1/1"}), http.StatusOK)
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := web.NewMetrics(reg)
	h, f := newCheckout(t, func(s *web.Server) { s.Metrics = m })
	mustJSON(t, do(t, h, req{method: "POST", target: "/v1/reservations", body: reserveBody}), http.StatusCreated)
	f.Err = tandem.Errorf(tandem.EINSUFFICIENT, "sold out")
	mustError(t, do(t, h, req{method: "POST", target: "/v1/reservations", body: reserveBody}), http.StatusConflict, tandem.EINSUFFICIENT)

	got := series(t, reg, "tandem_reservations_total", "op", "outcome", "pod", "source_of_truth")
	want := map[string]float64{
		"reserve insufficient_inventory  ": 1,
		"reserve reserved pod-a redis":     1,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got reservations %v, want %v", got, want)
	}
	got = series(t, reg, "tandem_http_request_duration_seconds", "api", "method", "route", "status")
	want = map[string]float64{
		"checkout POST /v1/reservations 201": 1,
		"checkout POST /v1/reservations 409": 1,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got request counts %v, want %v", got, want)
	}
}

// series gathers a metric family from reg as "label values joined by
// spaces" -> value (the sample count for histograms).
func series(tb testing.TB, reg *prometheus.Registry, name string, labels ...string) map[string]float64 {
	tb.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, mt := range mf.GetMetric() {
			values := map[string]string{}
			for _, l := range mt.GetLabel() {
				values[l.GetName()] = l.GetValue()
			}
			key := make([]string, len(labels))
			for i, l := range labels {
				key[i] = values[l]
			}
			switch {
			case mt.GetCounter() != nil:
				out[strings.Join(key, " ")] = mt.GetCounter().GetValue()
			case mt.GetHistogram() != nil:
				out[strings.Join(key, " ")] = float64(mt.GetHistogram().GetSampleCount())
			case mt.GetGauge() != nil:
				out[strings.Join(key, " ")] = mt.GetGauge().GetValue()
			}
		}
	}
	return out
}
