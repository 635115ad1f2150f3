package redisres_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/internal/memres"
	"github.com/tandemhq/tandem/redisres"
)

// clock is a settable time source for Store.Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock {
	return &clock{t: time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)}
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// env is an open store with its ledger, clock and registry.
type env struct {
	*redisres.Store
	Ledger   *memres.Ledger
	Clock    *clock
	Registry *prometheus.Registry
	RDB      redis.UniversalClient
	Prefix   string
}

// MustOpenStore opens a store on a fresh miniredis.
func MustOpenStore(tb testing.TB) (*env, *miniredis.Miniredis) {
	tb.Helper()
	mr := miniredis.RunT(tb)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	tb.Cleanup(func() { rdb.Close() })
	return MustOpenStoreOn(tb, rdb, "t:", memres.NewLedger(), newClock()), mr
}

// MustOpenStoreOn opens a store on rdb under prefix with the given ledger
// and clock, closed when tb ends.
func MustOpenStoreOn(tb testing.TB, rdb redis.UniversalClient, prefix string, ledger *memres.Ledger, c *clock) *env {
	tb.Helper()
	reg := prometheus.NewRegistry()
	s := redisres.NewStore(rdb, ledger)
	s.Prefix = prefix
	s.Now = c.Now
	s.Registerer = reg
	if err := s.Open(ctx); err != nil {
		tb.Fatalf("open store: %v", err)
	}
	tb.Cleanup(func() { s.Close() })
	return &env{Store: s, Ledger: ledger, Clock: c, Registry: reg, RDB: rdb, Prefix: prefix}
}

func key(shop, item, group int64) tandem.Key {
	return tandem.Key{ShopID: shop, ItemID: item, GroupID: group}
}

func line(item, qty int64, groups ...int64) tandem.LineRequest {
	return tandem.LineRequest{ItemID: item, Quantity: qty, GroupIDs: groups}
}

func cartReq(token string, lines ...tandem.LineRequest) tandem.ReserveRequest {
	return tandem.ReserveRequest{CartToken: token, ShopID: 1, Lines: lines}
}

// MustStock sets on_hand of k through the store.
func (e *env) MustStock(tb testing.TB, k tandem.Key, onHand int64) {
	tb.Helper()
	if _, err := e.SetOnHand(context.Background(), k, onHand); err != nil {
		tb.Fatalf("stock %s: %v", k, err)
	}
}

// MustReserve reserves req and fails tb on error.
func (e *env) MustReserve(tb testing.TB, req tandem.ReserveRequest) *tandem.Reservation {
	tb.Helper()
	res, err := e.Reserve(context.Background(), req)
	if err != nil {
		tb.Fatalf("reserve %s: %v", req.CartToken, err)
	}
	return res
}

// WantCounters checks k's counters.
func (e *env) WantCounters(tb testing.TB, k tandem.Key, onHand, reserved, available int64) {
	tb.Helper()
	c, err := e.Counters(context.Background(), k)
	if err != nil {
		tb.Fatalf("counters %s: %v", k, err)
	}
	if c.OnHand != onHand || c.Reserved != reserved || c.Available != available {
		tb.Errorf("counters %s: got on_hand=%d reserved=%d available=%d, want %d/%d/%d",
			k, c.OnHand, c.Reserved, c.Available, onHand, reserved, available)
	}
}

// WantLedger checks k's on_hand in the ledger.
func (e *env) WantLedger(tb testing.TB, k tandem.Key, want int64) {
	tb.Helper()
	got, err := e.Ledger.OnHand(context.Background(), k)
	if err != nil {
		tb.Fatal(err)
	}
	if got != want {
		tb.Errorf("ledger on_hand %s: got %d, want %d", k, got, want)
	}
}

// WantClean checks that the store reports no broken invariant.
func (e *env) WantClean(tb testing.TB) {
	tb.Helper()
	v, err := e.CheckInvariants(context.Background())
	if err != nil {
		tb.Fatalf("check invariants: %v", err)
	}
	if len(v) != 0 {
		tb.Errorf("check invariants: got %d violations %+v, want none", len(v), v)
	}
}

// WantStatus checks the cart's status as Get reports it.
func (e *env) WantStatus(tb testing.TB, shop int64, token string, want tandem.Status) {
	tb.Helper()
	res, err := e.Get(context.Background(), shop, token)
	if err != nil {
		tb.Fatalf("get %s: %v", token, err)
	}
	if res.Status != want {
		tb.Errorf("status of %s: got %s, want %s", token, res.Status, want)
	}
}

func wantCode(tb testing.TB, err error, code string) {
	tb.Helper()
	if got := tandem.ErrorCode(err); got != code {
		tb.Fatalf("error code: got %q (%v), want %q", got, err, code)
	}
}
