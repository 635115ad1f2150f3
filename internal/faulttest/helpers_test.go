package faulttest_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/dualwrite"
	"github.com/tandemhq/tandem/internal/faultproxy"
	"github.com/tandemhq/tandem/internal/faulttest"
	"github.com/tandemhq/tandem/internal/testenv"
	"github.com/tandemhq/tandem/mysqlres"
	"github.com/tandemhq/tandem/redisres"
)

// noHang is the generous bound every call under a fault must return within:
// it proves "no hang", not speed. The client timeouts below are far shorter.
const noHang = 10 * time.Second

// modes is a settable dualwrite.ModeSource.
type modes struct{ m atomic.Value }

func (s *modes) Mode(string) tandem.Mode { return s.m.Load().(tandem.Mode) }
func (s *modes) set(m tandem.Mode)       { s.m.Store(m) }

// kill is a settable dualwrite.KillSwitch, the fake of the pod's flag.
type kill struct{ on atomic.Bool }

func (k *kill) Engaged(string) bool { return k.on.Load() }

// recorder keeps every comparison the router records.
type recorder struct {
	mu  sync.Mutex
	all []tandem.Comparison
}

func (r *recorder) Record(c tandem.Comparison) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.all = append(r.all, c)
}

// since returns the comparisons recorded after the first n.
func (r *recorder) since(n int) []tandem.Comparison {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]tandem.Comparison(nil), r.all[n:]...)
}

func (r *recorder) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.all)
}

// podOptions shapes a fault pod.
type podOptions struct {
	shadowTimeout time.Duration // default 250ms
	maxInflight   int           // default 256
	// dsnParams are session variables for the MySQL engine's connections.
	dsnParams map[string]string
	// commitCutter puts a CommitCutter, not a faultproxy, in front of MySQL.
	commitCutter bool
	registerer   prometheus.Registerer
	// wrap, when set, wraps what the router uses as each store (before the
	// router opens): a test's probe around the real store.
	wrap func(tandem.ShadowStore) tandem.ShadowStore
}

// faultPod is one router over real stores, each behind its own proxy: MySQL
// in a fresh database, Redis under a fresh key prefix, sharing the pod's
// ledger (in MySQL, so a claim through Redis needs MySQL too).
type faultPod struct {
	*dualwrite.Router
	redis  *redisres.Store
	mysql  *mysqlres.Store
	ledger tandem.Ledger
	// myProxy and rdProxy stand between the stores and the servers; cutter
	// replaces myProxy when the pod was opened with commitCutter.
	myProxy *faultproxy.Proxy
	cutter  *faulttest.CommitCutter
	rdProxy *faultproxy.Proxy
	// direct reaches the test's Redis without the proxy; prefix is the
	// pod's key space there. dsn reaches the pod's database directly.
	direct *redis.Client
	prefix string
	dsn    string
	modes  *modes
	kill   *kill
	rec    *recorder
}

// mustOpenFaultPod opens a pod in mode with both stores behind proxies. The
// clients fail fast when a proxy is down: the Redis client's dial, read and
// write timeouts are 1s with no retries, the MySQL driver's 1s/3s/3s (a
// refused or reset connection fails at once; the timeouts bound the rest).
func mustOpenFaultPod(t *testing.T, mode tandem.Mode, o podOptions) *faultPod {
	t.Helper()
	if o.shadowTimeout <= 0 {
		o.shadowTimeout = 250 * time.Millisecond
	}
	if o.maxInflight <= 0 {
		o.maxInflight = 256
	}
	dsn := testenv.MustCreateDatabase(t)
	direct, prefix := testenv.MustRedis(t)
	p := &faultPod{direct: direct, prefix: prefix, dsn: dsn, modes: &modes{}, kill: &kill{}, rec: &recorder{}}
	p.modes.set(mode)

	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	if o.commitCutter {
		p.cutter, err = faulttest.ListenCommitCutter(cfg.Addr, t.Logf)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.cutter.Close() })
		cfg.Addr = p.cutter.Addr()
	} else {
		p.myProxy, err = faultproxy.Listen(cfg.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.myProxy.Close() })
		cfg.Addr = p.myProxy.Addr()
	}
	cfg.Timeout, cfg.ReadTimeout, cfg.WriteTimeout = time.Second, 3*time.Second, 3*time.Second
	for k, v := range o.dsnParams {
		if cfg.Params == nil {
			cfg.Params = map[string]string{}
		}
		cfg.Params[k] = v
	}
	p.rdProxy, err = faultproxy.Listen(testenv.RedisAddr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.rdProxy.Close() })

	p.mysql = mysqlres.NewStore(cfg.FormatDSN())
	p.mysql.Registerer = o.registerer
	if err := p.mysql.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.mysql.Close() })
	if err := p.mysql.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	p.ledger = p.mysql.Ledger()

	rdb := redis.NewClient(&redis.Options{
		Addr:        p.rdProxy.Addr(),
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
		PoolTimeout: time.Second, MaxRetries: -1, ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { rdb.Close() })
	p.redis = redisres.NewStore(rdb, p.ledger)
	p.redis.Prefix = prefix
	if err := p.redis.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.redis.Close() })

	shops, _ := tandem.ParseShopSet([]string{"1-1000"})
	var rs, ms tandem.ShadowStore = p.redis, p.mysql
	if o.wrap != nil {
		rs, ms = o.wrap(rs), o.wrap(ms)
	}
	p.Router = dualwrite.NewRouter("pod-f", shops, rs, ms)
	p.Router.Ledger = p.ledger
	p.Router.Modes = p.modes
	p.Router.Kill = p.kill
	p.Router.Recorder = p.rec
	p.Router.ShadowTimeout = o.shadowTimeout
	p.Router.MaxInflight = o.maxInflight
	p.Router.AuditSettle = 50 * time.Millisecond
	p.Router.Dirty = p.mysql
	if err := p.Router.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Router.Close() })
	return p
}

// bounded runs f and fails the test when it has not returned within noHang.
func bounded[T any](t *testing.T, what string, f func() (T, error)) (T, error) {
	t.Helper()
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := f()
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-time.After(noHang):
		t.Fatalf("%s did not return within %s: a hang", what, noHang)
		panic("unreachable")
	}
}

func (p *faultPod) reserve(t *testing.T, token string, lines ...tandem.LineRequest) (*tandem.Reservation, error) {
	t.Helper()
	return bounded(t, "reserve "+token, func() (*tandem.Reservation, error) {
		return p.Reserve(context.Background(), tandem.ReserveRequest{CartToken: token, ShopID: shop, Lines: lines})
	})
}

func (p *faultPod) claim(t *testing.T, token string) (*tandem.Reservation, error) {
	t.Helper()
	return bounded(t, "claim "+token, func() (*tandem.Reservation, error) { return p.Claim(context.Background(), shop, token) })
}

func (p *faultPod) release(t *testing.T, token string) (*tandem.Reservation, error) {
	t.Helper()
	return bounded(t, "release "+token, func() (*tandem.Reservation, error) { return p.Release(context.Background(), shop, token) })
}

func (p *faultPod) get(t *testing.T, token string) (*tandem.Reservation, error) {
	t.Helper()
	return bounded(t, "get "+token, func() (*tandem.Reservation, error) { return p.Get(context.Background(), shop, token) })
}

// shop is the one shop of every test pod.
const shop = 7

func key(item int64) tandem.Key { return tandem.Key{ShopID: shop, ItemID: item, GroupID: 1} }

func line(item, qty int64) tandem.LineRequest {
	return tandem.LineRequest{ItemID: item, Quantity: qty, GroupIDs: []int64{1}}
}

// mustStock sets on_hand of every item (group 1) through the router, so
// that both stores the mode maintains follow.
func (p *faultPod) mustStock(t *testing.T, onHand int64, items ...int64) {
	t.Helper()
	for _, it := range items {
		if _, err := p.SetOnHand(context.Background(), key(it), onHand); err != nil {
			t.Fatalf("stock item %d: %v", it, err)
		}
	}
}

// snapshot is the pod's state as both stores and the ledger see it.
type snapshot struct {
	ledger map[tandem.Key]int64
	redis  map[tandem.Key]tandem.Counters
	mysql  map[tandem.Key]tandem.Counters
}

func (p *faultPod) mustSnapshot(t *testing.T) snapshot {
	t.Helper()
	ctx := context.Background()
	led, err := p.ledger.ListOnHand(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s := snapshot{ledger: led, redis: map[tandem.Key]tandem.Counters{}, mysql: map[tandem.Key]tandem.Counters{}}
	for _, st := range []struct {
		s tandem.ReservationStore
		m map[tandem.Key]tandem.Counters
	}{{p.redis, s.redis}, {p.mysql, s.mysql}} {
		list, err := st.s.ListCounters(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range list {
			st.m[c.Key] = c
		}
	}
	return s
}

// wantSameSnapshot fails for every position whose counters differ.
func wantSameSnapshot(t *testing.T, got, want snapshot) {
	t.Helper()
	for k, v := range want.ledger {
		if got.ledger[k] != v {
			t.Errorf("ledger %s: got on_hand %d, want %d", k, got.ledger[k], v)
		}
	}
	for name, pair := range map[string][2]map[tandem.Key]tandem.Counters{
		tandem.StoreRedis: {got.redis, want.redis}, tandem.StoreMySQL: {got.mysql, want.mysql},
	} {
		for k, v := range pair[1] {
			if g := pair[0][k]; g != v {
				t.Errorf("%s %s: got on_hand %d reserved %d available %d, want %d %d %d",
					name, k, g.OnHand, g.Reserved, g.Available, v.OnHand, v.Reserved, v.Available)
			}
		}
		if len(pair[0]) != len(pair[1]) {
			t.Errorf("%s: got %d positions, want %d", name, len(pair[0]), len(pair[1]))
		}
	}
}

// mustInvariants fails for every broken store invariant.
func (p *faultPod) mustInvariants(t *testing.T) {
	t.Helper()
	for _, s := range []tandem.ReservationStore{p.redis, p.mysql} {
		vs, err := s.CheckInvariants(context.Background())
		if err != nil {
			t.Fatalf("%s invariants: %v", s.Name(), err)
		}
		for _, v := range vs {
			t.Errorf("%s invariant broken at %s (cart %q): %s", s.Name(), v.Key, v.CartToken, v.Message)
		}
	}
}

// mustAudit waits for the shadow work and returns the drift audit.
func (p *faultPod) mustAudit(t *testing.T) *tandem.Audit {
	t.Helper()
	p.Wait()
	a, err := p.Audit(context.Background())
	if err != nil {
		t.Fatalf("audit: %v", err)
	}
	return a
}

// mustAuditClean asserts the audit is clean and both stores' invariants hold.
func (p *faultPod) mustAuditClean(t *testing.T) {
	t.Helper()
	a := p.mustAudit(t)
	for _, d := range a.Drifted {
		t.Errorf("drift at %d/%d/%d: ledger %d, redis %v, mysql %v", d.ShopID, d.ItemID, d.GroupID,
			d.LedgerOnHand, deref(d.RedisAvailable), deref(d.MySQLAvailable))
	}
	p.mustInvariants(t)
}

func deref(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

func drifted(a *tandem.Audit) map[tandem.Key]bool {
	m := map[tandem.Key]bool{}
	for _, d := range a.Drifted {
		m[tandem.Key{ShopID: d.ShopID, ItemID: d.ItemID, GroupID: d.GroupID}] = true
	}
	return m
}

func (p *faultPod) onHand(t *testing.T, item int64) int64 {
	t.Helper()
	v, err := p.ledger.OnHand(context.Background(), key(item))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func (p *faultPod) counters(t *testing.T, s tandem.ReservationStore, item int64) tandem.Counters {
	t.Helper()
	c, err := s.Counters(context.Background(), key(item))
	if err != nil {
		t.Fatal(err)
	}
	return *c
}

func wantCode(t *testing.T, what string, err error, code string) {
	t.Helper()
	if got := tandem.ErrorCode(err); got != code {
		t.Errorf("%s: got code %q (%v), want %q", what, got, err, code)
	}
}
