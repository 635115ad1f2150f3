package dualwrite_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/internal/rediscluster"
	"github.com/tandemhq/tandem/internal/testenv"
)

// buyerTally counts what buyers were answered, per operation and code.
type buyerTally struct {
	mu      sync.Mutex
	answers map[string]int
	claimed map[int64]int64 // units whose claim answered claimed, per shop
	slowest time.Duration
	lastErr map[string]string // the last error message per operation
}

func (b *buyerTally) add(op string, err error, took time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	code := tandem.ErrorCode(err)
	if code == "" {
		code = "ok"
	}
	b.answers[op+":"+code]++
	b.slowest = max(b.slowest, took)
	if err != nil {
		b.lastErr[op] = err.Error()
	}
}

// TestCluster_FailoverMidTraffic kills a master of the pod's Redis Cluster
// while buyers reserve, claim and release on every master, with Redis the
// source of truth (shadow mode). The dead master's replica takes over.
// Buyers get answers or 503s, never another error; a buyer retries a 503
// with the same cart token, as checkout does, and every cart ends claimed,
// released or refused; the ledger loses exactly the units whose claims
// answered claimed (no oversell, no double deduction). Afterwards the audit
// reports whatever drift the failover left and a resync from MySQL repairs
// it: the audit is clean, both stores' invariants hold and they agree
// hold by hold.
func TestCluster_FailoverMidTraffic(t *testing.T) {
	testenv.RequireIntegration(t)
	c := rediscluster.MustStart(t, rediscluster.Options{Replicas: 1})
	p := mustOpenClusterPod(t, c, tandem.ModeShadow)
	ctx := context.Background()
	const shops, stock = 9, 1000
	for shop := int64(1); shop <= shops; shop++ {
		if _, err := p.SetOnHand(ctx, tandem.Key{ShopID: shop, ItemID: 100, GroupID: 1}, stock); err != nil {
			t.Fatal(err)
		}
	}
	// The victim: the master of shop 1's slot.
	probe := c.NewClient()
	defer probe.Close()
	victim, err := c.MasterOf(ctx, probe, fmt.Sprintf("%s{1}:expiry", p.redis.Prefix))
	if err != nil {
		t.Fatal(err)
	}

	tally := &buyerTally{answers: map[string]int{}, claimed: map[int64]int64{}, lastErr: map[string]string{}}
	// done stops new carts; a buyer finishes the cart it has (a cart left
	// reserved, or claimed in the ledger with its answer lost, at the end
	// is not what the failover did). abandon stops every buyer at once, on
	// the way to a failure.
	var done, abandon atomic.Bool
	var afterKill atomic.Int64 // operations answered ok on shop 1 after the kill
	var killed atomic.Bool
	var ops atomic.Int64
	// retry runs op until it answers anything but 503, as a checkout
	// client does with an idempotent call.
	retry := func(name string, op func(ctx context.Context) error) error {
		for attempt := 0; ; attempt++ {
			start := time.Now()
			opCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
			err := op(opCtx)
			cancel()
			tally.add(name, err, time.Since(start))
			if tandem.ErrorCode(err) != tandem.EUNAVAILABLE || attempt == 2000 || abandon.Load() {
				return err
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	var wg sync.WaitGroup
	for b := 0; b < 6; b++ {
		wg.Add(1)
		go func(b int) {
			defer wg.Done()
			for n := 0; !done.Load(); n++ {
				shop := int64(1 + (b+n)%shops)
				token := fmt.Sprintf("b%d-%d", b, n)
				err := retry("reserve", func(ctx context.Context) error {
					_, err := p.Reserve(ctx, cart(token, shop, one(100, 1, 1)))
					return err
				})
				if err != nil {
					if tandem.ErrorCode(err) != tandem.EINSUFFICIENT && !abandon.Load() {
						t.Errorf("reserve %s: %v", token, err)
					}
					continue
				}
				if n%4 != 0 {
					err = retry("release", func(ctx context.Context) error {
						_, err := p.Release(ctx, shop, token)
						return err
					})
				} else {
					err = retry("claim", func(ctx context.Context) error {
						_, err := p.Claim(ctx, shop, token)
						return err
					})
					if err == nil {
						tally.mu.Lock()
						tally.claimed[shop]++
						tally.mu.Unlock()
					}
				}
				if err != nil && !abandon.Load() {
					t.Errorf("settle %s: %v", token, err)
				}
				ops.Add(1)
				if shop == 1 && killed.Load() {
					afterKill.Add(1)
				}
			}
		}(b)
	}
	waitFor(t, "traffic before the kill", func() bool { return ops.Load() >= 60 })
	if err := c.Kill(victim); err != nil {
		t.Fatal(err)
	}
	killed.Store(true)
	killedAt := time.Now()
	t.Logf("killed master %s after %d carts", victim, ops.Load())
	hctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	err = c.WaitHealthy(hctx)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("replica took over after %s", time.Since(killedAt).Round(time.Millisecond))
	for deadline := time.Now().Add(2 * time.Minute); afterKill.Load() < 5 && !t.Failed(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			// The nodes' logs go with the cluster's directory: show them.
			nodes, err := c.Nodes(ctx)
			t.Logf("nodes: %+v (%v)", nodes, err)
			logs, _ := filepath.Glob(filepath.Join(c.Dir(), "*.log"))
			for _, f := range logs {
				b, _ := os.ReadFile(f)
				t.Logf("%s:\n%s", f, b)
			}
			done.Store(true)
			abandon.Store(true)
			wg.Wait()
			tally.mu.Lock()
			defer tally.mu.Unlock()
			t.Fatalf("shop 1 not served again after the failover: answers %v, last errors %q", tally.answers, tally.lastErr)
		}
	}
	t.Logf("shop 1 served again after %s", time.Since(killedAt).Round(time.Millisecond))
	done.Store(true)
	wg.Wait()
	p.Wait()
	t.Logf("answers: %v; slowest answer %s", tally.answers, tally.slowest)
	if tally.answers["reserve:"+tandem.EUNAVAILABLE]+tally.answers["claim:"+tandem.EUNAVAILABLE]+tally.answers["release:"+tandem.EUNAVAILABLE] == 0 {
		t.Log("no buyer saw a 503: every call to the dead master landed after the failover")
	}

	// No oversell, no double deduction: the ledger lost exactly the
	// claimed units.
	for shop := int64(1); shop <= shops; shop++ {
		k := tandem.Key{ShopID: shop, ItemID: 100, GroupID: 1}
		if got, want := p.onHand(t, k), stock-tally.claimed[shop]; got != want {
			t.Errorf("ledger on_hand of shop %d: got %d, want %d (%d claimed)", shop, got, want, tally.claimed[shop])
		}
		if tally.claimed[shop] > stock {
			t.Errorf("shop %d: %d units claimed of %d", shop, tally.claimed[shop], stock)
		}
	}

	// The audit and the resync from MySQL judge the stores at rest: the
	// copies that timed out during the failover (MySQL past shadow.timeout
	// on a loaded machine) are converged first, or a resync from MySQL
	// would put back into Redis the holds of carts Redis released since.
	// Carts that cannot converge (a write the failover lost) are left to
	// the audit and the resync, as before.
	t.Logf("after the traffic: %d dirty carts, convergences %v", p.DirtyCarts(), p.ConvergeStats().Results)
	for deadline := time.Now().Add(time.Minute); p.DirtyCarts() > 0 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("before the audit: %d dirty carts, convergences %v", p.DirtyCarts(), p.ConvergeStats().Results)
	a, err := p.Audit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("audit after the failover: clean=%v, %d drifted of %d, %d carts converged, %d recounted; then %d dirty carts, convergences %v",
		a.Clean, len(a.Drifted), a.Checked, a.Converged, a.Recounted, p.DirtyCarts(), p.ConvergeStats().Results)
	if _, err := p.Resync(ctx); err != nil {
		t.Fatal(err)
	}
	// At rest both stores agree hold by hold and with the ledger
	// (invariant 5), and the audit is clean.
	p.mustConverge(t)
	for shop := int64(1); shop <= shops; shop++ {
		k := tandem.Key{ShopID: shop, ItemID: 100, GroupID: 1}
		got := p.counters(t, p.redis, k)
		if want := stock - tally.claimed[shop]; got.Reserved != 0 || got.Available != want {
			t.Errorf("redis counters of shop %d after resync: got %d reserved, %d available (on_hand %d), want 0 reserved, %d available",
				shop, got.Reserved, got.Available, got.OnHand, want)
		}
	}
}

// waitFor polls cond until it holds; the generous bound only keeps a
// broken run from hanging the suite.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not observed", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if t.Failed() {
		t.Fatalf("%s: the test failed meanwhile", what)
	}
}
