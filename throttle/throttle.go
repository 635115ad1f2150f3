// Package throttle keeps a pod's background work a good neighbour: every
// background job (the backfill's batches, the sweep's and the audit's
// pages, resyncs, the convergence worker's rounds, purges) asks the pod's
// Throttle before each batch or page, and waits while the buyers of the pod
// suffer, the pod's MySQL is loaded, its replica lags or an operator
// throttled it by hand. Buyer flows and the replenisher never ask.
//
// The signals, each optional (gh-ost's and Vitess's throttlers are the
// model):
//   - the buyers' own health on this pod over a short window: the p99 of
//     their reserves, and of their wait in the MySQL engine's admission;
//   - the server's Threads_running, polled at most once per Interval, with
//     a critical value that stops the job (gh-ost's critical-load);
//   - a replica's lag, read from the heartbeat row the primary writes;
//   - the manual throttle, persisted in the control database.
package throttle

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemhq/tandem"
)

// Defaults of Config: they protect buyers.
const (
	DefaultMaxBuyerP99       = 20 * time.Millisecond
	DefaultMaxAdmissionWait  = 10 * time.Millisecond
	DefaultBuyerWindow       = 3 * time.Second
	DefaultMinBuyerSamples   = 20
	DefaultMaxThreadsRunning = 32
	DefaultMaxReplicaLag     = time.Second
	DefaultInterval          = 250 * time.Millisecond
)

// Config is a pod's throttle settings; a zero field takes its default, a
// negative one turns its signal off.
type Config struct {
	// MaxBuyerP99 throttles while the p99 of the buyers' reserves over
	// BuyerWindow is above it (at least MinBuyerSamples of them).
	MaxBuyerP99 time.Duration
	// MaxAdmissionWait throttles while the p99 of the buyers' wait in the
	// MySQL engine's admission (mysql_max_inflight) over BuyerWindow is
	// above it.
	MaxAdmissionWait time.Duration
	BuyerWindow      time.Duration
	MinBuyerSamples  int
	// MaxThreadsRunning throttles while the server's Threads_running is
	// above it; CriticalThreadsRunning (0: off) stops the job when two
	// polls in a row reach it.
	MaxThreadsRunning      int
	CriticalThreadsRunning int
	// MaxReplicaLag throttles while the replica lags more (with a
	// ReplicaLag probe only).
	MaxReplicaLag time.Duration
	// Interval bounds how often the database is polled, and is how often
	// a throttled job asks again.
	Interval time.Duration
}

// WithDefaults returns cfg with its zero fields set to the defaults.
func (cfg Config) WithDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&cfg.MaxBuyerP99, DefaultMaxBuyerP99)
	def(&cfg.MaxAdmissionWait, DefaultMaxAdmissionWait)
	def(&cfg.BuyerWindow, DefaultBuyerWindow)
	def(&cfg.MaxReplicaLag, DefaultMaxReplicaLag)
	def(&cfg.Interval, DefaultInterval)
	if cfg.BuyerWindow < 0 {
		cfg.BuyerWindow = DefaultBuyerWindow
	}
	if cfg.Interval < 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.MinBuyerSamples <= 0 {
		cfg.MinBuyerSamples = DefaultMinBuyerSamples
	}
	if cfg.MaxThreadsRunning == 0 {
		cfg.MaxThreadsRunning = DefaultMaxThreadsRunning
	}
	return cfg
}

// ManualSource gives a pod's manual throttle; the rollout controller
// satisfies it. ManualThrottle must be cheap (memory).
type ManualSource interface {
	ManualThrottle(pod string) (tandem.ManualThrottle, bool)
}

// Throttle is one pod's throttle. Build it with New, set the probes, then
// use it; it is safe for concurrent use.
type Throttle struct {
	Pod string
	Config
	// ThreadsRunning reads the server's Threads_running (optional).
	ThreadsRunning func(ctx context.Context) (int, error)
	// ReplicaLag reads the replica's lag behind the primary (optional).
	ReplicaLag func(ctx context.Context) (time.Duration, error)
	// Manual gives the operator's throttle (optional).
	Manual ManualSource
	// OnChange is told every change of the state (optional): cmd logs it.
	OnChange func(pod string, st tandem.ThrottleState)

	buyers    *window
	admission *window
	seconds   *prometheus.CounterVec

	mu       sync.Mutex
	polledAt time.Time
	// checkedAt is a job's last check; heldSince when the buyers' signals
	// began holding the jobs (zero when they do not), and excusedUntil the
	// end of a window in which they hold nothing (see Wait).
	checkedAt    time.Time
	heldSince    time.Time
	excusedUntil time.Time
	threads      int
	critical     int // polls in a row at or over CriticalThreadsRunning
	lag          time.Duration
	lagErr       error
	state        tandem.ThrottleState
}

var _ tandem.Throttle = (*Throttle)(nil)

// New returns pod's throttle with cfg (defaults filled), its metric
// tandem_throttled_seconds_total{job,reason} registered with reg (nil: no
// metric; wrap reg with the pod's label).
func New(pod string, cfg Config, reg prometheus.Registerer) (*Throttle, error) {
	cfg = cfg.WithDefaults()
	t := &Throttle{Pod: pod, Config: cfg,
		buyers: newWindow(cfg.BuyerWindow), admission: newWindow(cfg.BuyerWindow)}
	t.seconds = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tandem_throttled_seconds_total",
		Help: "Seconds the pod's background jobs waited for its throttle, by job and the signal that throttled them.",
	}, []string{"job", "reason"})
	if reg != nil {
		if err := reg.Register(t.seconds); err != nil {
			return nil, fmt.Errorf("throttle: register metrics: %w", err)
		}
	}
	return t, nil
}

// ObserveBuyer records one buyer reserve's latency on this pod.
func (t *Throttle) ObserveBuyer(d time.Duration) { t.buyers.add(time.Now(), d) }

var _ tandem.BuyerTraffic = (*Throttle)(nil)

// BuyersActive implements tandem.BuyerTraffic: at least MinBuyerSamples
// buyer reserves in the last BuyerWindow.
func (t *Throttle) BuyersActive() bool {
	_, n := t.buyers.p99(time.Now())
	return n >= t.MinBuyerSamples
}

// ObserveAdmission records one buyer flow's wait in the MySQL engine's
// admission.
func (t *Throttle) ObserveAdmission(d time.Duration) { t.admission.add(time.Now(), d) }

// Wait returns when job may run its next batch (tandem.Throttle).
//
// When the buyers' signals alone have held the background work for a
// whole BuyerWindow, the buyers stayed slow through a window in which it
// ran nothing: their latency is not its doing (a loaded machine, another
// tenant), and holding longer would only stall it for good. The buyers'
// signals then hold nothing for the next BuyerWindow, after which they are
// judged again: background work gets at least half the time while the
// cause is elsewhere. The database's signals and the manual throttle hold
// work as long as they say.
func (t *Throttle) Wait(ctx context.Context, job string) error {
	for {
		st, err := t.check(ctx)
		if err != nil {
			return err
		}
		if !st.Throttled {
			return nil
		}
		start := time.Now()
		timer := time.NewTimer(t.Interval)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
		}
		t.seconds.WithLabelValues(job, st.Signal).Add(time.Since(start).Seconds())
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// State returns the throttle's state now, from the buyers' window, the
// manual throttle and the database's last polls (it polls nothing). While
// no job asks, the polls age and are not judged, and the state is shown
// but not recorded: OnChange hears of changes that jobs see.
func (t *Throttle) State() tandem.ThrottleState {
	t.mu.Lock()
	defer t.mu.Unlock()
	fresh := time.Since(t.polledAt) <= 4*t.Interval
	return t.evaluateLocked(time.Now(), fresh, fresh)
}

// check polls the database when its last poll is older than Interval and
// evaluates every signal; it returns an error when the load is critical.
func (t *Throttle) check(ctx context.Context) (tandem.ThrottleState, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	if now.Sub(t.polledAt) >= t.Interval {
		t.pollLocked(ctx)
		t.polledAt = time.Now()
	}
	st := t.evaluateLocked(now, true, true)
	if now.Sub(t.checkedAt) > 2*t.Interval {
		t.heldSince = time.Time{} // no job asked meanwhile: a new hold
	}
	t.checkedAt = now
	switch {
	case st.Signal != tandem.SignalBuyerP99 && st.Signal != tandem.SignalAdmissionWait:
		t.heldSince = time.Time{}
	case t.heldSince.IsZero():
		t.heldSince = now
	case now.Sub(t.heldSince) >= t.BuyerWindow:
		t.heldSince, t.excusedUntil = time.Time{}, now.Add(t.BuyerWindow)
		st = t.evaluateLocked(now, true, true)
	}
	if st.Signal == tandem.SignalCriticalLoad {
		return st, tandem.Errorf(tandem.EUNAVAILABLE, "critical load on pod %s: %s", t.Pod, st.Reason)
	}
	return st, nil
}

// pollLocked reads the database's signals. The polls run under mu, so
// that many jobs asking at once poll once; each is bounded by Interval.
func (t *Throttle) pollLocked(ctx context.Context) {
	pctx, cancel := context.WithTimeout(ctx, max(t.Interval, 100*time.Millisecond))
	defer cancel()
	if t.ThreadsRunning != nil && (t.MaxThreadsRunning > 0 || t.CriticalThreadsRunning > 0) {
		// A server that cannot answer is the job's own failure to find:
		// the throttle keeps its last reading.
		if n, err := t.ThreadsRunning(pctx); err == nil {
			t.threads = n
			if t.CriticalThreadsRunning > 0 && n >= t.CriticalThreadsRunning {
				t.critical++
			} else {
				t.critical = 0
			}
		}
	}
	if t.ReplicaLag != nil && t.MaxReplicaLag > 0 {
		t.lag, t.lagErr = t.ReplicaLag(pctx)
	}
}

// evaluateLocked judges the signals at now, in order of gravity, and with
// record records (and tells) a change of state. fresh says whether the
// database's readings may be judged.
func (t *Throttle) evaluateLocked(now time.Time, fresh, record bool) tandem.ThrottleState {
	signal, reason := t.signalLocked(now, fresh)
	var manual *tandem.ManualThrottle
	if t.Manual != nil {
		if m, ok := t.Manual.ManualThrottle(t.Pod); ok && m.On {
			manual = &m
		}
	}
	if signal == "" && manual != nil {
		signal, reason = tandem.SignalManual, "manual: "+manual.Reason
	}
	prev := t.state
	next := tandem.ThrottleState{Throttled: signal != "", Signal: signal, Reason: reason, Manual: manual}
	if next.Throttled {
		next.Since = prev.Since
		if !prev.Throttled {
			at := now.UTC()
			next.Since = &at
		}
	}
	if !record {
		return next
	}
	t.state = next
	if (prev.Throttled != next.Throttled || prev.Signal != next.Signal) && t.OnChange != nil {
		t.OnChange(t.Pod, next)
	}
	return next
}

func (t *Throttle) signalLocked(now time.Time, fresh bool) (signal, reason string) {
	if fresh && t.CriticalThreadsRunning > 0 && t.critical >= 2 {
		return tandem.SignalCriticalLoad, fmt.Sprintf("Threads_running %d >= critical %d", t.threads, t.CriticalThreadsRunning)
	}
	excused := now.Before(t.excusedUntil)
	if t.MaxBuyerP99 > 0 && !excused {
		if p99, n := t.buyers.p99(now); n >= t.MinBuyerSamples && p99 > t.MaxBuyerP99 {
			return tandem.SignalBuyerP99, fmt.Sprintf("buyer p99 %s > %s", round(p99), t.MaxBuyerP99)
		}
	}
	if t.MaxAdmissionWait > 0 && !excused {
		if p99, n := t.admission.p99(now); n >= t.MinBuyerSamples && p99 > t.MaxAdmissionWait {
			return tandem.SignalAdmissionWait, fmt.Sprintf("mysql admission wait p99 %s > %s", round(p99), t.MaxAdmissionWait)
		}
	}
	if fresh && t.ThreadsRunning != nil && t.MaxThreadsRunning > 0 && t.threads > t.MaxThreadsRunning {
		return tandem.SignalThreadsRunning, fmt.Sprintf("Threads_running %d > %d", t.threads, t.MaxThreadsRunning)
	}
	if fresh && t.ReplicaLag != nil && t.MaxReplicaLag > 0 {
		if t.lagErr != nil {
			return tandem.SignalReplicaLag, fmt.Sprintf("replica lag unknown: %v", t.lagErr)
		}
		if t.lag > t.MaxReplicaLag {
			return tandem.SignalReplicaLag, fmt.Sprintf("replica lag %s > %s", round(t.lag), t.MaxReplicaLag)
		}
	}
	return "", ""
}

// round shows a latency to the tenth of a millisecond.
func round(d time.Duration) time.Duration {
	if d >= time.Millisecond {
		return d.Round(100 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}

// window keeps the latencies of the last span, at most windowCap of them.
type window struct {
	span time.Duration
	mu   sync.Mutex
	at   []time.Time
	d    []time.Duration
	next int
	full bool
}

// windowCap bounds a window's memory: past it, the oldest samples go
// first (the p99 of the last 4096 is still the recent tail).
const windowCap = 4096

func newWindow(span time.Duration) *window {
	return &window{span: span, at: make([]time.Time, windowCap), d: make([]time.Duration, windowCap)}
}

func (w *window) add(at time.Time, d time.Duration) {
	w.mu.Lock()
	w.at[w.next], w.d[w.next] = at, d
	w.next++
	if w.next == windowCap {
		w.next, w.full = 0, true
	}
	w.mu.Unlock()
}

// p99 returns the 99th percentile of the samples within span of now and
// how many there were.
func (w *window) p99(now time.Time) (time.Duration, int) {
	w.mu.Lock()
	n := w.next
	if w.full {
		n = windowCap
	}
	var ds []time.Duration
	for i := 0; i < n; i++ {
		if now.Sub(w.at[i]) <= w.span {
			ds = append(ds, w.d[i])
		}
	}
	w.mu.Unlock()
	if len(ds) == 0 {
		return 0, 0
	}
	slices.Sort(ds)
	return ds[min(len(ds)-1, len(ds)*99/100)], len(ds)
}
