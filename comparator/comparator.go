// Package comparator counts the comparisons the router makes between a
// pod's source of truth and its shadow: per pod and kind over a sliding
// window of time buckets, with latency percentiles per store, so that the
// rollout gates can read a divergence rate, and over a short recent window
// for the automatic abort. Reset starts a pod's gates and abort afresh
// (after an unkill) while its report keeps the whole window. It
// persists divergences asynchronously through a bounded queue: beyond the
// queue it keeps counting but drops (and counts) what it cannot persist, so
// Record never blocks the buyer's request and memory stays bounded.
package comparator

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tandemhq/tandem"
)

// DivergenceLog persists divergences; controldb's Store implements it.
type DivergenceLog interface {
	// AppendDivergences persists a batch of divergences.
	AppendDivergences(ctx context.Context, ds []tandem.Divergence) error
	// Divergences returns persisted divergences matching f, newest first.
	Divergences(ctx context.Context, f tandem.DivergenceFilter) ([]tandem.Divergence, error)
}

// Defaults of the exported configuration fields.
const (
	DefaultWindow       = 15 * time.Minute
	DefaultBucket       = 10 * time.Second
	DefaultQueueSize    = 4096
	DefaultBatchSize    = 256
	DefaultWriteTimeout = 5 * time.Second
	DefaultAbortWindow  = time.Minute
)

// abortSlices is how many slices the abort's recent window is cut into:
// it slides by a sixtieth of itself (1 s of the default minute).
const abortSlices = 60

// kindIndex maps a divergence kind to its slot in a bucket's counts.
var kindIndex = func() map[tandem.DivergenceKind]int {
	m := make(map[tandem.DivergenceKind]int, len(tandem.DivergenceKinds))
	for i, k := range tandem.DivergenceKinds {
		m[k] = i
	}
	return m
}()

var numKinds = len(tandem.DivergenceKinds)

// Config configures a Comparator; New takes the defaults for its zero
// fields.
type Config struct {
	// Window is the sliding window of the counts (rollout.gate_window);
	// default DefaultWindow.
	Window time.Duration
	// Bucket is the width of one time bucket of the window; default
	// DefaultBucket, at most Window.
	Bucket time.Duration
	// AbortWindow is the recent window of AbortStats
	// (rollout.abort_window); default DefaultAbortWindow.
	AbortWindow time.Duration
	// QueueSize bounds the divergences waiting to be persisted; default
	// DefaultQueueSize.
	QueueSize int
	// BatchSize bounds the divergences persisted in one call; default
	// DefaultBatchSize.
	BatchSize int
	// WriteTimeout bounds one call to the log; default DefaultWriteTimeout.
	WriteTimeout time.Duration
	// Log persists divergences; nil keeps none (they are still counted).
	Log DivergenceLog
	// Now returns the current time; default time.Now.
	Now func() time.Time
	// OnError is told about failures to persist; nil ignores them.
	OnError func(error)
}

// Comparator counts comparisons and persists divergences. Make one with
// New; it counts at once, and Open starts persisting. Record, RecordAudit
// and the read methods are safe for concurrent use.
type Comparator struct {
	cfg      Config
	nBuckets int
	queue    chan tandem.Divergence

	mu   sync.RWMutex
	pods map[string]*podCounts

	persisted     atomic.Int64
	dropped       atomic.Int64
	persistErrors atomic.Int64

	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	openOnce  sync.Once
	closeOnce sync.Once
}

// New returns a Comparator configured by cfg, counting nothing yet, ready
// to Record and to Open.
func New(cfg Config) *Comparator {
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.Bucket <= 0 {
		cfg.Bucket = DefaultBucket
	}
	if cfg.Bucket > cfg.Window {
		cfg.Bucket = cfg.Window
	}
	if cfg.AbortWindow <= 0 {
		cfg.AbortWindow = DefaultAbortWindow
	}
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = DefaultQueueSize
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = DefaultBatchSize
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	c := &Comparator{
		cfg:      cfg,
		nBuckets: int((cfg.Window + cfg.Bucket - 1) / cfg.Bucket),
		queue:    make(chan tandem.Divergence, cfg.QueueSize),
		pods:     make(map[string]*podCounts),
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	return c
}

// Open starts the writer that persists queued divergences.
func (c *Comparator) Open() error {
	c.openOnce.Do(func() {
		c.wg.Add(1)
		go c.writer()
	})
	return nil
}

// Close stops the writer after one last bounded attempt to persist what is
// queued. It is safe to call twice.
func (c *Comparator) Close() error {
	c.closeOnce.Do(func() {
		c.cancel()
		c.wg.Wait()
	})
	return nil
}

// Record counts one comparison in its pod's window and queues it for
// persistence when it is a divergence. It never blocks: when the queue is
// full the divergence is counted but not persisted (see Stats.Dropped).
func (c *Comparator) Record(cmp tandem.Comparison) {
	now := c.cfg.Now()
	idx := c.bucketIndex(now)
	p := c.pod(cmp.Pod)
	k, diverged := kindIndex[cmp.Kind]
	// A state_drift is a finding about the stores, not an operation
	// compared: it is counted by kind, never as a comparison.
	drift := cmp.Kind == tandem.KindStateDrift
	p.mu.Lock()
	b := p.bucket(idx, c.nBuckets)
	if !drift {
		b.comparisons++
		p.total.comparisons++
	}
	if cmp.Contention && !diverged {
		b.contention++
		p.total.contention++
	}
	if cmp.Primary.StoreFailed() {
		b.sotErrors++
		p.total.sotErrors++
	}
	if diverged {
		b.kinds[k]++
		p.total.kinds[k]++
	}
	if cmp.Primary.Store != "" {
		b.latency(cmp.Primary.Store).add(cmp.Primary.Latency)
	}
	if cmp.Shadow.Store != "" && cmp.Kind != tandem.KindShadowDropped && !drift {
		b.latency(cmp.Shadow.Store).add(cmp.Shadow.Latency)
	}
	p.recordRecent(c.sliceIndex(now), diverged && cmp.Kind != tandem.KindStateDrift, mysqlFailed(cmp))
	p.mu.Unlock()
	if !diverged {
		return
	}
	at := cmp.At
	if at.IsZero() {
		at = now
	}
	c.enqueue(tandem.Divergence{
		At:            at,
		Pod:           cmp.Pod,
		Op:            cmp.Op,
		Kind:          cmp.Kind,
		CartToken:     cmp.CartToken,
		ShopID:        cmp.ShopID,
		SourceOfTruth: cmp.SourceOfTruth,
		Primary:       cmp.Primary,
		Shadow:        cmp.Shadow,
		Position:      position(cmp),
	})
}

// position is the drifted position a state_drift comparison names (one
// of cmp.Drift), nil for another comparison.
func position(cmp tandem.Comparison) *tandem.Drift {
	if cmp.Kind != tandem.KindStateDrift || len(cmp.Drift) == 0 {
		return nil
	}
	d := cmp.Drift[0]
	return &d
}

// RecordAudit counts a drift audit: one state_drift per drifted position in
// the pod's window, each queued for persistence, and remembers the audit as
// the pod's last one.
func (c *Comparator) RecordAudit(a tandem.Audit) {
	now := c.cfg.Now()
	if a.Found != nil {
		// The audit converged what it found: the drift it found is what
		// counts, what is left decides whether it was clean.
		a.Drifted = a.Found
	}
	if a.At.IsZero() {
		a.At = now
	}
	p := c.pod(a.Pod)
	k := kindIndex[tandem.KindStateDrift]
	p.mu.Lock()
	b := p.bucket(c.bucketIndex(now), c.nBuckets)
	b.kinds[k] += int64(len(a.Drifted))
	p.total.kinds[k] += int64(len(a.Drifted))
	if p.lastAudit == nil || !a.At.Before(p.lastAudit.at) {
		p.lastAudit = &auditMark{at: a.At, clean: a.Clean}
	}
	p.mu.Unlock()
	for _, d := range a.Drifted {
		redis, mysql := tandem.DriftOutcomes(d)
		c.enqueue(tandem.Divergence{
			Position:      &d,
			At:            a.At,
			Pod:           a.Pod,
			Op:            tandem.OpAudit,
			Kind:          tandem.KindStateDrift,
			ShopID:        d.ShopID,
			SourceOfTruth: "ledger",
			Primary:       redis,
			Shadow:        mysql,
		})
	}
}

// LastAudit returns the time and verdict of the pod's last recorded audit;
// ok is false when none was recorded.
func (c *Comparator) LastAudit(pod string) (at time.Time, clean bool, ok bool) {
	p := c.lookup(pod)
	if p == nil {
		return time.Time{}, false, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lastAudit == nil {
		return time.Time{}, false, false
	}
	return p.lastAudit.at, p.lastAudit.clean, true
}

// GateStats returns the pod's comparisons in the window and their
// divergence rate (divergences of every kind but state_drift, which the
// audit gate covers, over comparisons; 0 without comparisons), counting
// only what was recorded after the pod's last Reset.
func (c *Comparator) GateStats(pod string) (comparisons int64, divergenceRate float64) {
	w := c.window(pod, true)
	return w.comparisons, w.rate()
}

// ErrorStats returns the pod's comparisons in the window and the rate of
// those whose source of truth failed (status unavailable or internal),
// counting only what was recorded after the pod's last Reset.
func (c *Comparator) ErrorStats(pod string) (comparisons int64, sotErrorRate float64) {
	w := c.window(pod, true)
	if w.comparisons == 0 {
		return 0, 0
	}
	return w.comparisons, float64(w.sotErrors) / float64(w.comparisons)
}

// Report returns the pod's counts over the window, labelled with mode.
func (c *Comparator) Report(pod string, mode tandem.Mode) tandem.Report {
	w := c.window(pod, false)
	r := tandem.Report{
		Pod:            pod,
		Mode:           mode,
		Window:         FormatWindow(c.cfg.Window),
		Comparisons:    w.comparisons,
		Matches:        w.comparisons - w.divergences() - w.sotErrors,
		Divergences:    make(map[tandem.DivergenceKind]int64, numKinds),
		DivergenceRate: w.rate(),
		Contention:     w.contention,
		LatencyMS:      make(map[string]tandem.LatencyStats, 2),
	}
	if w.comparisons > 0 {
		r.ContentionRate = float64(w.contention) / float64(w.comparisons)
	}
	for i, k := range tandem.DivergenceKinds {
		r.Divergences[k] = w.kinds[i]
	}
	for _, store := range []string{tandem.StoreRedis, tandem.StoreMySQL} {
		h := w.latencies[store]
		r.LatencyMS[store] = tandem.LatencyStats{P50: h.quantileMS(0.50), P99: h.quantileMS(0.99)}
	}
	return r
}

// Divergences returns persisted divergences, newest first; without a log
// it returns none.
func (c *Comparator) Divergences(ctx context.Context, f tandem.DivergenceFilter) ([]tandem.Divergence, error) {
	if c.cfg.Log == nil {
		return []tandem.Divergence{}, nil
	}
	return c.cfg.Log.Divergences(ctx, f)
}

// PodStats is a pod's cumulative counts since the comparator started, for
// metrics counters.
type PodStats struct {
	Comparisons int64
	// SourceOfTruthErrors counts comparisons whose source of truth failed.
	SourceOfTruthErrors int64
	// Contention counts the matches explained as sold-out contention.
	Contention int64
	// Divergences counts per kind.
	Divergences map[tandem.DivergenceKind]int64
}

// Stats is a snapshot of the comparator's cumulative counts.
type Stats struct {
	Pods map[string]PodStats
	// Queued is the number of divergences waiting to be persisted.
	Queued int
	// Persisted, Dropped and PersistErrors count divergences written, not
	// written because the queue was full, and lost to a failing log.
	Persisted     int64
	Dropped       int64
	PersistErrors int64
}

// Stats returns a snapshot of the cumulative counts.
func (c *Comparator) Stats() Stats {
	s := Stats{
		Pods:          make(map[string]PodStats),
		Queued:        len(c.queue),
		Persisted:     c.persisted.Load(),
		Dropped:       c.dropped.Load(),
		PersistErrors: c.persistErrors.Load(),
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	for name, p := range c.pods {
		p.mu.Lock()
		ps := PodStats{Comparisons: p.total.comparisons, SourceOfTruthErrors: p.total.sotErrors, Contention: p.total.contention, Divergences: make(map[tandem.DivergenceKind]int64, numKinds)}
		for i, k := range tandem.DivergenceKinds {
			ps.Divergences[k] = p.total.kinds[i]
		}
		p.mu.Unlock()
		s.Pods[name] = ps
	}
	return s
}

// FormatWindow formats d the way the config writes it: "15m", "1h30m", "45s".
func FormatWindow(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func (c *Comparator) enqueue(d tandem.Divergence) {
	select {
	case c.queue <- d:
	default:
		c.dropped.Add(1)
	}
}

func (c *Comparator) writer() {
	defer c.wg.Done()
	batch := make([]tandem.Divergence, 0, c.cfg.BatchSize)
	for {
		select {
		case <-c.ctx.Done():
			c.drain(batch)
			return
		case d := <-c.queue:
			batch = append(batch[:0], d)
			batch = c.fill(batch)
			c.write(context.Background(), batch)
		}
	}
}

// fill adds what is already queued to batch, up to BatchSize, without waiting.
func (c *Comparator) fill(batch []tandem.Divergence) []tandem.Divergence {
	for len(batch) < c.cfg.BatchSize {
		select {
		case d := <-c.queue:
			batch = append(batch, d)
		default:
			return batch
		}
	}
	return batch
}

// drain makes one bounded attempt to persist what is queued at Close.
func (c *Comparator) drain(batch []tandem.Divergence) {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.WriteTimeout)
	defer cancel()
	for ctx.Err() == nil {
		batch = c.fill(batch[:0])
		if len(batch) == 0 {
			return
		}
		c.write(ctx, batch)
	}
}

func (c *Comparator) write(ctx context.Context, batch []tandem.Divergence) {
	if c.cfg.Log == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.WriteTimeout)
	defer cancel()
	if err := c.cfg.Log.AppendDivergences(ctx, batch); err != nil {
		c.persistErrors.Add(int64(len(batch)))
		if c.cfg.OnError != nil {
			c.cfg.OnError(fmt.Errorf("persist %d divergences: %w", len(batch), err))
		}
		return
	}
	c.persisted.Add(int64(len(batch)))
}

func (c *Comparator) bucketIndex(t time.Time) int64 {
	return t.UnixNano() / int64(c.cfg.Bucket)
}

func (c *Comparator) lookup(pod string) *podCounts {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.pods[pod]
}

func (c *Comparator) pod(pod string) *podCounts {
	if p := c.lookup(pod); p != nil {
		return p
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.pods[pod]; p != nil {
		return p
	}
	p := &podCounts{buckets: make([]bucket, c.nBuckets)}
	c.pods[pod] = p
	return p
}

// window sums the pod's buckets that lie in the window ending now; with
// sinceReset, only what was recorded after the pod's last Reset.
func (c *Comparator) window(pod string, sinceReset bool) windowSum {
	w := windowSum{latencies: map[string]*histogram{}}
	p := c.lookup(pod)
	if p == nil {
		return w
	}
	now := c.bucketIndex(c.cfg.Now())
	oldest := now - int64(c.nBuckets) + 1
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range p.buckets {
		b := &p.buckets[i]
		if !b.used || b.index < oldest || b.index > now || sinceReset && p.reset != nil && b.index < p.reset.index {
			continue
		}
		w.comparisons += b.comparisons
		w.sotErrors += b.sotErrors
		w.contention += b.contention
		for k := range b.kinds {
			w.kinds[k] += b.kinds[k]
		}
		for store, h := range b.latencies {
			sum := w.latencies[store]
			if sum == nil {
				sum = &histogram{}
				w.latencies[store] = sum
			}
			sum.merge(h)
		}
	}
	if r := p.reset; sinceReset && r != nil {
		// The reset's own bucket counts only what came after it.
		if b := &p.buckets[int(r.index%int64(c.nBuckets))]; b.used && b.index == r.index && r.index >= oldest {
			w.comparisons -= r.before.comparisons
			w.sotErrors -= r.before.sotErrors
			w.contention -= r.before.contention
			for k := range r.before.kinds {
				w.kinds[k] -= r.before.kinds[k]
			}
		}
	}
	return w
}

type auditMark struct {
	at    time.Time
	clean bool
}

type counts struct {
	comparisons int64
	// sotErrors counts comparisons whose source of truth failed (unavailable
	// or internal), the other trigger of the automatic abort.
	sotErrors int64
	// contention counts the matches whose answers differed only at the
	// sold-out boundary, explained (tandem.Comparison.Contention).
	contention int64
	// kinds is indexed like tandem.DivergenceKinds.
	kinds [6]int64
}

// podCounts is one pod's ring of buckets; index i of time lives in slot
// i mod len(buckets) and is reset when the slot is reused.
type podCounts struct {
	mu        sync.Mutex
	buckets   []bucket
	total     counts
	lastAudit *auditMark
	// recent is the abort's ring of slices, bad the divergences and
	// MySQL errors since the last reset, reset the last Reset.
	recent []recentSlice
	bad    int64
	reset  *resetMark
}

type bucket struct {
	used  bool
	index int64
	counts
	latencies map[string]*histogram
}

func (p *podCounts) bucket(index int64, n int) *bucket {
	b := &p.buckets[int(index%int64(n))]
	if !b.used || b.index != index {
		*b = bucket{used: true, index: index}
	}
	return b
}

func (b *bucket) latency(store string) *histogram {
	if b.latencies == nil {
		b.latencies = make(map[string]*histogram, 2)
	}
	h := b.latencies[store]
	if h == nil {
		// Stores are named by the router; cap the names a bucket keeps so a
		// bad name cannot grow memory.
		if len(b.latencies) >= 4 {
			return &histogram{}
		}
		h = &histogram{}
		b.latencies[store] = h
	}
	return h
}

type windowSum struct {
	counts
	latencies map[string]*histogram
}

func (w windowSum) divergences() int64 {
	var n int64
	for i, k := range tandem.DivergenceKinds {
		if k != tandem.KindStateDrift {
			n += w.kinds[i]
		}
	}
	return n
}

func (w windowSum) rate() float64 {
	if w.comparisons == 0 {
		return 0
	}
	return float64(w.divergences()) / float64(w.comparisons)
}

// Latency histogram: fixed, exponentially growing bucket bounds, so a
// percentile is exact to within one bucket (25 %) at a constant size.
const (
	histBuckets = 64
	histFirstMS = 0.02
	histFactor  = 1.25
)

var histBounds = func() [histBuckets]float64 {
	var b [histBuckets]float64
	v := histFirstMS
	for i := range b {
		b[i] = v
		v *= histFactor
	}
	b[histBuckets-1] = math.Inf(1)
	return b
}()

type histogram struct {
	n      int64
	counts [histBuckets]int64
}

func (h *histogram) add(d time.Duration) {
	ms := float64(d) / float64(time.Millisecond)
	i := sort.SearchFloat64s(histBounds[:], ms)
	if i >= histBuckets {
		i = histBuckets - 1
	}
	h.counts[i]++
	h.n++
}

func (h *histogram) merge(o *histogram) {
	h.n += o.n
	for i := range h.counts {
		h.counts[i] += o.counts[i]
	}
}

// quantileMS returns the q-quantile in milliseconds, interpolated inside
// its bucket; 0 for an empty (or nil) histogram.
func (h *histogram) quantileMS(q float64) float64 {
	if h == nil || h.n == 0 {
		return 0
	}
	rank := q * float64(h.n)
	var seen int64
	for i, n := range h.counts {
		if n == 0 {
			continue
		}
		if float64(seen+n) >= rank {
			lo := 0.0
			if i > 0 {
				lo = histBounds[i-1]
			}
			hi := histBounds[i]
			if math.IsInf(hi, 1) {
				return lo
			}
			frac := (rank - float64(seen)) / float64(n)
			return math.Round((lo+(hi-lo)*frac)*1000) / 1000
		}
		seen += n
	}
	return histBounds[histBuckets-2]
}
