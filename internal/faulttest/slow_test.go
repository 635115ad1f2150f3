package faulttest_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/goleak"

	"github.com/tandemhq/tandem"
)

// inflightStore counts the reserve, claim and release calls running on a
// store at once, and the most it has seen, with the shadow's discard, end
// and place; it forwards every other method of tandem.ShadowStore.
type inflightStore struct {
	tandem.ShadowStore
	now, peak atomic.Int64
	calls     atomic.Int64
}

var _ tandem.ShadowStore = (*inflightStore)(nil)

func (s *inflightStore) enter() func() {
	s.calls.Add(1)
	n := s.now.Add(1)
	for {
		p := s.peak.Load()
		if n <= p || s.peak.CompareAndSwap(p, n) {
			break
		}
	}
	return func() { s.now.Add(-1) }
}

func (s *inflightStore) Discard(ctx context.Context, shopID int64, token string) error {
	defer s.enter()()
	return s.ShadowStore.Discard(ctx, shopID, token)
}

func (s *inflightStore) End(ctx context.Context, ended tandem.Reservation) error {
	defer s.enter()()
	return s.ShadowStore.End(ctx, ended)
}

func (s *inflightStore) Place(ctx context.Context, hold tandem.Reservation) (*tandem.Reservation, error) {
	defer s.enter()()
	return s.ShadowStore.Place(ctx, hold)
}

func (s *inflightStore) Reserve(ctx context.Context, req tandem.ReserveRequest) (*tandem.Reservation, error) {
	defer s.enter()()
	return s.ShadowStore.Reserve(ctx, req)
}

func (s *inflightStore) Claim(ctx context.Context, shopID int64, token string) (*tandem.Reservation, error) {
	defer s.enter()()
	return s.ShadowStore.Claim(ctx, shopID, token)
}

func (s *inflightStore) Release(ctx context.Context, shopID int64, token string) (*tandem.Reservation, error) {
	defer s.enter()()
	return s.ShadowStore.Release(ctx, shopID, token)
}

// mustQuiesceMySQL waits (at most noHang) until no connection of the pod's
// database runs a statement.
func (p *faultPod) mustQuiesceMySQL(t *testing.T) {
	t.Helper()
	db, err := sql.Open("mysql", p.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	cfg, _ := mysql.ParseDSN(p.dsn)
	for end := time.Now().Add(noHang); ; {
		var busy int
		err := db.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = ? AND COMMAND <> 'Sleep' AND ID <> CONNECTION_ID()", cfg.DBName).Scan(&busy)
		if err != nil {
			t.Fatal(err)
		}
		if busy == 0 {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("%d statements still running on %s after %s", busy, cfg.DBName, noHang)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSlowShadow makes the shadow store slow in latency spikes from 100ms
// to 2s (one way, so a round trip costs twice that) while buyers check out
// concurrently: every buyer call returns (bounded by noHang, not timed),
// the shadow never runs more than MaxInflight operations at once, what it
// cannot run is recorded as dropped, what it cannot finish as timed out,
// the pod recovers with a rebuild, and once everything is closed no
// goroutine is left behind.
func TestSlowShadow(t *testing.T) {
	for _, tc := range []struct {
		name string
		mode tandem.Mode
	}{
		{"ShadowModeSlowMySQL", tandem.ModeShadow},
		{"MySQLModeSlowRedis", tandem.ModeMySQL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Registered first, so it runs after every cleanup of the pod
			// (router, stores, clients, proxies, test database and keys).
			// Goroutines alive before the test (earlier tests' idle ones
			// winding down) are not this test's.
			ignore := goleak.IgnoreCurrent()
			t.Cleanup(func() {
				// Closed connections' goroutines (proxy pipes holding a
				// delayed chunk, driver watchers) take a moment to notice;
				// give them up to noHang, then report what is left.
				for end := time.Now().Add(noHang); goleak.Find(ignore) != nil && time.Now().Before(end); {
					time.Sleep(100 * time.Millisecond)
				}
				goleak.VerifyNone(t, ignore)
			})

			const maxInflight = 6
			slow := &inflightStore{}
			shadowName := tandem.StoreMySQL
			if tc.mode == tandem.ModeMySQL {
				shadowName = tandem.StoreRedis
			}
			wrap := func(s tandem.ShadowStore) tandem.ShadowStore {
				if s.Name() != shadowName {
					return s
				}
				slow.ShadowStore = s
				return slow
			}
			p := mustOpenFaultPod(t, tc.mode, podOptions{maxInflight: maxInflight, wrap: wrap})
			items := []int64{1, 2, 3, 4}
			p.mustStock(t, 100, items...)
			proxy := p.myProxy
			if tc.mode == tandem.ModeMySQL {
				proxy = p.rdProxy
			}

			before := p.rec.len()
			ops := 0
			for phase, d := range []time.Duration{100 * time.Millisecond, 2 * time.Second, 500 * time.Millisecond} {
				proxy.SetLatency(d)
				var wg sync.WaitGroup
				var failed atomic.Int64
				for i := range 16 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						tok := fmt.Sprintf("s%d-%d", phase, i)
						if _, err := p.reserve(t, tok, line(items[i%len(items)], 1)); err != nil {
							t.Errorf("reserve %s with a slow shadow: %v", tok, err)
							failed.Add(1)
							return
						}
						if i%2 == 0 {
							if _, err := p.release(t, tok); err != nil {
								t.Errorf("release %s with a slow shadow: %v", tok, err)
							}
						}
					}()
				}
				wg.Wait()
				ops += 16 + 8 - int(failed.Load())
				p.Wait() // the phase's shadow work ran under its latency
				if peak := slow.peak.Load(); peak > maxInflight {
					t.Errorf("latency %s: got %d shadow operations at once, want <= %d", d, peak, maxInflight)
				}
			}
			proxy.SetLatency(0)
			p.Wait()
			// A shadow call the router gave up on may still sit in the
			// proxy's delay queue and reach the server later: the MySQL
			// engine sends a whole transaction, COMMIT included, in one
			// packet, so it commits without its client. Cut those
			// connections and let the server finish what it already read,
			// so that the rebuild below sees a quiet store.
			proxy.Cut()
			p.mustQuiesceMySQL(t)

			comps := p.rec.since(before)
			if len(comps) != ops {
				t.Errorf("got %d comparisons, want %d (one per buyer operation)", len(comps), ops)
			}
			kinds := map[tandem.DivergenceKind]int{}
			var slowest time.Duration
			for _, c := range comps {
				kinds[c.Kind]++
				slowest = max(slowest, c.Shadow.Latency)
			}
			t.Logf("comparisons by kind: %v; slowest shadow call %s", kinds, slowest)
			if kinds[tandem.KindShadowDropped] == 0 {
				t.Errorf("got no shadow_dropped with %d concurrent carts over a cap of %d: %v", 16, maxInflight, kinds)
			}
			if kinds[tandem.KindShadowTimeout]+kinds[tandem.KindShadowError] == 0 {
				t.Errorf("got no shadow_timeout or shadow_error with 2s of latency: %v", kinds)
			}
			if peak := slow.peak.Load(); peak > maxInflight {
				t.Errorf("got %d shadow operations at once, want <= %d", peak, maxInflight)
			}

			// The shadow missed work (dropped, timed out); once it answers
			// again the pod converges by itself: no rebuild.
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if _, err := p.Converged(ctx); err != nil {
				t.Fatal(err)
			}
			p.mustAuditClean(t)
		})
	}
}
