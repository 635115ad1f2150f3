package bench_test

import (
	"math"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemhq/tandem/internal/bench"
)

func TestHoldsSince(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "tandem_mysql_conn_hold_seconds", Buckets: []float64{.001, .01, .1},
	}, []string{"conn_tag"})
	reg.MustRegister(h)
	// Before the window: slow holds that must not count.
	for range 50 {
		h.WithLabelValues("reserve").Observe(0.09)
	}
	means, p99 := bench.HoldsSince(reg, func() {
		// 100 holds of 0.5 ms then 100 of 5 ms: mean 2.75 ms; the p99 rank
		// (198) lies in the (1 ms, 10 ms] bucket, 98 of its 100 samples up.
		for range 100 {
			h.WithLabelValues("reserve").Observe(0.0005)
		}
		for range 100 {
			h.WithLabelValues("reserve").Observe(0.005)
		}
		h.WithLabelValues("replenish").Observe(0.05)
	})
	t.Run("MeanOfTheWindowOnly", func(t *testing.T) {
		if got, want := means["reserve"], 2.75; math.Abs(got-want) > 1e-9 {
			t.Errorf("got mean %v ms, want %v", got, want)
		}
	})
	t.Run("P99InterpolatedInItsBucket", func(t *testing.T) {
		if got, want := p99["reserve"], 1+9*0.98; math.Abs(got-want) > 1e-9 {
			t.Errorf("got p99 %v ms, want %v", got, want)
		}
	})
	t.Run("EveryTagObserved", func(t *testing.T) {
		if got := len(means); got != 2 {
			t.Errorf("got %d tags (%v), want 2", got, means)
		}
		if got, want := p99["replenish"], 10+90*0.99; math.Abs(got-want) > 1e-9 {
			t.Errorf("got replenish p99 %v ms, want %v", got, want)
		}
	})
}
