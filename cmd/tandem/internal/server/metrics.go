package server

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/dualwrite"
)

var (
	descPodMode = prometheus.NewDesc("tandem_pod_mode",
		"1 for the pod's persisted mode.", []string{"pod", "mode"}, nil)
	descPodSoT = prometheus.NewDesc("tandem_pod_source_of_truth",
		"1 for the store that answers the pod's buyers (kill switch included).", []string{"pod", "store"}, nil)
	descKill = prometheus.NewDesc("tandem_pod_kill_switch",
		"1 while the pod's kill switch is engaged.", []string{"pod"}, nil)
	descVersion = prometheus.NewDesc("tandem_control_version",
		"Control-state version this instance has applied.", []string{"instance"}, nil)
	descComparisons = prometheus.NewDesc("tandem_comparisons_total",
		"Dual-written operations compared.", []string{"pod"}, nil)
	descDivergences = prometheus.NewDesc("tandem_divergences_total",
		"Comparisons that diverged, and drifted positions found by audits, by kind.", []string{"pod", "kind"}, nil)
	descContention = prometheus.NewDesc("tandem_contention_total",
		"Comparisons whose answers differed only at the sold-out boundary, explained: matches, counted apart.", []string{"pod"}, nil)
	descContentionRate = prometheus.NewDesc("tandem_contention_rate",
		"Share of the pod's comparisons over the gate window that were explained contention.", []string{"pod"}, nil)
	descSoTErrors = prometheus.NewDesc("tandem_sot_errors_total",
		"Compared operations whose source of truth failed.", []string{"pod"}, nil)
	// The label is not "quantile": these are gauges computed over the gate
	// window, not a summary, and promtool rejects "quantile" elsewhere.
	descStoreLatency = prometheus.NewDesc("tandem_store_latency_seconds",
		"Per-store latency of compared operations over the gate window, at the window quantile.",
		[]string{"pod", "store", "window_quantile"}, nil)
	descDivQueued = prometheus.NewDesc("tandem_divergence_queue_length",
		"Divergences waiting to be persisted.", nil, nil)
	descDivPersisted = prometheus.NewDesc("tandem_divergences_persisted_total",
		"Divergences written to the control database.", nil, nil)
	descDivDropped = prometheus.NewDesc("tandem_divergences_unpersisted_total",
		"Divergences counted but not persisted (queue full or log failing).", []string{"reason"}, nil)
	descRedisPool = prometheus.NewDesc("tandem_redis_pool_connections",
		"Redis client pool connections of a pod.", []string{"pod", "state"}, nil)
	descRedisPoolEvents = prometheus.NewDesc("tandem_redis_pool_events_total",
		"Redis client pool hits, misses and timeouts of a pod.", []string{"pod", "event"}, nil)
	descFenceTimeouts = prometheus.NewDesc("tandem_router_fence_timeouts_total",
		"Requests that went through a source-of-truth change before the work admitted under the old source of truth had finished (the fence's bound ran out).", []string{"pod"}, nil)
	descPrevSoTWaits = prometheus.NewDesc("tandem_router_flux_waits_total",
		"Requests whose cart still had work of the old source of truth in flight after a fence ran out, and that waited for it before the new source of truth answered.", []string{"pod"}, nil)
	descDirtyCarts = prometheus.NewDesc("tandem_shadow_dirty_carts",
		"Carts whose shadow copy waits to be converged to the store that answered the buyer.", []string{"pod"}, nil)
	descConvergences = prometheus.NewDesc("tandem_shadow_convergences_total",
		"Carts converged by the shadow path, the dirty-cart worker and the sweep, by result (equal, repaired, failed, conflict, dropped).", []string{"pod", "result"}, nil)
)

// controlCollector exports the control plane's state at scrape time, so
// the hot path keeps its atomic loads and counts without metric calls.
type controlCollector struct{ m *Main }

// Describe implements prometheus.Collector.
func (c *controlCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPodMode, descPodSoT, descKill, descVersion, descComparisons,
		descDivergences, descContention, descContentionRate, descSoTErrors, descStoreLatency, descDivQueued, descDivPersisted, descDivDropped,
		descRedisPool, descRedisPoolEvents, descFenceTimeouts, descPrevSoTWaits, descDirtyCarts, descConvergences} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *controlCollector) Collect(ch chan<- prometheus.Metric) {
	m := c.m
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	stats := m.cmp.Stats()
	for _, p := range m.pods {
		name := p.cfg.Name
		mode := m.ctl.Mode(name)
		for _, md := range []tandem.Mode{tandem.ModeRedis, tandem.ModeShadow, tandem.ModeMySQL, tandem.ModeMySQLOnly} {
			gauge(descPodMode, b2f(md == mode), name, string(md))
		}
		sot := p.router.Mode().SourceOfTruth()
		for _, st := range []string{tandem.StoreRedis, tandem.StoreMySQL} {
			gauge(descPodSoT, b2f(st == sot), name, st)
		}
		gauge(descKill, b2f(m.sw.Engaged(name)), name)
		ps := stats.Pods[name]
		counter(descComparisons, float64(ps.Comparisons), name)
		counter(descSoTErrors, float64(ps.SourceOfTruthErrors), name)
		counter(descContention, float64(ps.Contention), name)
		for _, k := range tandem.DivergenceKinds {
			counter(descDivergences, float64(ps.Divergences[k]), name, string(k))
		}
		rep := m.cmp.Report(name, mode)
		gauge(descContentionRate, rep.ContentionRate, name)
		for store, l := range rep.LatencyMS {
			gauge(descStoreLatency, l.P50/1000, name, store, "0.5")
			gauge(descStoreLatency, l.P99/1000, name, store, "0.99")
		}
		counter(descFenceTimeouts, float64(p.router.FenceTimeouts()), name)
		counter(descPrevSoTWaits, float64(p.router.PrevSoTWaits()), name)
		cs := p.router.ConvergeStats()
		gauge(descDirtyCarts, float64(cs.Dirty), name)
		for _, res := range []dualwrite.ConvergeResult{dualwrite.ConvergeEqual, dualwrite.ConvergeRepaired,
			dualwrite.ConvergeFailed, dualwrite.ConvergeConflict, dualwrite.ConvergeDropped} {
			counter(descConvergences, float64(cs.Results[res]), name, string(res))
		}
		ps2 := p.rdb.PoolStats()
		gauge(descRedisPool, float64(ps2.TotalConns), name, "total")
		gauge(descRedisPool, float64(ps2.IdleConns), name, "idle")
		counter(descRedisPoolEvents, float64(ps2.Hits), name, "hit")
		counter(descRedisPoolEvents, float64(ps2.Misses), name, "miss")
		counter(descRedisPoolEvents, float64(ps2.Timeouts), name, "timeout")
	}
	gauge(descVersion, float64(m.ctl.Version()), m.InstanceID)
	gauge(descDivQueued, float64(stats.Queued))
	counter(descDivPersisted, float64(stats.Persisted))
	counter(descDivDropped, float64(stats.Dropped), "queue_full")
	counter(descDivDropped, float64(stats.PersistErrors), "log_error")
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// convergeObserver records the time from a cart's divergence to its
// convergence (dualwrite.ConvergeObserver).
type convergeObserver struct{ h prometheus.Observer }

func newConvergeObserver(reg prometheus.Registerer) *convergeObserver {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "tandem_shadow_convergence_seconds",
		Help:    "Time from a cart's divergence (marked dirty) to its convergence.",
		Buckets: []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300},
	})
	reg.MustRegister(h)
	return &convergeObserver{h: h}
}

// ObserveConvergence implements dualwrite.ConvergeObserver.
func (o *convergeObserver) ObserveConvergence(pod string, res dualwrite.ConvergeResult, since time.Duration) {
	if since > 0 && (res == dualwrite.ConvergeRepaired || res == dualwrite.ConvergeEqual) {
		o.h.Observe(since.Seconds())
	}
}
