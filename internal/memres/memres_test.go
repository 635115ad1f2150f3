package memres_test

import (
	"context"
	"testing"
	"time"

	"github.com/tandemhq/tandem/internal/conformance"
	"github.com/tandemhq/tandem/internal/memres"
)

// newModel is the conformance factory for the model: a fresh store and
// ledger on a settable clock.
func newModel(t *testing.T) conformance.Harness {
	clock := conformance.NewClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	s := memres.NewStore(memres.NewLedger())
	s.Now = clock.Now
	if err := s.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return conformance.Harness{Store: s, Clock: clock}
}

func TestConformance(t *testing.T) {
	conformance.Run(t, newModel)
}

func TestProperty(t *testing.T) {
	conformance.RunProperty(t, newModel)
}
