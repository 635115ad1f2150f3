package throttle_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/throttle"
)

// mustNew returns pod-a's throttle with cfg and its registry.
func mustNew(t *testing.T, cfg throttle.Config) (*throttle.Throttle, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	th, err := throttle.New("pod-a", cfg, reg)
	if err != nil {
		t.Fatal(err)
	}
	return th, reg
}

// waitFor runs th.Wait(job) in a goroutine and returns its result
// channel.
func waitFor(ctx context.Context, th *throttle.Throttle, job string) chan error {
	done := make(chan error, 1)
	go func() { done <- th.Wait(ctx, job) }()
	return done
}

// throttledSeconds is tandem_throttled_seconds_total{job,reason}.
func throttledSeconds(reg *prometheus.Registry, job, reason string) float64 {
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "tandem_throttled_seconds_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["job"] == job && labels["reason"] == reason {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestThrottle_BuyerP99 checks, on synctest's clock, that slow buyers
// throttle a job until their slow reserves leave the window, that the
// state says why and since when, and that the time waited is counted by
// job and reason.
func TestThrottle_BuyerP99(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th, reg := mustNew(t, throttle.Config{})
		for range 50 {
			th.ObserveBuyer(41 * time.Millisecond)
		}
		start := time.Now()
		done := waitFor(t.Context(), th, tandem.JobBackfill)
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("Wait returned %v while buyers' p99 is 41ms", err)
		default:
		}
		st := th.State()
		if !st.Throttled || st.Signal != tandem.SignalBuyerP99 || st.Reason != "buyer p99 41ms > 20ms" || st.Since == nil {
			t.Fatalf("state %+v, want throttled by buyer p99 41ms > 20ms", st)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		waited := time.Since(start)
		if waited < throttle.DefaultBuyerWindow {
			t.Fatalf("waited %v, want until the slow reserves left the %v window", waited, throttle.DefaultBuyerWindow)
		}
		if got := throttledSeconds(reg, tandem.JobBackfill, tandem.SignalBuyerP99); got != waited.Seconds() {
			t.Fatalf("tandem_throttled_seconds_total{job=backfill,reason=buyer_p99} = %v, want %v", got, waited.Seconds())
		}
		time.Sleep(time.Millisecond)
		if st := th.State(); st.Throttled {
			t.Fatalf("state %+v after the window, want not throttled", st)
		}
	})
}

// TestThrottle_FewBuyers checks that a handful of slow reserves, fewer
// than MinBuyerSamples, judge nothing, and that fast buyers never throttle.
func TestThrottle_FewBuyers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th, _ := mustNew(t, throttle.Config{})
		for range throttle.DefaultMinBuyerSamples - 1 {
			th.ObserveBuyer(time.Second)
		}
		for range 1000 {
			th.ObserveAdmission(time.Millisecond)
		}
		start := time.Now()
		if err := th.Wait(t.Context(), tandem.JobSweep); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != 0 {
			t.Fatalf("waited %v, want 0", d)
		}
	})
}

// TestThrottle_AdmissionWait checks that buyers queueing in the MySQL
// engine's admission throttle, and that a negative limit turns the
// signal off.
func TestThrottle_AdmissionWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th, _ := mustNew(t, throttle.Config{})
		for range 100 {
			th.ObserveAdmission(30 * time.Millisecond)
		}
		st := th.State()
		if st.Signal != tandem.SignalAdmissionWait || !strings.Contains(st.Reason, "admission wait p99 30ms > 10ms") {
			t.Fatalf("state %+v, want throttled by the admission wait", st)
		}
		off, _ := mustNew(t, throttle.Config{MaxAdmissionWait: -1})
		for range 100 {
			off.ObserveAdmission(30 * time.Millisecond)
		}
		if st := off.State(); st.Throttled {
			t.Fatalf("state %+v with the signal off, want not throttled", st)
		}
	})
}

// TestThrottle_ThreadsRunning checks that a loaded server throttles until
// its Threads_running falls, and that many jobs asking at once poll the
// server at most once per Interval.
func TestThrottle_ThreadsRunning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th, reg := mustNew(t, throttle.Config{MaxThreadsRunning: 20})
		var running atomic.Int64
		var polls atomic.Int64
		running.Store(45)
		th.ThreadsRunning = func(context.Context) (int, error) {
			polls.Add(1)
			return int(running.Load()), nil
		}
		var wg sync.WaitGroup
		for _, job := range []string{tandem.JobSweep, tandem.JobAudit, tandem.JobPurge, tandem.JobConverge} {
			wg.Go(func() {
				if err := th.Wait(t.Context(), job); err != nil {
					t.Error(err)
				}
			})
		}
		time.Sleep(10 * throttle.DefaultInterval)
		synctest.Wait()
		if st := th.State(); st.Signal != tandem.SignalThreadsRunning || st.Reason != "Threads_running 45 > 20" {
			t.Fatalf("state %+v, want throttled by Threads_running 45 > 20", st)
		}
		if n := polls.Load(); n > 11 {
			t.Fatalf("%d polls in 10 intervals by 4 jobs, want at most one per interval", n)
		}
		running.Store(3)
		wg.Wait()
		if got := throttledSeconds(reg, tandem.JobAudit, tandem.SignalThreadsRunning); got < (10 * throttle.DefaultInterval).Seconds() {
			t.Fatalf("audit throttled %vs by threads_running, want at least %v", got, 10*throttle.DefaultInterval)
		}
	})
}

// TestThrottle_CriticalLoad checks that two polls in a row at the
// critical Threads_running stop the job with a clear reason, and that one
// spike does not.
func TestThrottle_CriticalLoad(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th, _ := mustNew(t, throttle.Config{MaxThreadsRunning: 20, CriticalThreadsRunning: 100})
		readings := []int{150, 10, 150, 150}
		var i atomic.Int64
		th.ThreadsRunning = func(context.Context) (int, error) {
			n := readings[min(int(i.Add(1))-1, len(readings)-1)]
			return n, nil
		}
		// 150 then 10: one spike throttles, and the job goes on.
		if err := th.Wait(t.Context(), tandem.JobBackfill); err != nil {
			t.Fatalf("one critical reading stopped the job: %v", err)
		}
		time.Sleep(throttle.DefaultInterval)
		err := th.Wait(t.Context(), tandem.JobBackfill)
		if tandem.ErrorCode(err) != tandem.EUNAVAILABLE || !strings.Contains(err.Error(), "Threads_running 150 >= critical 100") {
			t.Fatalf("got %v, want unavailable: critical load Threads_running 150 >= critical 100", err)
		}
		if st := th.State(); st.Signal != tandem.SignalCriticalLoad {
			t.Fatalf("state %+v, want critical_load", st)
		}
	})
}

// TestThrottle_ReplicaLag checks that a lagging replica throttles, that a
// replica that cannot be read throttles too, and that one caught up does
// not.
func TestThrottle_ReplicaLag(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th, _ := mustNew(t, throttle.Config{})
		var mu sync.Mutex
		lag, lagErr := 2500*time.Millisecond, error(nil)
		th.ReplicaLag = func(context.Context) (time.Duration, error) {
			mu.Lock()
			defer mu.Unlock()
			return lag, lagErr
		}
		done := waitFor(t.Context(), th, tandem.JobResync)
		synctest.Wait()
		if st := th.State(); st.Signal != tandem.SignalReplicaLag || st.Reason != "replica lag 2.5s > 1s" {
			t.Fatalf("state %+v, want throttled by replica lag 2.5s > 1s", st)
		}
		mu.Lock()
		lag, lagErr = 0, errors.New("connection refused")
		mu.Unlock()
		time.Sleep(2 * throttle.DefaultInterval)
		synctest.Wait()
		if st := th.State(); st.Signal != tandem.SignalReplicaLag || !strings.Contains(st.Reason, "connection refused") {
			t.Fatalf("state %+v, want throttled while the replica cannot be read", st)
		}
		mu.Lock()
		lag, lagErr = 200*time.Millisecond, nil
		mu.Unlock()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

// manual is a ManualSource of one pod.
type manual struct {
	mu sync.Mutex
	m  tandem.ManualThrottle
}

func (s *manual) set(m tandem.ManualThrottle) {
	s.mu.Lock()
	s.m = m
	s.mu.Unlock()
}

func (s *manual) ManualThrottle(pod string) (tandem.ManualThrottle, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m, pod == "pod-a"
}

// TestThrottle_Manual checks that an operator's throttle holds every job
// until it is turned off, with its reason, and tells OnChange both ways.
func TestThrottle_Manual(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th, reg := mustNew(t, throttle.Config{})
		src := &manual{}
		th.Manual = src
		var changes []tandem.ThrottleState
		th.OnChange = func(_ string, st tandem.ThrottleState) { changes = append(changes, st) }
		src.set(tandem.ManualThrottle{On: true, Reason: "black friday", Actor: "ops", Since: time.Now()})
		done := waitFor(t.Context(), th, tandem.JobPurge)
		time.Sleep(time.Minute)
		synctest.Wait()
		st := th.State()
		if st.Signal != tandem.SignalManual || st.Reason != "manual: black friday" || st.Manual == nil || st.Manual.Actor != "ops" {
			t.Fatalf("state %+v, want the manual throttle", st)
		}
		src.set(tandem.ManualThrottle{})
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if got := throttledSeconds(reg, tandem.JobPurge, tandem.SignalManual); got < 60 {
			t.Fatalf("purge throttled %vs by hand, want at least 60", got)
		}
		if len(changes) != 2 || !changes[0].Throttled || changes[1].Throttled {
			t.Fatalf("OnChange told %+v, want on then off", changes)
		}
	})
}

// TestThrottle_EndsWithTheContext checks that a throttled job stops
// waiting when its context ends.
func TestThrottle_EndsWithTheContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th, _ := mustNew(t, throttle.Config{})
		th.Manual = &manual{m: tandem.ManualThrottle{On: true, Reason: "hold"}}
		ctx, cancel := context.WithTimeout(t.Context(), 700*time.Millisecond)
		defer cancel()
		ctx = tandem.WithThrottle(ctx, th, tandem.JobBackfill)
		if err := tandem.Pace(ctx, time.Now()); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v, want the context's deadline", err)
		}
	})
}

// TestThrottle_BuyersSlowWithoutUs checks that buyers who stay slow
// through a whole window in which every job waited hold nothing for the
// next window (the cause is elsewhere), and are judged again after it.
func TestThrottle_BuyersSlowWithoutUs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th, _ := mustNew(t, throttle.Config{})
		stop := make(chan struct{})
		go func() { // buyers slow all along, whatever the jobs do
			for {
				th.ObserveBuyer(50 * time.Millisecond)
				select {
				case <-stop:
					return
				case <-time.After(10 * time.Millisecond):
				}
			}
		}()
		defer close(stop)
		time.Sleep(time.Second)
		wait := func() time.Duration {
			start := time.Now()
			if err := th.Wait(t.Context(), tandem.JobBackfill); err != nil {
				t.Fatal(err)
			}
			return time.Since(start)
		}
		if waited := wait(); waited != throttle.DefaultBuyerWindow {
			t.Fatalf("the first page waited %v, want one buyer window (%v)", waited, throttle.DefaultBuyerWindow)
		}
		for i := range 10 { // pages of 100ms, through the excused window
			if waited := wait(); waited != 0 {
				t.Fatalf("page %d of the excused window waited %v, want 0", i, waited)
			}
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(throttle.DefaultBuyerWindow)
		if waited := wait(); waited != throttle.DefaultBuyerWindow {
			t.Fatalf("a page after the excused window waited %v, want one buyer window again", waited)
		}
	})
}

// TestThrottle_BuyersActive checks the buyers' traffic a gentle copy asks
// about: at least MinBuyerSamples reserves in the last BuyerWindow.
func TestThrottle_BuyersActive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th, _ := mustNew(t, throttle.Config{})
		for range throttle.DefaultMinBuyerSamples - 1 {
			th.ObserveBuyer(time.Millisecond)
		}
		if th.BuyersActive() {
			t.Fatalf("active with %d buyer samples, want at least %d", throttle.DefaultMinBuyerSamples-1, throttle.DefaultMinBuyerSamples)
		}
		th.ObserveBuyer(time.Millisecond)
		if !th.BuyersActive() {
			t.Fatalf("not active with %d buyer samples in the window", throttle.DefaultMinBuyerSamples)
		}
		time.Sleep(throttle.DefaultBuyerWindow + time.Millisecond)
		if th.BuyersActive() {
			t.Fatal("still active once the samples left the window")
		}
	})
}
