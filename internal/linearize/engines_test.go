package linearize_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/dualwrite"
	"github.com/tandemhq/tandem/internal/linearize"
	"github.com/tandemhq/tandem/internal/testenv"
	"github.com/tandemhq/tandem/mysqlres"
	"github.com/tandemhq/tandem/redisres"
)

// modes is a settable dualwrite.ModeSource.
type modes struct{ m atomic.Value }

func (s *modes) Mode(string) tandem.Mode { return s.m.Load().(tandem.Mode) }
func (s *modes) set(m tandem.Mode)       { s.m.Store(m) }

// kill is a settable dualwrite.KillSwitch.
type kill struct{ on atomic.Bool }

func (k *kill) Engaged(string) bool { return k.on.Load() }

// stores are a pod's two engines: MySQL in a fresh database, Redis under a
// fresh key prefix, sharing the MySQL ledger.
type stores struct {
	mysql *mysqlres.Store
	redis *redisres.Store
}

func mustOpenStores(t *testing.T) stores {
	t.Helper()
	dsn := testenv.MustCreateDatabase(t)
	rdb, prefix := testenv.MustRedis(t)
	ms := mysqlres.NewStore(dsn)
	if err := ms.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ms.Close() })
	if err := ms.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	rs := redisres.NewStore(rdb, ms.Ledger())
	rs.Prefix = prefix
	if err := rs.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	return stores{mysql: ms, redis: rs}
}

// pod is a router over real stores, with a settable mode and kill switch.
type pod struct {
	stores
	router *dualwrite.Router
	modes  *modes
	kill   *kill
}

func mustOpenPod(t *testing.T, mode tandem.Mode) *pod {
	t.Helper()
	return openPod(t, mustOpenStores(t), mode)
}

// openPod routes over s in mode, at production settings.
func openPod(t *testing.T, s stores, mode tandem.Mode) *pod {
	t.Helper()
	p := &pod{stores: s, modes: &modes{}, kill: &kill{}}
	p.modes.set(mode)
	shops, err := tandem.ParseShopSet([]string{"1-1000"})
	if err != nil {
		t.Fatal(err)
	}
	// Production defaults: shadow.timeout 250ms, max_inflight 256. A shadow
	// that times out is converged afterwards, and the run ends by checking
	// that the stores agree hold by hold.
	p.router = dualwrite.NewRouter("pod-lin", shops, p.redis, p.mysql)
	p.router.Ledger = p.mysql.Ledger()
	p.router.Modes = p.modes
	p.router.Kill = p.kill
	p.router.Dirty = p.mysql
	if err := p.router.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.router.Close() })
	return p
}

// mustInvariants waits for the shadow and asserts both stores are
// internally consistent after the run and, at rest, agree with the ledger
// and with each other hold by hold (invariant 5).
func (p *pod) mustInvariants(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if _, err := p.router.Converged(ctx); err != nil {
		t.Error(err)
	}
	mustStoreInvariants(t, p.mysql, p.redis)
}

func mustStoreInvariants(t *testing.T, ss ...tandem.ReservationStore) {
	t.Helper()
	for _, s := range ss {
		vs, err := s.CheckInvariants(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vs {
			t.Errorf("%s invariant: %s %s", s.Name(), v.Key, v.Message)
		}
	}
}

func TestLinearizable_MySQL(t *testing.T) {
	testenv.RequireIntegration(t)
	s := mustOpenStores(t)
	w := workload(11)
	h := mustRun(t, linearize.StoreTarget(s.mysql), w)
	mustCover(t, h)
	mustLinearizable(t, w, h)
	mustStoreInvariants(t, s.mysql)
}

func TestLinearizable_Redis(t *testing.T) {
	testenv.RequireIntegration(t)
	s := mustOpenStores(t)
	w := workload(12)
	w.SerialSettles, w.SerialStockCounts = true, true
	h := mustRun(t, linearize.StoreTarget(s.redis), w)
	mustCover(t, h)
	mustLinearizable(t, w, h)
	mustStoreInvariants(t, s.redis)
}

func TestLinearizable_Router(t *testing.T) {
	testenv.RequireIntegration(t)
	for i, mode := range []tandem.Mode{tandem.ModeRedis, tandem.ModeShadow, tandem.ModeMySQL, tandem.ModeMySQLOnly} {
		t.Run(string(mode), func(t *testing.T) {
			p := mustOpenPod(t, mode)
			w := workload(20 + uint64(i))
			// Redis answering: its documented claim and stock-count
			// windows are kept out of the history (see Workload).
			redisSoT := mode.SourceOfTruth() == tandem.StoreRedis
			w.SerialSettles, w.SerialStockCounts = redisSoT, redisSoT
			h := mustRun(t, linearize.ServiceTarget(p.router), w)
			mustCover(t, h)
			mustLinearizable(t, w, h)
			p.mustInvariants(t)
		})
	}
}

// TestLinearizable_RouterFlips moves the pod through the rollout while the
// clients run: redis -> shadow (after a backfill) -> mysql, kill switch on
// and off, mysql -> shadow -> mysql. The buyer must see one inventory
// throughout.
func TestLinearizable_RouterFlips(t *testing.T) {
	testenv.RequireIntegration(t)
	p := mustOpenPod(t, tandem.ModeRedis)
	w := workload(30)
	w.OpsPerClient = 40
	w.SerialSettles, w.SerialStockCounts = true, true // Redis answers for part of the run
	ctx := context.Background()
	tgt := linearize.ServiceTarget(p.router)
	if err := linearize.Stock(ctx, tgt, w.Config); err != nil {
		t.Fatal(err)
	}

	done := make(chan struct{})
	var flips []string
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		// Each step waits for some traffic, so every flip lands mid-run.
		pause := func() bool {
			select {
			case <-done:
				return false
			case <-time.After(40 * time.Millisecond):
				return true
			}
		}
		steps := []struct {
			name string
			do   func() error
		}{
			{"backfill+shadow", func() error {
				if _, err := p.router.Backfill(ctx); err != nil {
					return err
				}
				p.modes.set(tandem.ModeShadow)
				return nil
			}},
			{"mysql", func() error { p.modes.set(tandem.ModeMySQL); return nil }},
			{"kill", func() error { p.kill.on.Store(true); return nil }},
			{"unkill", func() error { p.kill.on.Store(false); return nil }},
			{"shadow", func() error { p.modes.set(tandem.ModeShadow); return nil }},
			{"mysql", func() error { p.modes.set(tandem.ModeMySQL); return nil }},
			{"kill", func() error { p.kill.on.Store(true); return nil }},
			{"unkill", func() error { p.kill.on.Store(false); return nil }},
		}
		for _, s := range steps {
			if !pause() {
				return
			}
			if err := s.do(); err != nil {
				t.Errorf("%s: %v", s.name, err)
				return
			}
			flips = append(flips, s.name)
		}
	}()
	h, err := linearize.Run(ctx, tgt, w)
	close(done)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	// Convergences of carts whose copy failed or timed out (a loaded
	// machine): a failed one leaves the new SoT behind for other carts of
	// the position until a later one lands.
	t.Logf("flips during the run: %v; fence timeouts %d, previous-SoT waits %d; convergences %v; outcomes %v",
		flips, p.router.FenceTimeouts(), p.router.PrevSoTWaits(), p.router.ConvergeStats().Results, h.Outcomes)
	if len(flips) < 3 {
		t.Errorf("got %d flips during the run, want at least 3 (the run was too short)", len(flips))
	}
	if n := h.Unknown(); n != 0 {
		t.Errorf("got %d calls with an unknown outcome, want 0; errors: %q", n, h.Failures)
	}
	mustCover(t, h)
	mustLinearizable(t, w, h)
	p.mustInvariants(t)
}
