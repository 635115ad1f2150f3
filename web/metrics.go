package web

import (
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the HTTP layer's Prometheus metrics. One value may serve both
// APIs; the api label tells them apart.
type Metrics struct {
	requestDuration *prometheus.HistogramVec
	reservations    *prometheus.CounterVec
	inFlight        *prometheus.GaugeVec
	shed            *prometheus.CounterVec

	// Children looked up per request, by their label values.
	reservationsBy childCache[reservationLabels, prometheus.Counter]
}

// reservationLabels are the labels of tandem_reservations_total.
type reservationLabels struct{ op, outcome, pod, sot string }

// durationLabels are the labels of tandem_http_request_duration_seconds
// that vary within one API.
type durationLabels struct {
	method, route string
	status        int
}

// maxCachedChildren bounds the children a childCache keeps; the label
// values past it are looked up in their vector each time.
const maxCachedChildren = 512

// childCache keeps the children of a metric vector by their label values,
// so that a request finds its child with an atomic load and a map read,
// instead of hashing its label values into the vector under its lock. The
// map is copied on write: children are added rarely, read on every request.
type childCache[K comparable, M any] struct {
	mu sync.Mutex
	m  atomic.Pointer[map[K]M]
}

// get returns the child of k, made with child the first time.
func (c *childCache[K, M]) get(k K, child func(K) M) M {
	if m := c.m.Load(); m != nil {
		if v, ok := (*m)[k]; ok {
			return v
		}
	}
	v := child(k)
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.m.Load()
	if old != nil && len(*old) >= maxCachedChildren {
		return v
	}
	m := make(map[K]M, 1)
	if old != nil {
		m = make(map[K]M, len(*old)+1)
		for k, v := range *old {
			m[k] = v
		}
	}
	m[k] = v
	c.m.Store(&m)
	return v
}

// reservation returns the counter of one reservation answer.
func (m *Metrics) reservation(op, outcome, pod, sot string) prometheus.Counter {
	return m.reservationsBy.get(reservationLabels{op, outcome, pod, sot}, func(l reservationLabels) prometheus.Counter {
		return m.reservations.WithLabelValues(l.op, l.outcome, l.pod, l.sot)
	})
}

// durations are one API's request latencies, with their children cached.
type durations struct {
	api string
	vec *prometheus.HistogramVec
	by  childCache[durationLabels, prometheus.Observer]
}

func (d *durations) observer(method, route string, status int) prometheus.Observer {
	return d.by.get(durationLabels{method, route, status}, func(l durationLabels) prometheus.Observer {
		return d.vec.WithLabelValues(d.api, l.method, l.route, strconv.Itoa(l.status))
	})
}

// NewMetrics creates the metrics and registers them with reg; a nil reg
// leaves them unregistered (useful in tests).
//
//   - tandem_http_request_duration_seconds{api,method,route,status}: request
//     latency by chi route pattern and status code.
//   - tandem_reservations_total{op,outcome,pod,source_of_truth}: reserve,
//     claim, release and get answers; outcome is the reservation status,
//     "replayed" for an idempotent repeat, or the error code.
//   - tandem_http_in_flight_requests{api}: requests being served.
//   - tandem_http_shed_requests_total{api}: requests refused by the in-flight
//     limit.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tandem_http_request_duration_seconds",
			Help:    "HTTP request latency by API, route pattern and status.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"api", "method", "route", "status"}),
		reservations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_reservations_total",
			Help: "Reservation operations by op, outcome, pod and source of truth.",
		}, []string{"op", "outcome", "pod", "source_of_truth"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tandem_http_in_flight_requests",
			Help: "HTTP requests being served, by API.",
		}, []string{"api"}),
		shed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_http_shed_requests_total",
			Help: "HTTP requests refused with 503 by the in-flight limit, by API.",
		}, []string{"api"}),
	}
	// Export the series at zero from the start, so that dashboards and
	// alerts see the families before the first request; only the checkout
	// API sheds.
	m.inFlight.WithLabelValues("checkout")
	m.inFlight.WithLabelValues("admin")
	m.shed.WithLabelValues("checkout")
	if reg != nil {
		reg.MustRegister(m.requestDuration, m.reservations, m.inFlight, m.shed)
	}
	return m
}
