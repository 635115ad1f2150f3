package loadgen_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tandemhq/tandem/internal/loadgen"
)

func TestQuantile(t *testing.T) {
	var s []time.Duration
	for i := 1; i <= 1000; i++ {
		s = append(s, time.Duration(i))
	}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500}, {0.99, 990}, {0.999, 999}, {1, 1000}, {0, 1}} {
		if got := loadgen.Quantile(s, tc.q); got != tc.want {
			t.Errorf("q=%v: got %d, want %d", tc.q, got, tc.want)
		}
	}
	if got := loadgen.Quantile(nil, 0.5); got != 0 {
		t.Errorf("empty: got %d, want 0", got)
	}
}

func TestClosedCountsOpsAndErrors(t *testing.T) {
	r := loadgen.Closed(context.Background(), 4, 50*time.Millisecond, func(ctx context.Context, w int, seq int64) error {
		if seq%2 == 1 {
			return errors.New("odd")
		}
		return nil
	})
	if r.Ops == 0 {
		t.Fatal("got 0 ops, want some")
	}
	if r.Errors < r.Ops/2-4 || r.Errors > r.Ops/2+4 {
		t.Errorf("got %d errors of %d ops, want about half", r.Errors, r.Ops)
	}
}

func TestOpenOffersTheRate(t *testing.T) {
	r := loadgen.Open(context.Background(), 1000, 64, 200*time.Millisecond, func(ctx context.Context, w int, seq int64) error {
		return nil
	})
	// 1000/s for 0.2 s offers about 200 operations; the bound is loose on
	// purpose (a loaded machine may start late), it only catches a broken pacer.
	if r.Ops < 20 || r.Ops > 201 {
		t.Errorf("got %d ops, want about 200 and never more than offered", r.Ops)
	}
}
