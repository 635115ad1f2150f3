package dualwrite_test

import (
	"context"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/internal/conformance"
	"github.com/tandemhq/tandem/internal/rediscluster"
	"github.com/tandemhq/tandem/internal/testenv"
	"github.com/tandemhq/tandem/mysqlres"
	"github.com/tandemhq/tandem/redisres"
)

// cluster is the package's Redis Cluster (three masters), started once by
// TestMain; nil under -short.
var cluster *rediscluster.Cluster

func TestMain(m *testing.M) { rediscluster.RunMain(m, &cluster) }

// mustOpenClusterPod is mustOpenPod with the pod's Redis on a Redis
// Cluster (c, or the package's cluster when nil).
func mustOpenClusterPod(t *testing.T, c *rediscluster.Cluster, mode tandem.Mode) *pod {
	t.Helper()
	testenv.RequireIntegration(t)
	if c == nil {
		c = cluster
	}
	dsn := testenv.MustCreateDatabase(t)
	rdb, prefix := c.MustClient(t)
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
	return openRouter(t, rs, ms, clock, mode)
}

func TestCluster_ConformanceThroughRouter(t *testing.T) {
	for _, mode := range []tandem.Mode{tandem.ModeRedis, tandem.ModeShadow, tandem.ModeMySQL, tandem.ModeMySQLOnly} {
		t.Run(string(mode), func(t *testing.T) {
			conformance.Run(t, func(t *testing.T) conformance.Harness {
				p := mustOpenClusterPod(t, nil, mode)
				return conformance.Harness{Store: routed{p}, Clock: p.clock}
			})
		})
	}
}

// TestCluster_BackfillAuditResync runs the rollout's copies on a cluster:
// shops on every master, backfill into MySQL, a clean audit, drift made in
// Redis and found, resync from MySQL.
func TestCluster_BackfillAuditResync(t *testing.T) {
	p := mustOpenClusterPod(t, nil, tandem.ModeRedis)
	ctx := context.Background()
	const shops = 12
	for shop := int64(1); shop <= shops; shop++ {
		if _, err := p.SetOnHand(ctx, tandem.Key{ShopID: shop, ItemID: 100, GroupID: 1}, 10); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Reserve(ctx, cart("c-1", shop, one(100, 3, 1))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.Backfill(ctx); err != nil {
		t.Fatal(err)
	}
	p.modes.set(tandem.ModeShadow)
	for shop := int64(1); shop <= shops; shop++ {
		if _, err := p.Reserve(ctx, cart("c-2", shop, one(100, 2, 1))); err != nil {
			t.Fatal(err)
		}
	}
	p.mustAuditClean(t)

	// Drift: a counter changed behind the engine's back on some master.
	for _, shop := range []int64{2, 7, 11} {
		k := tandem.Key{ShopID: shop, ItemID: 100, GroupID: 1}
		if _, err := p.redis.FollowOnHand(ctx, k, 9, -1); err != nil {
			t.Fatal(err)
		}
	}
	a, err := p.Audit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !a.Clean || len(a.Found) != 3 || a.Recounted != 3 {
		t.Fatalf("audit: got clean=%v with %d found, %d recounted, want the 3 changed positions found and recounted", a.Clean, len(a.Found), a.Recounted)
	}
	if _, err := p.Resync(ctx); err != nil {
		t.Fatal(err)
	}
	p.mustAuditClean(t)
	for shop := int64(1); shop <= shops; shop++ {
		if got := p.counters(t, p.redis, tandem.Key{ShopID: shop, ItemID: 100, GroupID: 1}); got.Reserved != 5 || got.Available != 5 {
			t.Errorf("shop %d after resync: got %+v, want 5 reserved, 5 available", shop, got)
		}
	}
}
