package soak_test

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/comparator"
	"github.com/tandemhq/tandem/dualwrite"
	"github.com/tandemhq/tandem/internal/faultproxy"
	"github.com/tandemhq/tandem/internal/soak"
	"github.com/tandemhq/tandem/internal/testenv"
	"github.com/tandemhq/tandem/mysqlres"
	"github.com/tandemhq/tandem/redisres"
)

var (
	soakDuration = flag.Duration("soak.duration", 45*time.Second, "how long the soak's buyer traffic runs")
	lateClaims   = flag.Bool("soak.late-claims", true, "also claim holds close to their expiry, racing the reapers")
	soakPods     = flag.Int("soak.pods", 3, "how many pods the soak runs (each with its own MySQL database and Redis key space)")
)

// The shape of the run: small stock on few hot positions, so that sold-out
// boundaries are hit constantly, and short holds, so that expiry and the
// reapers run all the time.
const (
	workersPerPod = 4
	shopsPerPod   = 3
	itemsPerShop  = 3
	groupsPerItem = 2
	minStock      = 3
	maxStock      = 8
	minTTL        = time.Second
	maxTTL        = 3 * time.Second
	reapInterval  = 200 * time.Millisecond
	// claimMargin: a claim issued at least this long before the hold's
	// expiry must succeed (invariant 3); later ones may find it expired.
	claimMargin = time.Second
	// cutLength is how long the cut pod's MySQL is down; cutGrace extends
	// the window after Restore for requests on connections cut meanwhile.
	cutLength = 3 * time.Second
	cutGrace  = 2 * time.Second
	// opTimeout bounds one buyer call: a call that needs it is a hang.
	opTimeout = 10 * time.Second
)

// modes is a settable dualwrite.ModeSource for one pod.
type modes struct{ m atomic.Value }

func (s *modes) Mode(string) tandem.Mode { return s.m.Load().(tandem.Mode) }
func (s *modes) set(m tandem.Mode)       { s.m.Store(m) }

// kill is a settable dualwrite.KillSwitch for one pod.
type kill struct{ on atomic.Bool }

func (k *kill) Engaged(string) bool { return k.on.Load() }

// tally counts events by name.
type tally struct {
	mu sync.Mutex
	m  map[string]int64
}

func (t *tally) add(name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[string]int64{}
	}
	t.m[name]++
}

func (t *tally) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	names := make([]string, 0, len(t.m))
	for n := range t.m {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "\n  %-40s %d", n, t.m[n])
	}
	return b.String()
}

// failures keeps the first messages of a kind of failure, and counts all.
type failures struct {
	mu    sync.Mutex
	n     int
	first []string
}

func (f *failures) add(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	if len(f.first) < 20 {
		f.first = append(f.first, fmt.Sprintf(format, args...))
	}
}

// soakPod is one pod of the run: a router over real stores, each store
// behind its own fault proxy.
type soakPod struct {
	idx    int
	name   string
	shops  []int64
	router *dualwrite.Router
	redis  *redisres.Store
	mysql  *mysqlres.Store
	rdb    *redis.Client
	dsn    string // the pod's database, straight to the server
	my, rd *faultproxy.Proxy
	// proxyLog keeps the MySQL proxy's last connection events.
	proxyLog *tailWriter
	modes    *modes
	kill     *kill

	// gate pauses the pod's buyer traffic: every buyer call holds it for
	// reading, and the chaos that needs the pod at rest takes it.
	gate sync.RWMutex
	// frozen stops flips and kill toggles (during the store cut).
	frozen atomic.Bool

	cutMu          sync.Mutex
	cutFrom, cutTo time.Time
}

// inCut reports whether a call issued at from and answered at to overlaps
// the pod's store cut (with grace).
func (p *soakPod) inCut(from, to time.Time) bool {
	p.cutMu.Lock()
	defer p.cutMu.Unlock()
	return !p.cutFrom.IsZero() && !to.Before(p.cutFrom) && (p.cutTo.IsZero() || from.Before(p.cutTo))
}

func (p *soakPod) cutWindow() string {
	p.cutMu.Lock()
	defer p.cutMu.Unlock()
	if p.cutFrom.IsZero() {
		return "none"
	}
	return p.cutFrom.Format("15:04:05.000") + ".." + p.cutTo.Format("15:04:05.000")
}

// paused runs f with the pod's buyer traffic stopped and its shadow work
// drained.
func (p *soakPod) paused(f func()) {
	p.gate.Lock()
	defer p.gate.Unlock()
	p.router.Wait()
	f()
}

func (p *soakPod) keys() []tandem.Key {
	var keys []tandem.Key
	for _, s := range p.shops {
		for i := int64(1); i <= itemsPerShop; i++ {
			for g := int64(1); g <= groupsPerItem; g++ {
				keys = append(keys, tandem.Key{ShopID: s, ItemID: i, GroupID: g})
			}
		}
	}
	return keys
}

// mustOpenPod opens pod idx over fresh store spaces (created by the caller,
// before the goroutine snapshot) in mode.
func mustOpenPod(t *testing.T, idx int, dsn, prefix string, mode tandem.Mode, rec dualwrite.Recorder) *soakPod {
	t.Helper()
	p := &soakPod{idx: idx, name: fmt.Sprintf("soak-%d", idx), dsn: dsn, modes: &modes{}, kill: &kill{}}
	p.modes.set(mode)
	for s := 0; s < shopsPerPod; s++ {
		p.shops = append(p.shops, int64(idx*100+s+1))
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	if p.my, err = faultproxy.Listen(cfg.Addr); err != nil {
		t.Fatal(err)
	}
	p.proxyLog = &tailWriter{max: 20000}
	plog := log.New(p.proxyLog, "", log.Ltime|log.Lmicroseconds)
	p.my.SetLogf(plog.Printf)
	if p.rd, err = faultproxy.Listen(testenv.RedisAddr()); err != nil {
		t.Fatal(err)
	}
	cfg.Addr = p.my.Addr()
	cfg.Timeout, cfg.ReadTimeout, cfg.WriteTimeout = time.Second, 3*time.Second, 3*time.Second
	p.mysql = mysqlres.NewStore(cfg.FormatDSN())
	p.mysql.MaxOpenConns = 16
	if err := p.mysql.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := p.mysql.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	p.rdb = redis.NewClient(&redis.Options{
		Addr:        p.rd.Addr(),
		DialTimeout: 500 * time.Millisecond, ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond,
		PoolTimeout: time.Second, MaxRetries: -1, ContextTimeoutEnabled: true,
	})
	p.redis = redisres.NewStore(p.rdb, p.mysql.Ledger())
	p.redis.Prefix = prefix
	if err := p.redis.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	shops, err := tandem.ParseShopSet([]string{fmt.Sprintf("%d-%d", p.shops[0], p.shops[len(p.shops)-1])})
	if err != nil {
		t.Fatal(err)
	}
	p.router = dualwrite.NewRouter(p.name, shops, p.redis, p.mysql)
	// Production defaults: shadow.timeout 250ms, max_inflight 256.
	p.router.Ledger = p.mysql.Ledger()
	p.router.Modes = p.modes
	p.router.Kill = p.kill
	p.router.Recorder = rec
	p.router.Dirty = p.mysql
	if err := p.router.Open(); err != nil {
		t.Fatal(err)
	}
	return p
}

// close closes the pod's router, stores, client and proxies.
func (p *soakPod) close() {
	p.router.Close()
	p.redis.Close()
	p.rdb.Close()
	p.mysql.Close()
	p.my.Close()
	p.rd.Close()
}

// reap returns expired holds in every store the pod's mode maintains, the
// way `tandem serve` does.
func (p *soakPod) reap(ctx context.Context) {
	stores := []tandem.ReservationStore{p.redis, p.mysql}
	switch p.router.Mode() {
	case tandem.ModeRedis:
		stores = stores[:1]
	case tandem.ModeMySQLOnly:
		stores = stores[1:]
	}
	for _, s := range stores {
		for {
			n, err := s.ExpireDue(ctx, time.Now(), 500)
			if err != nil || n < 500 {
				break
			}
		}
	}
}

// run is the shared state of one soak run.
type run struct {
	t        *testing.T
	book     *soak.Book
	pods     []*soakPod
	deadline time.Time
	ops      tally    // "op/outcome"
	chaos    tally    // flips, kill toggles, faults, repairs
	events   []string // chronological chaos, printed on failure
	eventsMu sync.Mutex
	lost     failures
	replays  failures
	exempt   atomic.Int64 // claims that answered unavailable during the cut
	must     atomic.Int64 // claims issued well before expiry
}

// note counts a chaos event and keeps it in the timeline.
func (r *run) note(p *soakPod, name string) {
	r.chaos.add(name)
	r.eventsMu.Lock()
	defer r.eventsMu.Unlock()
	r.events = append(r.events, time.Now().Format("15:04:05.000")+" "+p.name+" "+name)
}

// openCart is a cart a worker was granted and has not settled.
type openCart struct {
	id        soak.CartID
	expiresAt time.Time
}

// worker drives one pod's buyer traffic until the deadline and returns the
// carts it left open.
func (r *run) worker(p *soakPod, w int) []openCart {
	rng := rand.New(rand.NewPCG(uint64(p.idx), uint64(w)))
	var open []openCart
	var claimed []soak.CartID
	for n := 0; time.Now().Before(r.deadline); n++ {
		p.gate.RLock()
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		x := rng.IntN(100)
		switch {
		case x < 45 || len(open) == 0:
			if c, ok := r.reserve(ctx, p, rng, fmt.Sprintf("s%d-w%d-%d", p.idx, w, n)); ok {
				open = append(open, c)
			}
		case x < 72:
			i := rng.IntN(len(open))
			if !*lateClaims && time.Until(open[i].expiresAt) < claimMargin {
				break
			}
			ok := r.claim(ctx, p, open[i])
			if ok {
				claimed = append(claimed, open[i].id)
				if len(claimed) > 64 {
					claimed = claimed[1:]
				}
			}
			if ok || !r.retryLater(p) {
				open = append(open[:i], open[i+1:]...)
			}
		case x < 84:
			i := rng.IntN(len(open))
			r.release(ctx, p, open[i])
			open = append(open[:i], open[i+1:]...)
		case x < 93:
			c := open[rng.IntN(len(open))]
			res, err := p.router.Get(ctx, c.id.ShopID, c.id.Token)
			r.ops.add("get/" + outcome(res, err))
		default:
			if len(claimed) > 0 {
				r.reclaim(ctx, p, claimed[rng.IntN(len(claimed))])
			}
		}
		cancel()
		p.gate.RUnlock()
		if p.inCut(time.Now(), time.Now()) {
			time.Sleep(20 * time.Millisecond) // a buyer backs off while the store is down
		}
	}
	return open
}

// retryLater reports whether a claim that just failed should be tried
// again later: only while the pod's ledger is cut.
func (r *run) retryLater(p *soakPod) bool { return p.inCut(time.Now(), time.Now()) }

func outcome(res *tandem.Reservation, err error) string {
	if err != nil {
		return tandem.ErrorCode(err)
	}
	return string(res.Status)
}

func (r *run) reserve(ctx context.Context, p *soakPod, rng *rand.Rand, token string) (openCart, bool) {
	req := tandem.ReserveRequest{
		CartToken: token,
		ShopID:    p.shops[rng.IntN(len(p.shops))],
		TTL:       minTTL + time.Duration(rng.Int64N(int64(maxTTL-minTTL))),
	}
	items := rng.Perm(itemsPerShop)[:1+rng.IntN(2)]
	for _, it := range items {
		groups := []int64{1, 2}
		switch rng.IntN(3) {
		case 0:
			groups = []int64{2, 1}
		case 1:
			groups = []int64{int64(1 + rng.IntN(2))}
		}
		req.Lines = append(req.Lines, tandem.LineRequest{ItemID: int64(it + 1), Quantity: int64(1 + rng.IntN(2)), GroupIDs: groups})
	}
	res, err := p.router.Reserve(ctx, req)
	answered := time.Now()
	r.ops.add("reserve/" + outcome(res, err))
	if err != nil {
		return openCart{}, false
	}
	if res.Status != tandem.StatusReserved || len(res.Lines) != len(req.Lines) {
		r.lost.add("reserve %s answered status %s with %d lines, want reserved with %d", token, res.Status, len(res.Lines), len(req.Lines))
		return openCart{}, false
	}
	r.book.Granted(res, answered)
	return openCart{id: soak.CartID{ShopID: res.ShopID, Token: res.CartToken}, expiresAt: res.ExpiresAt}, true
}

// claim claims the cart and reports whether it answered claimed; a claim
// issued well before the hold's expiry must (invariant 3), except while the
// pod's ledger is cut, when it must answer unavailable.
func (r *run) claim(ctx context.Context, p *soakPod, c openCart) bool {
	issued := time.Now()
	must := issued.Before(c.expiresAt.Add(-claimMargin))
	r.book.ClaimIssued(c.id)
	res, err := p.router.Claim(ctx, c.id.ShopID, c.id.Token)
	answered := time.Now()
	got := outcome(res, err)
	if must {
		r.must.Add(1)
		r.ops.add("claim/" + got)
	} else {
		r.ops.add("claim(late)/" + got)
	}
	if got == string(tandem.StatusClaimed) {
		r.book.Claimed(c.id, issued, answered)
		return true
	}
	switch {
	case !must:
	case got == tandem.EUNAVAILABLE && p.inCut(issued, answered):
		r.exempt.Add(1)
	default:
		r.lost.add("pod %s (mode %s) claim of %d/%s issued at %s, %s before expiry, answered %q after %s (%v); cut %s",
			p.name, p.router.Mode(), c.id.ShopID, c.id.Token, issued.Format("15:04:05.000"),
			c.expiresAt.Sub(issued).Round(time.Millisecond), got, answered.Sub(issued).Round(time.Millisecond), err, p.cutWindow())
	}
	return false
}

func (r *run) release(ctx context.Context, p *soakPod, c openCart) {
	r.book.ReleaseIssued(c.id, time.Now())
	res, err := p.router.Release(ctx, c.id.ShopID, c.id.Token)
	r.ops.add("release/" + outcome(res, err))
}

// reclaim claims a claimed cart again: it must answer claimed and change
// nothing (the ledger check at the end sees any second deduction).
func (r *run) reclaim(ctx context.Context, p *soakPod, id soak.CartID) {
	issued := time.Now()
	res, err := p.router.Claim(ctx, id.ShopID, id.Token)
	got := outcome(res, err)
	r.ops.add("claim(again)/" + got)
	if got != string(tandem.StatusClaimed) && !(got == tandem.EUNAVAILABLE && p.inCut(issued, time.Now())) {
		r.replays.add("pod %s (mode %s) repeated claim of %d/%s answered %q (%s)", p.name, p.router.Mode(), id.ShopID, id.Token, got, tandem.ErrorMessage(err))
	}
}

// chaosLoop flips modes, toggles kill switches and restocks, one random
// step on one random pod at a time, until the deadline.
func (r *run) chaosLoop(seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 99))
	for time.Now().Before(r.deadline) {
		time.Sleep(time.Duration(300+rng.IntN(600)) * time.Millisecond)
		p := r.pods[rng.IntN(len(r.pods))]
		if p.frozen.Load() || !time.Now().Before(r.deadline) {
			continue
		}
		switch x := rng.IntN(10); {
		case x < 3:
			r.toggleKill(p)
		case x < 7:
			r.flip(p)
		default:
			r.restock(p)
		}
	}
}

func (r *run) toggleKill(p *soakPod) {
	if p.modes.Mode(p.name) == tandem.ModeMySQLOnly {
		r.note(p, "kill/refused (mysql_only cannot fall back)")
		return
	}
	on := !p.kill.on.Load()
	p.kill.on.Store(on)
	r.note(p, fmt.Sprintf("kill/%v", map[bool]string{true: "engage", false: "disengage"}[on]))
}

// flip moves the pod one valid step: redis->shadow after a backfill (live,
// as rollout does it), shadow->mysql only past a clean audit (the gate,
// checked with the pod at rest), mysql_only->mysql only after a resync.
func (r *run) flip(p *soakPod) {
	if p.kill.on.Load() {
		return // rollout refuses mode changes toward MySQL while killed; keep it simple
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	from := p.modes.Mode(p.name)
	to := map[tandem.Mode][]tandem.Mode{
		tandem.ModeRedis:     {tandem.ModeShadow},
		tandem.ModeShadow:    {tandem.ModeMySQL, tandem.ModeMySQL, tandem.ModeRedis},
		tandem.ModeMySQL:     {tandem.ModeShadow, tandem.ModeMySQLOnly},
		tandem.ModeMySQLOnly: {tandem.ModeMySQL},
	}[from]
	next := to[rand.IntN(len(to))]
	name := fmt.Sprintf("flip/%s->%s", from, next)
	switch {
	case from == tandem.ModeRedis:
		if _, err := p.router.Backfill(ctx); err != nil {
			r.note(p, name+" refused (backfill: "+tandem.ErrorCode(err)+")")
			return
		}
		p.modes.set(next)
	case from == tandem.ModeShadow && next == tandem.ModeMySQL:
		p.paused(func() {
			a, err := p.router.Audit(ctx)
			if err != nil || !a.Clean {
				r.note(p, name+" refused (audit not clean)")
				return
			}
			p.modes.set(next)
		})
		if p.modes.Mode(p.name) != next {
			return
		}
	case from == tandem.ModeMySQLOnly:
		p.paused(func() {
			if _, err := p.router.Resync(ctx); err != nil {
				r.note(p, name+" refused (resync: "+tandem.ErrorCode(err)+")")
				return
			}
			p.modes.set(next)
		})
		if p.modes.Mode(p.name) != next {
			return
		}
	default:
		p.modes.set(next)
	}
	r.note(p, name)
}

// restock brings every position of the pod that sold down below minStock
// back to maxStock, with the pod at rest, so that the book knows the
// ledger's stock exactly and the buyers keep finding units to fight over.
func (r *run) restock(p *soakPod) {
	p.paused(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, k := range p.keys() {
			cur, err := p.mysql.Ledger().OnHand(ctx, k)
			if err != nil || cur >= minStock {
				continue
			}
			add := maxStock - cur
			if _, err := p.router.SetOnHand(ctx, k, cur+add); err != nil {
				r.note(p, "restock/failed "+tandem.ErrorCode(err))
				// A count whose answer was lost may have reached the
				// ledger: the book follows it (only the restock moves it
				// while the pod is paused).
				if now, err := p.mysql.Ledger().OnHand(ctx, k); err == nil && now != cur {
					r.book.Stock(k, now-cur, time.Now())
					r.note(p, fmt.Sprintf("restock %s %+d (failed, but the ledger has it)", k, now-cur))
				}
				continue
			}
			r.book.Stock(k, add, time.Now())
			r.note(p, fmt.Sprintf("restock %s +%d", k, add))
		}
	})
}

// cut takes the pod's MySQL (its ledger, and its SoT in the mysql modes)
// away for cutLength, gives it back, and once the pod is at rest repairs
// the drift the cut left: Resync when MySQL answers, Backfill when Redis
// does.
func (r *run) cut(p *soakPod) {
	p.frozen.Store(true)
	defer p.frozen.Store(false)
	mode := p.router.Mode()
	p.cutMu.Lock()
	p.cutFrom = time.Now()
	p.cutMu.Unlock()
	p.my.Down()
	r.note(p, fmt.Sprintf("fault/mysql down %s (pod %s, effective mode %s)", cutLength, p.name, mode))
	time.Sleep(cutLength)
	p.my.Restore()
	r.note(p, "fault/mysql restored")
	time.Sleep(cutGrace)
	p.cutMu.Lock()
	p.cutTo = time.Now()
	p.cutMu.Unlock()
	p.paused(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// The audit may find a connection the cut left broken and answer
		// unavailable, as a request would; the operator retries it, a
		// second apart, for at most 10 s, and the run logs why it had to.
		// (Under two CPU burners, runs here answered "closed during the
		// request" then "bad connection" on new connections 2 s after the
		// proxy was restored; the cause is not found yet.)
		var a *tandem.Audit
		var err error
		for try := 1; ; try++ {
			if a, err = p.router.Audit(ctx); tandem.ErrorCode(err) != tandem.EUNAVAILABLE || try == 10 {
				break
			}
			r.t.Logf("audit of %s after the cut, try %d: %v; retried", p.name, try, err)
			time.Sleep(time.Second)
		}
		if err != nil {
			r.t.Errorf("audit of %s after the cut: %v", p.name, err)
			return
		}
		if a.Clean {
			r.note(p, "repair/none needed after the cut")
			return
		}
		repair := r.repair(ctx, p)
		if a, err = p.router.Audit(ctx); err != nil || !a.Clean {
			r.t.Errorf("pod %s after the cut and %s: audit %+v, err %v; want clean", p.name, repair, a, err)
		}
	})
}

// repair brings the store that is not the source of truth back in line
// with it and says which way.
func (r *run) repair(ctx context.Context, p *soakPod) string {
	mode := p.router.Mode()
	var name string
	var err error
	switch {
	case mode.SourceOfTruth() == tandem.StoreMySQL:
		name = "resync (redis from mysql)"
		_, err = p.router.Resync(ctx)
	case mode == tandem.ModeShadow:
		name = "backfill (mysql from redis)"
		_, err = p.router.Backfill(ctx)
	default:
		name = "none possible (mode redis: redis alone answers)"
	}
	if err != nil {
		r.t.Errorf("pod %s: %s: %v", p.name, name, err)
	}
	r.note(p, fmt.Sprintf("repair/%s in mode %s", name, mode))
	return name
}

// TestSoak runs -soak.pods pods of real stores behind fault proxies under
// random buyer traffic for -soak.duration, with short holds and reapers,
// random valid mode flips, kill switch toggles, restocks and one cut of a
// pod's MySQL; then, at rest, it checks the invariants
// (docs/reliability.md): no oversell
// (the book's timeline and the ledger), claims deducted exactly once, no
// lost reservation, each store consistent, the audit clean (after a repair
// only where shadow divergences explain the drift), no goroutine leak and
// the heap back near its baseline.
func TestSoak(t *testing.T) {
	testenv.RequireIntegration(t)
	// The driver logs every connection the cut resets; the run keeps the
	// last lines and prints them when it fails.
	driverLog := &tailWriter{max: 40}
	_ = mysql.SetLogger(log.New(driverLog, "", log.Ltime|log.Lmicroseconds))
	defer func() { _ = mysql.SetLogger(log.New(io.Discard, "", 0)) }()
	n := *soakPods
	if n < 1 {
		t.Fatalf("-soak.pods must be >= 1, got %d", n)
	}
	// The store spaces (and the helpers' clients) exist before the
	// goroutine snapshot; everything the run opens is closed before the
	// leak check.
	dsns, prefixes := make([]string, n), make([]string, n)
	for i := range n {
		dsns[i] = testenv.MustCreateDatabase(t)
		_, prefixes[i] = testenv.MustRedis(t)
	}
	ignore := goleak.IgnoreCurrent()

	cmp := comparator.New(comparator.Config{})
	if err := cmp.Open(); err != nil {
		t.Fatal(err)
	}
	r := &run{t: t, book: soak.NewBook()}
	// Every comparison of a cart is kept, to show how the stores answered
	// the carts of an oversell.
	carts := &cartLog{next: cmp, m: map[soak.CartID][]string{}}
	startModes := []tandem.Mode{tandem.ModeMySQL, tandem.ModeShadow, tandem.ModeRedis, tandem.ModeMySQLOnly}
	for i := range n {
		r.pods = append(r.pods, mustOpenPod(t, i, dsns[i], prefixes[i], startModes[i%len(startModes)], carts))
	}
	closed := false
	closeAll := func() {
		if closed {
			return
		}
		closed = true
		for _, p := range r.pods {
			p.close()
		}
		cmp.Close()
	}
	defer closeAll()

	// Stock every position through the router, so both maintained stores
	// follow; pods that start in redis or mysql_only get the other store
	// filled by the first backfill or resync.
	rng := rand.New(rand.NewPCG(1, 2))
	ctx := context.Background()
	for _, p := range r.pods {
		for _, k := range p.keys() {
			stock := int64(minStock + rng.IntN(maxStock-minStock+1))
			if _, err := p.router.SetOnHand(ctx, k, stock); err != nil {
				t.Fatalf("stock %s: %v", k, err)
			}
			r.book.Stock(k, stock, time.Now())
		}
		if p.modes.Mode(p.name) == tandem.ModeRedis {
			if _, err := p.router.Backfill(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if p.modes.Mode(p.name) == tandem.ModeMySQLOnly {
			if _, err := p.router.Resync(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)

	// The run: workers, reapers, chaos and one store cut.
	start := time.Now()
	r.deadline = start.Add(*soakDuration)
	var wg sync.WaitGroup
	leftOpen := make([][]openCart, n*workersPerPod)
	for i, p := range r.pods {
		for w := range workersPerPod {
			wg.Add(1)
			go func() {
				defer wg.Done()
				leftOpen[i*workersPerPod+w] = r.worker(p, w)
			}()
		}
	}
	reapCtx, stopReap := context.WithCancel(context.Background())
	var reapWG sync.WaitGroup
	for _, p := range r.pods {
		reapWG.Add(1)
		go func() {
			defer reapWG.Done()
			tick := time.NewTicker(reapInterval)
			defer tick.Stop()
			for {
				select {
				case <-reapCtx.Done():
					return
				case <-tick.C:
					ctx, cancel := context.WithTimeout(reapCtx, 10*time.Second)
					p.reap(ctx)
					cancel()
				}
			}
		}()
	}
	wg.Add(2)
	go func() { defer wg.Done(); r.chaosLoop(7) }()
	go func() {
		defer wg.Done()
		time.Sleep(*soakDuration * 2 / 5)
		r.cut(r.pods[0])
	}()
	wg.Wait()
	elapsed := time.Since(start)

	// Quiesce: drain the shadows, release every cart still open, let the
	// holds whose answers were lost expire, and reap both stores.
	var latest time.Time
	for i, open := range leftOpen {
		p := r.pods[i/workersPerPod]
		for _, c := range open {
			ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
			r.release(ctx, p, c)
			cancel()
		}
	}
	for _, p := range r.pods {
		p.router.Wait()
	}
	latest = time.Now().Add(maxTTL + 200*time.Millisecond)
	time.Sleep(time.Until(latest))
	stopReap()
	reapWG.Wait()
	for _, p := range r.pods {
		for _, s := range []tandem.ReservationStore{p.redis, p.mysql} {
			for {
				n, err := s.ExpireDue(ctx, time.Now(), 500)
				if err != nil {
					t.Fatalf("pod %s: final %s reap: %v", p.name, s.Name(), err)
				}
				if n == 0 {
					break
				}
			}
		}
		p.router.Wait()
	}

	// The summary.
	granted, claimedBefore := r.book.Counts()
	stats := cmp.Stats()
	var summary strings.Builder
	fmt.Fprintf(&summary, "soak: %d pods x %d workers for %s; %d carts granted, %d claimed (answered)",
		n, workersPerPod, elapsed.Round(time.Millisecond), granted, claimedBefore)
	fmt.Fprintf(&summary, "\noperations by kind/outcome:%s", r.ops.String())
	fmt.Fprintf(&summary, "\nfaults, flips, kill toggles, restocks, repairs:%s", r.chaos.String())
	for _, p := range r.pods {
		ps := stats.Pods[p.name]
		rep := cmp.Report(p.name, p.modes.Mode(p.name))
		fmt.Fprintf(&summary, "\npod %s: final mode %s (kill %v), %d comparisons, divergences %v, latency ms redis p50/p99 %.1f/%.1f mysql %.1f/%.1f",
			p.name, p.modes.Mode(p.name), p.kill.on.Load(), ps.Comparisons, nonZero(ps.Divergences),
			rep.LatencyMS[tandem.StoreRedis].P50, rep.LatencyMS[tandem.StoreRedis].P99,
			rep.LatencyMS[tandem.StoreMySQL].P50, rep.LatencyMS[tandem.StoreMySQL].P99)
	}
	fmt.Fprintf(&summary, "\nclaims issued >= %s before expiry: %d; answered unavailable during the cut: %d",
		claimMargin, r.must.Load(), r.exempt.Load())
	t.Log(summary.String())
	defer func() {
		if t.Failed() {
			r.eventsMu.Lock()
			t.Logf("chaos timeline:\n  %s", strings.Join(r.events, "\n  "))
			r.eventsMu.Unlock()
			lines := driverLog.lines()
			t.Logf("the MySQL driver's last %d log lines:\n  %s", driverLog.max, strings.Join(lines, "\n  "))
			// What the pods' MySQL proxies saw of the connections those
			// lines name.
			ports := map[string]bool{}
			for _, l := range lines {
				if m := clientPort.FindStringSubmatch(l); m != nil {
					ports[m[1]] = true
				}
			}
			for _, p := range r.pods {
				var seen []string
				for _, l := range p.proxyLog.lines() {
					for port := range ports {
						if strings.Contains(l, " "+port+":") || strings.Contains(l, " "+port+" ") || strings.HasSuffix(l, " "+port) || strings.Contains(l, ":"+port+" ") || strings.HasSuffix(l, ":"+port) {
							seen = append(seen, l)
							break
						}
					}
				}
				if len(seen) > 0 {
					t.Logf("pod %s's MySQL proxy on those connections:\n  %s", p.name, strings.Join(seen, "\n  "))
				}
			}
		}
	}()

	// Invariant 3: no lost reservation; repeated claims answer claimed.
	if r.lost.n > 0 {
		t.Errorf("%d lost reservations (want 0), first: \n  %s", r.lost.n, strings.Join(r.lost.first, "\n  "))
	}
	if r.replays.n > 0 {
		t.Errorf("%d repeated claims did not answer claimed, first: \n  %s", r.replays.n, strings.Join(r.replays.first, "\n  "))
	}

	// Invariant 1 and exactly-once claims: the ledger deducted exactly the
	// claimed carts, reads stock less claims, and no moment had more units
	// held or sold than stocked.
	deducted := map[soak.CartID]bool{}
	for _, p := range r.pods {
		d, err := readClaims(ctx, p.dsn)
		if err != nil {
			t.Fatalf("pod %s: read the ledger's claim record: %v", p.name, err)
		}
		for id := range d {
			deducted[id] = true
		}
	}
	problems, resolved := r.book.Reconcile(deducted)
	for _, pr := range problems {
		t.Error(pr)
	}
	t.Logf("%d carts deducted by the ledgers; %d of them answered an error to their claim (resolved from the claim record)", len(deducted), resolved)
	want := r.book.ExpectedOnHand()
	for _, p := range r.pods {
		got, err := p.mysql.Ledger().ListOnHand(ctx)
		if err != nil {
			t.Fatalf("pod %s ledger: %v", p.name, err)
		}
		for _, k := range p.keys() {
			if got[k] != want[k] {
				t.Errorf("ledger %s: got on_hand %d, want %d (stocked %d less claimed)", k, got[k], want[k], r.book.Stocked(k))
			}
		}
	}
	for _, o := range r.book.Oversold() {
		if len(o.RacedExpiry) > 0 {
			t.Errorf("oversold %s: the claims of %v were issued before their holds expired and answered after: "+
				"the reaper returned the units while the claim was between its ledger step and its store step, and they were sold again",
				o, o.RacedExpiry)
			continue
		}
		t.Errorf("oversold %s", o)
		t.Logf("comparisons of the carts of %s:\n  %s", o.Key, strings.Join(carts.of(o), "\n  "))
	}

	// Invariant 5: at rest both maintained stores agree with the ledger and
	// with each other hold by hold, by themselves: no repair, no resync
	// before the check. The audit is then clean.
	for _, p := range r.pods {
		ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		if d, err := p.router.Converged(ctx); err != nil {
			t.Errorf("pod %s at rest (mode %s): %v", p.name, p.modes.Mode(p.name), err)
		} else {
			t.Logf("pod %s converged at rest: %d holds compared; convergence %+v", p.name, d.Holds, p.router.ConvergeStats().Results)
		}
		cancel()
		actx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		a, err := p.router.Audit(actx)
		cancel()
		if err != nil {
			t.Fatalf("pod %s audit: %v", p.name, err)
		}
		if !a.Clean || a.Converged > 0 || a.Recounted > 0 {
			t.Errorf("pod %s audit at rest: %+v; want clean with nothing to fix", p.name, a)
		}
	}
	// Invariant 4 (and Redis's own): each store is consistent at rest,
	// that is once the pods converged (above), not while the dirty-cart
	// worker still converges the carts the run left. (Redis's available
	// -1 at rest, seen in CI, was a sweep's recount inside a legacy
	// claim's window, and no sweep at all in mode redis: TestRecount,
	// TestConverge_RedisAloneFollowsTheLedger.)
	for _, p := range r.pods {
		for _, s := range []tandem.ReservationStore{p.redis, p.mysql} {
			vs, err := s.CheckInvariants(ctx)
			if err != nil {
				t.Fatalf("pod %s %s invariants: %v", p.name, s.Name(), err)
			}
			for _, v := range vs {
				t.Errorf("pod %s %s invariant broken at rest: %s %s %s", p.name, s.Name(), v.Key, v.CartToken, v.Message)
			}
		}
	}

	// No goroutine leak, memory back near its baseline.
	closeAll()
	goleak.VerifyNone(t, ignore)
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	t.Logf("heap in use: %d KiB before the run, %d KiB after it (the book of %d carts still live)",
		before.HeapAlloc>>10, after.HeapAlloc>>10, granted)
	if limit := 3*before.HeapAlloc + 64<<20; after.HeapAlloc > limit {
		t.Errorf("heap after the run: got %d KiB, want at most %d KiB (3x baseline + 64 MiB)", after.HeapAlloc>>10, limit>>10)
	}
}

// readClaims returns the carts the pod's ledger deducted, read straight
// from its claim record.
func readClaims(ctx context.Context, dsn string) (map[soak.CartID]bool, error) {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, "SELECT shop_id, cart_token FROM claims")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[soak.CartID]bool{}
	for rows.Next() {
		var id soak.CartID
		if err := rows.Scan(&id.ShopID, &id.Token); err != nil {
			return nil, err
		}
		out[id] = true
	}
	return out, rows.Err()
}

func nonZero(m map[tandem.DivergenceKind]int64) map[tandem.DivergenceKind]int64 {
	out := map[tandem.DivergenceKind]int64{}
	for k, v := range m {
		if v != 0 {
			out[k] = v
		}
	}
	return out
}

func deref(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

// tailWriter keeps the last max lines written to it.
type tailWriter struct {
	mu   sync.Mutex
	max  int
	tail []string
}

func (w *tailWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.tail = append(w.tail, strings.TrimRight(string(b), "\n"))
	if len(w.tail) > w.max {
		w.tail = w.tail[len(w.tail)-w.max:]
	}
	return len(b), nil
}

func (w *tailWriter) lines() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.tail)
}

// clientPort finds the client's port in a driver log line.
var clientPort = regexp.MustCompile(`127\.0\.0\.1:(\d+)->`)

// cartLog is a Recorder that keeps every comparison of each cart and hands
// it on to next.
type cartLog struct {
	next dualwrite.Recorder
	mu   sync.Mutex
	m    map[soak.CartID][]string
}

func (l *cartLog) Record(c tandem.Comparison) {
	if c.CartToken != "" {
		line := fmt.Sprintf("%s %s %s sot %s: %s %v | %s %v %s; kind %q repaired %v contention %v", c.At.Format("15:04:05.000"),
			c.CartToken, c.Op, c.SourceOfTruth, c.Primary.Status, c.Primary.Lines, c.Shadow.Status, c.Shadow.Lines, c.Shadow.Message,
			c.Kind, c.Repaired, c.Contention)
		l.mu.Lock()
		id := soak.CartID{ShopID: c.ShopID, Token: c.CartToken}
		l.m[id] = append(l.m[id], line)
		l.mu.Unlock()
	}
	l.next.Record(c)
}

// of returns the comparisons of the carts an oversell names.
func (l *cartLog) of(o soak.Oversell) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, c := range o.Carts {
		token, _, _ := strings.Cut(c, " ")
		out = append(out, l.m[soak.CartID{ShopID: o.Key.ShopID, Token: token}]...)
	}
	return out
}
