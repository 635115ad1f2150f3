package redisres_test

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/tandemhq/tandem/internal/conformance"
	"github.com/tandemhq/tandem/internal/memres"
	"github.com/tandemhq/tandem/internal/testenv"
	"github.com/tandemhq/tandem/mysqlres"
	"github.com/tandemhq/tandem/redisres"
)

// newRealHarness runs the engine as production does: real Redis, and the
// pod ledger in a real MariaDB database.
func newRealHarness(t *testing.T) conformance.Harness {
	rdb, prefix := testenv.MustRedis(t)
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

// newFastHarness runs the engine on miniredis with an in-memory ledger: the
// fast path that runs under -short too.
func newFastHarness(t *testing.T) conformance.Harness {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	clock := conformance.NewClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	s := redisres.NewStore(rdb, memres.NewLedger())
	s.Prefix, s.Now = "t:", clock.Now
	if err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return conformance.Harness{Store: s, Clock: clock}
}

func TestConformance(t *testing.T) {
	t.Run("Real", func(t *testing.T) { conformance.Run(t, newRealHarness) })
	t.Run("Miniredis", func(t *testing.T) { conformance.Run(t, newFastHarness) })
}

func TestConformanceProperty(t *testing.T) {
	t.Run("Real", func(t *testing.T) {
		testenv.RequireIntegration(t)
		conformance.RunProperty(t, newRealHarness)
	})
	t.Run("Miniredis", func(t *testing.T) { conformance.RunProperty(t, newFastHarness) })
}
