package web

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the HTTP layer's Prometheus metrics. One value may serve both
// APIs; the api label tells them apart.
type Metrics struct {
	requestDuration *prometheus.HistogramVec
	reservations    *prometheus.CounterVec
	inFlight        *prometheus.GaugeVec
	shed            *prometheus.CounterVec
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
