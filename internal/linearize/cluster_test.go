package linearize_test

import (
	"context"
	"testing"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/internal/linearize"
	"github.com/tandemhq/tandem/internal/rediscluster"
	"github.com/tandemhq/tandem/internal/testenv"
	"github.com/tandemhq/tandem/mysqlres"
	"github.com/tandemhq/tandem/redisres"
)

// cluster is the package's Redis Cluster (three masters), started once by
// TestMain; nil under -short.
var cluster *rediscluster.Cluster

func TestMain(m *testing.M) { rediscluster.RunMain(m, &cluster) }

// mustOpenClusterStores is mustOpenStores with Redis on the package's
// Redis Cluster.
func mustOpenClusterStores(t *testing.T) stores {
	t.Helper()
	testenv.RequireIntegration(t)
	dsn := testenv.MustCreateDatabase(t)
	rdb, prefix := cluster.MustClient(t)
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

func TestCluster_Linearizable_Redis(t *testing.T) {
	s := mustOpenClusterStores(t)
	w := workload(112)
	w.SerialSettles, w.SerialStockCounts = true, true
	h := mustRun(t, linearize.StoreTarget(s.redis), w)
	mustCover(t, h)
	mustLinearizable(t, w, h)
	mustStoreInvariants(t, s.redis)
}

func TestCluster_Linearizable_Router(t *testing.T) {
	for i, mode := range []tandem.Mode{tandem.ModeRedis, tandem.ModeShadow, tandem.ModeMySQL, tandem.ModeMySQLOnly} {
		t.Run(string(mode), func(t *testing.T) {
			// Production settings, as on a single Redis (openPod).
			p := openPod(t, mustOpenClusterStores(t), mode)
			w := workload(120 + uint64(i))
			redisSoT := mode.SourceOfTruth() == tandem.StoreRedis
			w.SerialSettles, w.SerialStockCounts = redisSoT, redisSoT
			h := mustRun(t, linearize.ServiceTarget(p.router), w)
			mustCover(t, h)
			mustLinearizable(t, w, h)
			p.mustInvariants(t)
		})
	}
}
