package redisres_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/internal/conformance"
	"github.com/tandemhq/tandem/internal/memres"
	"github.com/tandemhq/tandem/internal/rediscluster"
	"github.com/tandemhq/tandem/internal/testenv"
	"github.com/tandemhq/tandem/mysqlres"
	"github.com/tandemhq/tandem/redisres"
)

// cluster is the package's Redis Cluster (three masters), started once by
// TestMain; nil under -short.
var cluster *rediscluster.Cluster

func TestMain(m *testing.M) { rediscluster.RunMain(m, &cluster) }

// MustOpenClusterStore opens a store on the package's Redis Cluster under a
// fresh prefix.
func MustOpenClusterStore(tb testing.TB) *env {
	tb.Helper()
	testenv.RequireIntegration(tb)
	rdb, prefix := cluster.MustClient(tb)
	return MustOpenStoreOn(tb, rdb, prefix, memres.NewLedger(), newClock())
}

// newClusterHarness runs the engine as production does on a cluster: the
// pod's Redis Cluster and its ledger in a real MariaDB database.
func newClusterHarness(t *testing.T) conformance.Harness {
	testenv.RequireIntegration(t)
	rdb, prefix := cluster.MustClient(t)
	dsn := testenv.MustCreateDatabase(t)
	clock := conformance.NewClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	ms := mysqlres.NewStore(dsn)
	ms.Now = clock.Now
	if err := ms.Open(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ms.Close() })
	if err := ms.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	s := redisres.NewStore(rdb, ms.Ledger())
	s.Prefix, s.Now = prefix, clock.Now
	if err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return conformance.Harness{Store: s, Clock: clock}
}

func TestCluster_Conformance(t *testing.T) {
	conformance.Run(t, newClusterHarness)
}

func TestCluster_ConformanceProperty(t *testing.T) {
	testenv.RequireIntegration(t)
	conformance.RunProperty(t, newClusterHarness)
}

// clusterShops returns n shops whose keys land on every master.
func clusterShops(tb testing.TB, e *env, n int) []int64 {
	tb.Helper()
	ctx := context.Background()
	masters := map[string]bool{}
	shops := make([]int64, n)
	for i := range shops {
		shops[i] = int64(i + 1)
		m, err := cluster.MasterOf(ctx, clusterClient(tb, e), fmt.Sprintf("%s{%d}:expiry", e.Prefix, shops[i]))
		if err != nil {
			tb.Fatal(err)
		}
		masters[m] = true
	}
	if len(masters) < 3 {
		tb.Fatalf("shops 1..%d land on %d masters, want 3", n, len(masters))
	}
	return shops
}

func TestCluster_ManyShopsOnEveryMaster(t *testing.T) {
	e := MustOpenClusterStore(t)
	shops := clusterShops(t, e, 12)
	for _, shop := range shops {
		e.MustStock(t, key(shop, 100, 1), 5)
		e.MustStock(t, key(shop, 200, 2), 5)
		req := cartReq("buy", line(100, 2, 1), line(200, 1, 2))
		req.ShopID = shop
		e.MustReserve(t, req)
		req = cartReq("forget", line(100, 3, 1))
		req.ShopID = shop
		e.MustReserve(t, req)
	}
	got, err := e.ListCounters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2*len(shops) {
		t.Fatalf("list counters: got %d positions, want %d", len(got), 2*len(shops))
	}
	for _, c := range got {
		if c.Key.ItemID == 100 && (c.Available != 0 || c.Reserved != 5) {
			t.Errorf("counters %s: got %+v, want 5 reserved, 0 available", c.Key, c)
		}
	}
	holds, err := e.ActiveHolds(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(holds) != 2*len(shops) {
		t.Errorf("active holds: got %d, want %d", len(holds), 2*len(shops))
	}
	e.WantClean(t)

	for _, shop := range shops {
		if _, err := e.Claim(ctx, shop, "buy"); err != nil {
			t.Fatal(err)
		}
	}
	e.Clock.Add(tandem.DefaultTTL)
	if n, err := e.ExpireDue(ctx, e.Clock.Now(), 1000); n != len(shops) || err != nil {
		t.Fatalf("expire: got %d, %v, want %d, nil", n, err, len(shops))
	}
	for _, shop := range shops {
		e.WantCounters(t, key(shop, 100, 1), 3, 0, 3)
		e.WantLedger(t, key(shop, 100, 1), 3)
		e.WantStatus(t, shop, "forget", tandem.StatusExpired)
	}
	e.WantClean(t)

	// Rebuild (resync from MySQL) across every master: one hold per shop.
	var given []tandem.Reservation
	for _, shop := range shops {
		given = append(given, tandem.Reservation{CartToken: "rebuilt", ShopID: shop, Status: tandem.StatusReserved,
			ExpiresAt: e.Clock.Now().Add(time.Minute), Lines: []tandem.Line{{ItemID: 100, Quantity: 1, GroupID: 1}}})
	}
	if _, err := e.Rebuild(ctx, given); err != nil {
		t.Fatal(err)
	}
	holds, err = e.ActiveHolds(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(holds) != len(shops) {
		t.Errorf("active holds after rebuild: got %d, want %d", len(holds), len(shops))
	}
	e.WantClean(t)
}

func TestCluster_ConcurrentReapers(t *testing.T) {
	testenv.RequireIntegration(t)
	rdb, prefix := cluster.MustClient(t)
	ledger, clk := memres.NewLedger(), newClock()
	// Eight instances of the store share one cluster, as a pod's serve
	// instances do.
	stores := make([]*env, 8)
	for i := range stores {
		stores[i] = MustOpenStoreOn(t, rdb, prefix, ledger, clk)
	}
	e := stores[0]
	shops := clusterShops(t, e, 9)
	for _, shop := range shops {
		e.MustStock(t, key(shop, 100, 1), 100)
	}
	const perShop = 30
	for _, shop := range shops {
		for i := 0; i < perShop; i++ {
			req := cartReq(fmt.Sprintf("c-%d", i), line(100, 1, 1))
			req.ShopID = shop
			e.MustReserve(t, req)
		}
	}
	clk.Add(tandem.DefaultTTL)

	var total atomic.Int64
	var wg sync.WaitGroup
	for _, s := range stores {
		wg.Add(1)
		go func(s *env) {
			defer wg.Done()
			for {
				n, err := s.ExpireDue(ctx, clk.Now(), 7)
				if err != nil {
					t.Errorf("expire: %v", err)
					return
				}
				if n == 0 {
					return
				}
				total.Add(int64(n))
			}
		}(s)
	}
	wg.Wait()
	if n, err := e.ExpireDue(ctx, clk.Now(), 10000); n != 0 || err != nil {
		t.Errorf("final pass: got %d, %v, want 0, nil", n, err)
	}
	if want := int64(perShop * len(shops)); total.Load() != want {
		t.Errorf("holds expired: got %d, want %d (each exactly once)", total.Load(), want)
	}
	for _, shop := range shops {
		e.WantCounters(t, key(shop, 100, 1), 100, 0, 100)
	}
	e.WantClean(t)
}

func TestCluster_ConcurrentHotItem(t *testing.T) {
	e := MustOpenClusterStore(t)
	k := key(1, 100, 1)
	e.MustStock(t, k, 50)
	var ok, insufficient atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < 150; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			_, err := e.Reserve(ctx, cartReq(fmt.Sprintf("c-%d", i), line(100, 1, 1)))
			switch tandem.ErrorCode(err) {
			case "":
				ok.Add(1)
			case tandem.EINSUFFICIENT:
				insufficient.Add(1)
			default:
				t.Errorf("reserve c-%d: %v", i, err)
			}
		}(i)
	}
	wg.Wait()
	if ok.Load() != 50 || insufficient.Load() != 100 {
		t.Errorf("got %d reserved, %d insufficient, want 50, 100", ok.Load(), insufficient.Load())
	}
	e.WantCounters(t, k, 50, 50, 0)
	e.WantClean(t)
}

func TestCluster_ReserveScriptRunsTwice(t *testing.T) {
	e := MustOpenClusterStore(t)
	e.MustStock(t, key(1, 100, 1), 10)
	script, keys, args := redisres.ReserveScript(e.Store, cartReq("retry", line(100, 3, 1)))
	first, err := script.Run(ctx, e.RDB, keys, args...).StringSlice()
	if err != nil {
		t.Fatal(err)
	}
	second, err := script.Run(ctx, e.RDB, keys, args...).StringSlice()
	if err != nil {
		t.Fatal(err)
	}
	if first[0] != "ok" || second[0] != "replay" {
		t.Errorf("answers: got %q then %q, want ok then replay", first[0], second[0])
	}
	e.WantCounters(t, key(1, 100, 1), 10, 3, 7)
}

func TestCluster_KillSwitchChannel(t *testing.T) {
	testenv.RequireIntegration(t)
	rdb, prefix := cluster.MustClient(t)
	// Two instances with their own cluster clients: the subscriber may sit
	// on any node, the publisher write on another.
	other := cluster.NewClient()
	t.Cleanup(func() { other.Close() })
	a := MustOpenSwitch(t, redisres.NewKillSwitchChannel(rdb, prefix), nil)
	b := MustOpenSwitch(t, redisres.NewKillSwitchChannel(other, prefix), nil)
	if _, err := a.Engage(ctx, []string{"pod-a", "pod-b"}, ksChange); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "engage seen by b", func() bool { return b.Engaged("pod-a") && b.Engaged("pod-b") })
	if _, err := a.Disengage(ctx, []string{"pod-a"}, ksChange); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "disengage seen by b", func() bool { return !b.Engaged("pod-a") && b.Engaged("pod-b") })

	// The notification itself crosses the cluster (not only the polling).
	ch := redisres.NewKillSwitchChannel(other, prefix)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := ch.Watch(wctx)
	got := false
	deadline := time.Now().Add(15 * time.Second)
	for !got && time.Now().Before(deadline) {
		if err := redisres.NewKillSwitchChannel(rdb, prefix).Disengage(ctx, []string{"pod-c"}, time.Now()); err != nil {
			t.Fatal(err)
		}
		select {
		case <-w:
			got = true
		case <-time.After(50 * time.Millisecond):
		}
	}
	if !got {
		t.Fatal("no notification received across the cluster")
	}
}

func clusterClient(tb testing.TB, e *env) *redis.ClusterClient {
	tb.Helper()
	c, ok := e.RDB.(*redis.ClusterClient)
	if !ok {
		tb.Fatalf("store is not on a cluster client: %T", e.RDB)
	}
	return c
}
