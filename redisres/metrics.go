package redisres

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemhq/tandem"
)

type metrics struct {
	opDuration *prometheus.HistogramVec
	expired    prometheus.Counter
	windows    *prometheus.CounterVec
}

func newMetrics(r prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		opDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "tandem",
			Subsystem: "redis",
			Name:      "op_duration_seconds",
			Help:      "Duration of Redis engine operations by operation and result code.",
			Buckets:   []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"op", "result"}),
		expired: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "tandem",
			Subsystem: "redis",
			Name:      "holds_expired_total",
			Help:      "Holds returned to stock by the reaper of this instance.",
		}),
		windows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "tandem",
			Subsystem: "redis",
			Name:      "two_system_window_total",
			Help:      "Times a claim or stock count hit the window between the ledger write and the Redis script.",
		}, []string{"op"}),
	}
	for _, c := range []prometheus.Collector{m.opDuration, m.expired, m.windows} {
		if err := r.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// observe records an operation's duration under its result code; use as
// `defer s.observe("reserve", time.Now(), &err)`.
func (s *Store) observe(op string, start time.Time, err *error) {
	if s.metrics == nil {
		return
	}
	result := "ok"
	if *err != nil {
		result = tandem.ErrorCode(*err)
	}
	s.metrics.opDuration.WithLabelValues(op, result).Observe(time.Since(start).Seconds())
}

func (s *Store) countWindow(op string) {
	if s.metrics != nil {
		s.metrics.windows.WithLabelValues(op).Inc()
	}
}
