// Package history keeps the last hour of each pod's REPORT, sampled every
// few seconds, in a ring buffer per pod, so that the dashboard's charts
// start with the recent past instead of when the tab opened
// (GET /admin/history).
package history

import (
	"context"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/tandemhq/tandem"
)

// Defaults of Config.
const (
	DefaultInterval = 5 * time.Second
	DefaultKeep     = time.Hour
)

// Config configures a Recorder.
type Config struct {
	// Report returns every pod's REPORT (rollout.Controller.Report).
	Report func(ctx context.Context) ([]tandem.Report, error)
	// Interval between samples; default DefaultInterval.
	Interval time.Duration
	// Keep is how far back the samples go; default DefaultKeep.
	Keep time.Duration
	// Now returns the current time; default time.Now.
	Now func() time.Time
	// Logger defaults to zap.NewNop().
	Logger *zap.Logger
}

// Recorder samples the pods' reports and keeps them per pod.
type Recorder struct {
	cfg  Config
	size int

	mu    sync.Mutex
	rings map[string]*ring

	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

// New returns a Recorder; Open starts its sampling.
func New(cfg Config) *Recorder {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Keep <= 0 {
		cfg.Keep = DefaultKeep
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	return &Recorder{cfg: cfg, size: int(cfg.Keep/cfg.Interval) + 1, rings: map[string]*ring{}}
}

// Open takes a first sample and starts sampling every Interval until Close.
func (r *Recorder) Open() {
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		t := time.NewTicker(r.cfg.Interval)
		defer t.Stop()
		for {
			r.Sample(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// Close stops sampling and waits for it; safe to call twice.
func (r *Recorder) Close() error {
	r.once.Do(func() {
		if r.cancel != nil {
			r.cancel()
		}
		r.wg.Wait()
	})
	return nil
}

// Sample records every pod's report now; a failing report is skipped (the
// chart shows a gap rather than a made-up value). Pods no longer reported
// are forgotten.
func (r *Recorder) Sample(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Interval)
	defer cancel()
	reports, err := r.cfg.Report(ctx)
	if err != nil {
		r.cfg.Logger.Debug("history sample skipped", zap.Error(err))
		return
	}
	at := r.cfg.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := make(map[string]bool, len(reports))
	for _, rep := range reports {
		seen[rep.Pod] = true
		rg := r.rings[rep.Pod]
		if rg == nil {
			rg = &ring{items: make([]tandem.ReportSample, 0, r.size)}
			r.rings[rep.Pod] = rg
		}
		rg.push(tandem.ReportSample{At: at, Report: rep}, r.size)
	}
	for pod := range r.rings {
		if !seen[pod] {
			delete(r.rings, pod)
		}
	}
}

// History returns the pod's samples of the last Keep, oldest first; every
// pod's (by pod, then time) when pod is "".
func (r *Recorder) History(pod string) []tandem.ReportSample {
	from := r.cfg.Now().Add(-r.cfg.Keep)
	r.mu.Lock()
	defer r.mu.Unlock()
	out := []tandem.ReportSample{}
	for _, name := range r.pods(pod) {
		for _, s := range r.rings[name].ordered() {
			if !s.At.Before(from) {
				out = append(out, s)
			}
		}
	}
	return out
}

func (r *Recorder) pods(pod string) []string {
	if pod != "" {
		if _, ok := r.rings[pod]; ok {
			return []string{pod}
		}
		return nil
	}
	names := make([]string, 0, len(r.rings))
	for name := range r.rings {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// ring is a fixed-size buffer of samples; next is where the next one goes
// once it is full.
type ring struct {
	items []tandem.ReportSample
	next  int
}

func (g *ring) push(s tandem.ReportSample, size int) {
	if len(g.items) < size {
		g.items = append(g.items, s)
		return
	}
	g.items[g.next] = s
	g.next = (g.next + 1) % size
}

func (g *ring) ordered() []tandem.ReportSample {
	return append(append([]tandem.ReportSample{}, g.items[g.next:]...), g.items[:g.next]...)
}
