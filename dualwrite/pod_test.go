package dualwrite_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/dualwrite"
	"github.com/tandemhq/tandem/internal/conformance"
	"github.com/tandemhq/tandem/internal/testenv"
	"github.com/tandemhq/tandem/mysqlres"
	"github.com/tandemhq/tandem/redisres"
)

// modes is a settable ModeSource.
type modes struct{ m atomic.Value }

func (s *modes) Mode(string) tandem.Mode { return s.m.Load().(tandem.Mode) }
func (s *modes) set(m tandem.Mode)       { s.m.Store(m) }

// kill is a settable KillSwitch.
type kill struct{ on atomic.Bool }

func (k *kill) Engaged(string) bool { return k.on.Load() }

// recorder keeps every comparison.
type recorder struct {
	mu  sync.Mutex
	all []tandem.Comparison
}

func (r *recorder) Record(c tandem.Comparison) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.all = append(r.all, c)
}

// snapshot returns every comparison recorded so far.
func (r *recorder) snapshot() []tandem.Comparison {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]tandem.Comparison(nil), r.all...)
}

func (r *recorder) kinds() map[tandem.DivergenceKind]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := map[tandem.DivergenceKind]int{}
	for _, c := range r.all {
		m[c.Kind]++
	}
	return m
}

func (r *recorder) divergences() []tandem.Comparison {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []tandem.Comparison
	for _, c := range r.all {
		if c.Kind != "" {
			out = append(out, c)
		}
	}
	return out
}

// mismatches returns the divergences other than a shadow that answered late
// or not at all (shadow_timeout, shadow_dropped): at production's
// shadow.timeout and max_inflight those happen under load, are reported,
// and are converged; a shadow that reached another outcome than the SoT's
// (outcome or location mismatch, error) is a real divergence.
func (r *recorder) mismatches() []tandem.Comparison {
	var out []tandem.Comparison
	for _, c := range r.divergences() {
		if c.Kind != tandem.KindShadowTimeout && c.Kind != tandem.KindShadowDropped {
			out = append(out, c)
		}
	}
	return out
}

// pod is one router over real stores: MySQL in a fresh database, Redis
// under a fresh key prefix, sharing the pod's ledger.
type pod struct {
	*dualwrite.Router
	redis *redisres.Store
	mysql *mysqlres.Store
	// fr and fm are what the router uses: the stores behind fault
	// injectors (no fault unless a test sets one).
	fr    redisFaulty
	fm    *faulty
	modes *modes
	kill  *kill
	rec   *recorder
	clock *conformance.Clock
	// rdb is the Redis under p.redis (nil on a Redis Cluster), for tests
	// that take data away behind the store's back.
	rdb *redis.Client
}

func mustOpenPod(t *testing.T, mode tandem.Mode, configure ...func(*dualwrite.Router)) *pod {
	t.Helper()
	dsn := testenv.MustCreateDatabase(t)
	rdb, prefix := testenv.MustRedis(t)
	clock := conformance.NewClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	ms := mysqlres.NewStore(dsn)
	ms.Now = clock.Now
	if err := ms.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ms.Close() })
	if err := ms.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	rs := redisres.NewStore(rdb, ms.Ledger())
	rs.Prefix = prefix
	rs.Now = clock.Now
	if err := rs.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	p := openRouter(t, rs, ms, clock, mode, configure...)
	p.rdb = rdb
	return p
}

// openRouter opens the pod's router over the two stores, each behind a
// fault injector, at production defaults.
func openRouter(t *testing.T, rs *redisres.Store, ms *mysqlres.Store, clock *conformance.Clock, mode tandem.Mode, configure ...func(*dualwrite.Router)) *pod {
	t.Helper()
	p := &pod{redis: rs, mysql: ms, modes: &modes{}, kill: &kill{}, rec: &recorder{}, clock: clock,
		fr: redisFaulty{newFaulty(rs)}, fm: newFaulty(ms)}
	p.modes.set(mode)
	shops, _ := tandem.ParseShopSet([]string{"1-1000000000"})
	// Production defaults otherwise: shadow.timeout 250ms, max_inflight 256.
	p.Router = dualwrite.NewRouter("pod-t", shops, p.fr, p.fm)
	p.Router.Ledger = ms.Ledger()
	p.Router.Modes = p.modes
	p.Router.Kill = p.kill
	p.Router.Recorder = p.rec
	p.Router.Dirty = ms
	p.Router.Now = clock.Now
	p.Router.Logger = testLogger{t}
	for _, f := range configure {
		f(p.Router)
	}
	if err := p.Router.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Router.Close() })
	return p
}

// testLogger shows the router's warnings in the test's log (a sweep that
// fails says so only there).
type testLogger struct{ t testing.TB }

func (l testLogger) Warnw(msg string, kv ...any) { l.t.Logf("router warning: %s %v", msg, kv) }

// mustConverge waits (traffic stopped) for the stores to agree hold by hold
// and with the ledger, as invariant 5 requires, and fails with the
// differences when they do not within a few seconds.
func (p *pod) mustConverge(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), convergeWithin)
	defer cancel()
	if _, err := p.Converged(ctx); err != nil {
		t.Fatal(err)
	}
	p.mustAuditClean(t)
}

// convergeWithin bounds the wait for the stores to converge at rest: the
// dirty-cart worker's backoff and one anti-entropy sweep (5s) fit in it.
const convergeWithin = 15 * time.Second

// mustAuditClean waits for the shadow and asserts the drift audit is clean
// and both stores' invariants hold.
func (p *pod) mustAuditClean(t *testing.T) {
	t.Helper()
	p.Wait()
	a, err := p.Audit(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !a.Clean {
		for _, d := range a.Drifted {
			t.Errorf("drift at %d/%d/%d: ledger %d, redis %v, mysql %v", d.ShopID, d.ItemID, d.GroupID,
				d.LedgerOnHand, deref(d.RedisAvailable), deref(d.MySQLAvailable))
		}
	}
	for _, s := range []tandem.ReservationStore{p.redis, p.mysql} {
		vs, err := s.CheckInvariants(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vs {
			t.Errorf("%s invariant: %s %s", s.Name(), v.Key, v.Message)
		}
	}
}

func deref(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

func (p *pod) onHand(t *testing.T, k tandem.Key) int64 {
	t.Helper()
	v, err := p.mysql.Ledger().OnHand(context.Background(), k)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func (p *pod) counters(t *testing.T, s tandem.ReservationStore, k tandem.Key) tandem.Counters {
	t.Helper()
	c, err := s.Counters(context.Background(), k)
	if err != nil {
		t.Fatal(err)
	}
	return *c
}

func cart(token string, shop int64, lines ...tandem.LineRequest) tandem.ReserveRequest {
	return tandem.ReserveRequest{CartToken: token, ShopID: shop, Lines: lines}
}

func one(item, qty int64, groups ...int64) tandem.LineRequest {
	return tandem.LineRequest{ItemID: item, Quantity: qty, GroupIDs: groups}
}
