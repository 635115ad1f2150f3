package mysqlres_test

import (
	"context"
	"testing"
	"time"

	"github.com/tandemhq/tandem/internal/conformance"
	"github.com/tandemhq/tandem/internal/testenv"
	"github.com/tandemhq/tandem/mysqlres"
)

// newConformanceHarness opens the engine on a fresh database with the
// suite's clock and a small pool, so replenishment runs in every scenario.
func newConformanceHarness(t *testing.T) conformance.Harness {
	dsn := testenv.MustCreateDatabase(t)
	clock := conformance.NewClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	s := mysqlres.NewStore(dsn)
	s.Now = clock.Now
	s.PoolCap = 16
	if err := s.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return conformance.Harness{Store: s, Clock: clock}
}

func TestConformance(t *testing.T) {
	conformance.Run(t, newConformanceHarness)
}

func TestConformanceProperty(t *testing.T) {
	testenv.RequireIntegration(t)
	conformance.RunProperty(t, newConformanceHarness)
}
