package comparator_test

import (
	"testing"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/comparator"
)

func TestComparator_AbortStats(t *testing.T) {
	t.Run("CountsTheRecentWindowOnly", func(t *testing.T) {
		clk := newClock()
		c := newComparator(t, clk, nil)
		for range 10 {
			c.Record(comparison("pod-a", tandem.KindOutcomeMismatch))
		}
		clk.Advance(30 * time.Second)
		for range 90 {
			c.Record(comparison("pod-a", ""))
		}
		s := c.AbortStats("pod-a")
		if s.Window != comparator.DefaultAbortWindow || s.Comparisons != 100 || s.Divergences != 10 || s.DivergenceRate() != 0.1 {
			t.Fatalf("got %+v, want 10 of 100 in the 1m window", s)
		}
		clk.Advance(45 * time.Second) // the divergences are 75 s old
		if s = c.AbortStats("pod-a"); s.Comparisons != 90 || s.Divergences != 0 {
			t.Fatalf("got %+v, want the 90 matches of 45 s ago only", s)
		}
		if s.Bad != 10 {
			t.Errorf("got bad %d, want 10 (every divergence since the start, window or not)", s.Bad)
		}
	})

	t.Run("CountsMySQLErrorsAsSourceOfTruthAndAsShadow", func(t *testing.T) {
		clk := newClock()
		c := newComparator(t, clk, nil)
		c.Record(tandem.Comparison{Pod: "pod-a", Op: tandem.OpReserve, Primary: tandem.Outcome{Store: tandem.StoreMySQL, Status: tandem.EUNAVAILABLE}})
		c.Record(tandem.Comparison{Pod: "pod-a", Op: tandem.OpReserve, Kind: tandem.KindShadowTimeout,
			Primary: tandem.Outcome{Store: tandem.StoreRedis, Status: "reserved"}, Shadow: tandem.Outcome{Store: tandem.StoreMySQL, Status: tandem.OutcomeTimeout}})
		c.Record(tandem.Comparison{Pod: "pod-a", Op: tandem.OpReserve, Primary: tandem.Outcome{Store: tandem.StoreRedis, Status: tandem.EUNAVAILABLE}})
		c.Record(tandem.Comparison{Pod: "pod-a", Op: tandem.OpReserve, Primary: tandem.Outcome{Store: tandem.StoreMySQL, Status: "reserved"}})
		s := c.AbortStats("pod-a")
		if s.Comparisons != 4 || s.MySQLErrors != 2 || s.Divergences != 1 || s.MySQLErrorRate() != 0.5 {
			t.Fatalf("got %+v, want 2 MySQL errors (one as SoT, one as shadow) and 1 divergence of 4", s)
		}
	})

	t.Run("UnknownPod", func(t *testing.T) {
		c := newComparator(t, newClock(), nil)
		if s := c.AbortStats("nope"); s.Comparisons != 0 || s.DivergenceRate() != 0 || s.MySQLErrorRate() != 0 {
			t.Errorf("got %+v, want nothing", s)
		}
	})
}

func TestComparator_Reset(t *testing.T) {
	clk := newClock()
	c := newComparator(t, clk, nil)
	for range 20 {
		c.Record(comparison("pod-a", tandem.KindOutcomeMismatch))
	}
	for range 80 {
		c.Record(comparison("pod-a", ""))
	}
	c.Record(comparison("pod-b", tandem.KindOutcomeMismatch))
	clk.Advance(time.Second) // the same 10 s bucket of the gates' window
	c.Reset("pod-a")
	for range 50 {
		c.Record(comparison("pod-a", ""))
	}
	if n, rate := c.GateStats("pod-a"); n != 50 || rate != 0 {
		t.Errorf("gate stats: got %d at %.3f, want the 50 matches after the reset", n, rate)
	}
	if s := c.AbortStats("pod-a"); s.Comparisons != 50 || s.Divergences != 0 || s.Bad != 0 || !s.Since.Equal(clk.Now()) {
		t.Errorf("abort stats: got %+v, want the 50 matches since the reset", s)
	}
	if r := c.Report("pod-a", tandem.ModeMySQL); r.Comparisons != 150 || r.Divergences[tandem.KindOutcomeMismatch] != 20 {
		t.Errorf("report: got %d comparisons, %v, want the whole window kept", r.Comparisons, r.Divergences)
	}
	if n, _ := c.GateStats("pod-b"); n != 1 {
		t.Errorf("pod-b: got %d comparisons, want its own kept", n)
	}
	// Later buckets count whole; the reset's bucket leaves the window.
	clk.Advance(20 * time.Second)
	c.Record(comparison("pod-a", tandem.KindOutcomeMismatch))
	if n, _ := c.GateStats("pod-a"); n != 51 {
		t.Errorf("got %d comparisons, want 51", n)
	}
	clk.Advance(15 * time.Minute)
	if n, _ := c.GateStats("pod-a"); n != 0 {
		t.Errorf("got %d comparisons a window later, want 0", n)
	}
}
