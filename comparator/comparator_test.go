package comparator_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/comparator"
)

// clock is a settable time source.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// memLog is an in-memory DivergenceLog; block, when set, holds every append
// until it is closed.
type memLog struct {
	mu    sync.Mutex
	ds    []tandem.Divergence
	block chan struct{}
	err   error
}

func (l *memLog) AppendDivergences(ctx context.Context, ds []tandem.Divergence) error {
	if l.block != nil {
		select {
		case <-l.block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return l.err
	}
	l.ds = append(l.ds, ds...)
	return nil
}

func (l *memLog) Divergences(ctx context.Context, f tandem.DivergenceFilter) ([]tandem.Divergence, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []tandem.Divergence
	for i := len(l.ds) - 1; i >= 0; i-- {
		if (f.Pod == "" || l.ds[i].Pod == f.Pod) && (f.Kind == "" || l.ds[i].Kind == f.Kind) {
			out = append(out, l.ds[i])
		}
	}
	return out, nil
}

func (l *memLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.ds)
}

func comparison(pod string, kind tandem.DivergenceKind) tandem.Comparison {
	return tandem.Comparison{
		Pod: pod, Op: tandem.OpReserve, ShopID: 1, CartToken: "c-1", SourceOfTruth: tandem.StoreRedis,
		Primary: tandem.Outcome{Store: tandem.StoreRedis, Status: "reserved", Latency: time.Millisecond},
		Shadow:  tandem.Outcome{Store: tandem.StoreMySQL, Status: "reserved", Latency: 4 * time.Millisecond},
		Kind:    kind,
	}
}

func newComparator(t *testing.T, clk *clock, log comparator.DivergenceLog) *comparator.Comparator {
	t.Helper()
	c := comparator.New(comparator.Config{Window: time.Minute, Bucket: 10 * time.Second, Log: log, Now: clk.Now})
	if err := c.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestComparator_Window(t *testing.T) {
	t.Run("CountsPerPodAndKind", func(t *testing.T) {
		clk := newClock()
		c := newComparator(t, clk, nil)
		for range 96 {
			c.Record(comparison("pod-a", ""))
		}
		c.Record(comparison("pod-a", tandem.KindOutcomeMismatch))
		c.Record(comparison("pod-a", tandem.KindShadowDropped))
		c.Record(comparison("pod-a", tandem.KindShadowTimeout))
		c.Record(comparison("pod-a", tandem.KindShadowTimeout))
		c.Record(comparison("pod-b", tandem.KindLocationMismatch))

		r := c.Report("pod-a", tandem.ModeShadow)
		if r.Comparisons != 100 {
			t.Fatalf("comparisons: got %d, want 100", r.Comparisons)
		}
		if r.Matches != 96 {
			t.Errorf("matches: got %d, want 96", r.Matches)
		}
		want := map[tandem.DivergenceKind]int64{
			tandem.KindOutcomeMismatch: 1, tandem.KindLocationMismatch: 0, tandem.KindShadowError: 0,
			tandem.KindShadowTimeout: 2, tandem.KindShadowDropped: 1, tandem.KindStateDrift: 0,
		}
		for k, n := range want {
			if r.Divergences[k] != n {
				t.Errorf("divergences[%s]: got %d, want %d", k, r.Divergences[k], n)
			}
		}
		if r.DivergenceRate != 0.04 {
			t.Errorf("divergence rate: got %v, want 0.04", r.DivergenceRate)
		}
		if r.Window != "1m" || r.Mode != tandem.ModeShadow || r.Pod != "pod-a" {
			t.Errorf("labels: got %q %q %q, want 1m shadow pod-a", r.Window, r.Mode, r.Pod)
		}
		n, rate := c.GateStats("pod-b")
		if n != 1 || rate != 1 {
			t.Errorf("pod-b gate stats: got %d %v, want 1 1", n, rate)
		}
	})

	t.Run("OldBucketsLeaveTheWindow", func(t *testing.T) {
		clk := newClock()
		c := newComparator(t, clk, nil)
		for range 10 {
			c.Record(comparison("pod-a", tandem.KindOutcomeMismatch))
		}
		clk.Advance(30 * time.Second)
		for range 10 {
			c.Record(comparison("pod-a", ""))
		}
		if n, rate := c.GateStats("pod-a"); n != 20 || rate != 0.5 {
			t.Fatalf("inside the window: got %d %v, want 20 0.5", n, rate)
		}
		clk.Advance(40 * time.Second) // the first 10 are now 70 s old
		if n, rate := c.GateStats("pod-a"); n != 10 || rate != 0 {
			t.Fatalf("after the first bucket left: got %d %v, want 10 0", n, rate)
		}
		clk.Advance(time.Hour)
		if n, rate := c.GateStats("pod-a"); n != 0 || rate != 0 {
			t.Fatalf("after the window: got %d %v, want 0 0", n, rate)
		}
		// A reused ring slot starts from zero.
		c.Record(comparison("pod-a", ""))
		if n, _ := c.GateStats("pod-a"); n != 1 {
			t.Fatalf("after reuse: got %d, want 1", n)
		}
		if got := c.Stats().Pods["pod-a"].Comparisons; got != 21 {
			t.Errorf("cumulative comparisons: got %d, want 21", got)
		}
	})

	t.Run("StateDriftIsReportedButNotInTheRate", func(t *testing.T) {
		clk := newClock()
		c := newComparator(t, clk, nil)
		c.Record(comparison("pod-a", ""))
		one := int64(1)
		c.RecordAudit(tandem.Audit{Pod: "pod-a", Checked: 5, Drifted: []tandem.Drift{
			{ShopID: 1, ItemID: 1, GroupID: 1, LedgerOnHand: 3, RedisAvailable: &one},
			{ShopID: 1, ItemID: 2, GroupID: 1, LedgerOnHand: 3},
		}})
		r := c.Report("pod-a", tandem.ModeShadow)
		if r.Divergences[tandem.KindStateDrift] != 2 {
			t.Errorf("state_drift: got %d, want 2", r.Divergences[tandem.KindStateDrift])
		}
		if r.DivergenceRate != 0 || r.Matches != 1 {
			t.Errorf("rate and matches: got %v %d, want 0 1", r.DivergenceRate, r.Matches)
		}
		at, clean, ok := c.LastAudit("pod-a")
		if !ok || clean || !at.Equal(clk.Now()) {
			t.Errorf("last audit: got %v %v %v, want %v false true", at, clean, ok, clk.Now())
		}
	})

	t.Run("LastAuditUnknownPod", func(t *testing.T) {
		c := newComparator(t, newClock(), nil)
		if _, _, ok := c.LastAudit("nope"); ok {
			t.Error("got ok for a pod never audited, want false")
		}
		if n, rate := c.GateStats("nope"); n != 0 || rate != 0 {
			t.Errorf("got %d %v, want 0 0", n, rate)
		}
	})
}

func TestComparator_ErrorStats(t *testing.T) {
	c := newComparator(t, newClock(), nil)
	for i := range 10 {
		cmp := comparison("pod-a", "")
		switch i {
		case 0:
			cmp.Primary.Status, cmp.Kind = tandem.EUNAVAILABLE, tandem.KindOutcomeMismatch
		case 1:
			cmp.Primary.Status = tandem.EINTERNAL
		case 2:
			cmp.Primary.Status = tandem.EINSUFFICIENT // an answer, not a failure
		}
		c.Record(cmp)
	}
	n, rate := c.ErrorStats("pod-a")
	if n != 10 || rate != 0.2 {
		t.Errorf("got %d %v, want 10 0.2", n, rate)
	}
	if got := c.Stats().Pods["pod-a"].SourceOfTruthErrors; got != 2 {
		t.Errorf("cumulative: got %d, want 2", got)
	}
}

func TestComparator_Latency(t *testing.T) {
	clk := newClock()
	c := newComparator(t, clk, nil)
	for i := range 100 {
		cmp := comparison("pod-a", "")
		cmp.Primary.Latency = time.Duration(i+1) * time.Millisecond // 1..100 ms
		cmp.Shadow.Latency = 10 * time.Millisecond
		c.Record(cmp)
	}
	dropped := comparison("pod-a", tandem.KindShadowDropped)
	dropped.Shadow.Latency = 0
	c.Record(dropped)
	r := c.Report("pod-a", tandem.ModeShadow)
	redis := r.LatencyMS[tandem.StoreRedis]
	// Histogram buckets are 25 % wide: allow that much error.
	if redis.P50 < 40 || redis.P50 > 63 {
		t.Errorf("redis p50: got %v ms, want about 50", redis.P50)
	}
	if redis.P99 < 79 || redis.P99 > 125 {
		t.Errorf("redis p99: got %v ms, want about 99", redis.P99)
	}
	mysql := r.LatencyMS[tandem.StoreMySQL]
	if mysql.P50 < 8 || mysql.P50 > 12.5 || mysql.P99 < 8 || mysql.P99 > 12.5 {
		t.Errorf("mysql p50/p99: got %v/%v ms, want about 10 (a dropped shadow has no latency)", mysql.P50, mysql.P99)
	}
	empty := c.Report("pod-none", tandem.ModeRedis).LatencyMS[tandem.StoreMySQL]
	if empty.P50 != 0 || empty.P99 != 0 {
		t.Errorf("empty pod: got %v, want zeros", empty)
	}
}

func TestComparator_Persistence(t *testing.T) {
	t.Run("DivergencesOnly", func(t *testing.T) {
		log := &memLog{}
		clk := newClock()
		c := newComparator(t, clk, log)
		c.Record(comparison("pod-a", ""))
		c.Record(comparison("pod-a", tandem.KindOutcomeMismatch))
		c.Record(comparison("pod-b", tandem.KindShadowError))
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		ds, err := c.Divergences(context.Background(), tandem.DivergenceFilter{Pod: "pod-a"})
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) != 1 || ds[0].Kind != tandem.KindOutcomeMismatch || ds[0].CartToken != "c-1" ||
			ds[0].Primary.Status != "reserved" || !ds[0].At.Equal(clk.Now()) {
			t.Fatalf("got %+v, want one outcome_mismatch of c-1 at %v", ds, clk.Now())
		}
		if got := c.Stats().Persisted; got != 2 {
			t.Errorf("persisted: got %d, want 2", got)
		}
	})

	t.Run("FullQueueDropsAndKeepsCounting", func(t *testing.T) {
		log := &memLog{block: make(chan struct{})}
		c := comparator.New(comparator.Config{QueueSize: 4, BatchSize: 1, Log: log, Now: newClock().Now})
		if err := c.Open(); err != nil {
			t.Fatal(err)
		}
		const n = 50
		for range n {
			c.Record(comparison("pod-a", tandem.KindOutcomeMismatch)) // must not block
		}
		s := c.Stats()
		// The writer holds at most one batch, the queue at most 4.
		if s.Dropped < n-5 {
			t.Errorf("dropped: got %d, want >= %d", s.Dropped, n-5)
		}
		if s.Pods["pod-a"].Divergences[tandem.KindOutcomeMismatch] != n {
			t.Errorf("counted: got %d, want %d", s.Pods["pod-a"].Divergences[tandem.KindOutcomeMismatch], n)
		}
		close(log.block)
		c.Close()
		s = c.Stats()
		if int64(log.len()) != s.Persisted || s.Persisted+s.Dropped != n {
			t.Errorf("persisted %d (log holds %d) + dropped %d: want %d in all", s.Persisted, log.len(), s.Dropped, n)
		}
	})

	t.Run("LogErrorsAreCountedAndReported", func(t *testing.T) {
		log := &memLog{err: errors.New("control database down")}
		var mu sync.Mutex
		var reported []error
		c := comparator.New(comparator.Config{Log: log, Now: newClock().Now, OnError: func(err error) {
			mu.Lock()
			defer mu.Unlock()
			reported = append(reported, err)
		}})
		c.Open()
		c.Record(comparison("pod-a", tandem.KindShadowError))
		c.Close()
		mu.Lock()
		defer mu.Unlock()
		if len(reported) == 0 || c.Stats().PersistErrors != 1 {
			t.Errorf("got %d reports and %d persist errors, want >0 and 1", len(reported), c.Stats().PersistErrors)
		}
	})

	t.Run("AuditDriftPersisted", func(t *testing.T) {
		log := &memLog{}
		c := newComparator(t, newClock(), log)
		two := int64(2)
		c.RecordAudit(tandem.Audit{Pod: "pod-a", Drifted: []tandem.Drift{{ShopID: 3, ItemID: 4, GroupID: 5, LedgerOnHand: 9, MySQLAvailable: &two}}})
		c.Close()
		ds, _ := log.Divergences(context.Background(), tandem.DivergenceFilter{Kind: tandem.KindStateDrift})
		if len(ds) != 1 || ds[0].ShopID != 3 || ds[0].Op != tandem.OpAudit || ds[0].Shadow.Status != "available=2" || ds[0].Primary.Status != "missing" {
			t.Fatalf("got %+v, want one state_drift of shop 3", ds)
		}
	})

	t.Run("CloseTwice", func(t *testing.T) {
		c := newComparator(t, newClock(), &memLog{})
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

func TestComparator_ConcurrentRecord(t *testing.T) {
	c := newComparator(t, newClock(), &memLog{})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 1000 {
				var kind tandem.DivergenceKind
				if i%100 == 0 {
					kind = tandem.KindOutcomeMismatch
				}
				c.Record(comparison([]string{"pod-a", "pod-b"}[g%2], kind))
				if i%250 == 0 {
					c.Report("pod-a", tandem.ModeShadow)
				}
			}
		}()
	}
	wg.Wait()
	n, rate := c.GateStats("pod-a")
	if n != 4000 || rate != 0.01 {
		t.Errorf("got %d %v, want 4000 0.01", n, rate)
	}
}

func TestFormatWindow(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{{15 * time.Minute, "15m"}, {time.Hour, "1h"}, {90 * time.Minute, "1h30m"}, {45 * time.Second, "45s"}, {90 * time.Second, "1m30s"}} {
		if got := comparator.FormatWindow(tc.d); got != tc.want {
			t.Errorf("FormatWindow(%v): got %q, want %q", tc.d, got, tc.want)
		}
	}
}
