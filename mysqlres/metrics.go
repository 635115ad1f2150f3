package mysqlres

import (
	"database/sql"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the store's Prometheus metrics; a nil *metrics records
// nothing (no Registerer).
type metrics struct {
	reg        prometheus.Registerer
	collectors []prometheus.Collector

	connHold   *prometheus.HistogramVec
	admitWait  *prometheus.HistogramVec
	retries    *prometheus.CounterVec
	slowPath   prometheus.Counter
	shortTrips prometheus.Counter
	replenUnit prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, db *sql.DB) (*metrics, error) {
	if reg == nil {
		return nil, nil
	}
	m := &metrics{
		reg: reg,
		connHold: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tandem_mysql_conn_hold_seconds",
			Help:    "How long a flow of the MySQL engine holds a connection, from acquiring it to giving it back, by caller tag.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"conn_tag"}),
		admitWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tandem_mysql_admission_wait_seconds",
			Help:    "How long a buyer flow of the MySQL engine (reserve, claim, release) waited in the engine's first-in-first-out admission before taking a connection, by caller tag.",
			Buckets: []float64{0, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"conn_tag"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_mysql_tx_retries_total",
			Help: "Transactions of the MySQL engine retried after a deadlock (1213) or lock-wait timeout (1205), by caller tag.",
		}, []string{"conn_tag"}),
		slowPath: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tandem_mysql_reserve_slow_total",
			Help: "Reserves that left the SKIP LOCKED fast path for the ledger-locked slow path.",
		}),
		shortTrips: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tandem_mysql_reserve_one_trip_short_total",
			Help: "Reserves of single-group carts whose one-round-trip batch found a line short and went on to the two-trip fast path (its wrap-around) or the slow path.",
		}),
		replenUnit: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tandem_mysql_replenished_units_total",
			Help: "Units moved from the ledger's unpooled count into the unit pool.",
		}),
	}
	m.collectors = []prometheus.Collector{m.connHold, m.admitWait, m.retries, m.slowPath, m.shortTrips, m.replenUnit, newDBStatsCollector(db)}
	for i, c := range m.collectors {
		if err := reg.Register(c); err != nil {
			for _, done := range m.collectors[:i] {
				reg.Unregister(done)
			}
			return nil, fmt.Errorf("mysqlres: register metrics: %w", err)
		}
	}
	return m, nil
}

func (m *metrics) unregister() {
	if m == nil {
		return
	}
	for _, c := range m.collectors {
		m.reg.Unregister(c)
	}
}

func (m *metrics) observeHold(tag string, seconds float64) {
	if m != nil {
		m.connHold.WithLabelValues(tag).Observe(seconds)
	}
}

func (m *metrics) observeAdmission(tag string, seconds float64) {
	if m != nil {
		m.admitWait.WithLabelValues(tag).Observe(seconds)
	}
}

func (m *metrics) retry(tag string) {
	if m != nil {
		m.retries.WithLabelValues(tag).Inc()
	}
}

func (m *metrics) slow() {
	if m != nil {
		m.slowPath.Inc()
	}
}

func (m *metrics) shortTrip() {
	if m != nil {
		m.shortTrips.Inc()
	}
}

func (m *metrics) replenished(n int64) {
	if m != nil && n > 0 {
		m.replenUnit.Add(float64(n))
	}
}

// dbStatsCollector exports database/sql's pool statistics at scrape time.
type dbStatsCollector struct {
	db                                     *sql.DB
	maxOpen, open, inUse, idle             *prometheus.Desc
	waitCount, waitDuration, maxIdleClosed *prometheus.Desc
	maxLifetimeClosed                      *prometheus.Desc
}

func newDBStatsCollector(db *sql.DB) *dbStatsCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("tandem_mysql_pool_"+name, help, nil, nil)
	}
	return &dbStatsCollector{
		db:                db,
		maxOpen:           d("max_open_connections", "Most connections the engine's pool may open."),
		open:              d("open_connections", "Connections open, in use or idle."),
		inUse:             d("in_use_connections", "Connections in use."),
		idle:              d("idle_connections", "Idle connections."),
		waitCount:         d("wait_count_total", "Times a flow waited for a free connection."),
		waitDuration:      d("wait_duration_seconds_total", "Time flows spent waiting for a free connection."),
		maxIdleClosed:     d("max_idle_closed_total", "Connections closed because the idle pool was full."),
		maxLifetimeClosed: d("max_lifetime_closed_total", "Connections closed at their maximum lifetime."),
	}
}

// Describe implements prometheus.Collector.
func (c *dbStatsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.maxOpen, c.open, c.inUse, c.idle, c.waitCount, c.waitDuration, c.maxIdleClosed, c.maxLifetimeClosed} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *dbStatsCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.db.Stats()
	ch <- prometheus.MustNewConstMetric(c.maxOpen, prometheus.GaugeValue, float64(st.MaxOpenConnections))
	ch <- prometheus.MustNewConstMetric(c.open, prometheus.GaugeValue, float64(st.OpenConnections))
	ch <- prometheus.MustNewConstMetric(c.inUse, prometheus.GaugeValue, float64(st.InUse))
	ch <- prometheus.MustNewConstMetric(c.idle, prometheus.GaugeValue, float64(st.Idle))
	ch <- prometheus.MustNewConstMetric(c.waitCount, prometheus.CounterValue, float64(st.WaitCount))
	ch <- prometheus.MustNewConstMetric(c.waitDuration, prometheus.CounterValue, st.WaitDuration.Seconds())
	ch <- prometheus.MustNewConstMetric(c.maxIdleClosed, prometheus.CounterValue, float64(st.MaxIdleClosed))
	ch <- prometheus.MustNewConstMetric(c.maxLifetimeClosed, prometheus.CounterValue, float64(st.MaxLifetimeClosed))
}
