package bench

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// connHoldMeans reads the engine's connection-hold histogram per conn_tag.
func connHoldMeans(g prometheus.Gatherer) map[string]float64 {
	mfs, err := g.Gather()
	if err != nil {
		return nil
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "tandem_mysql_conn_hold_seconds" || mf.GetType() != dto.MetricType_HISTOGRAM {
			continue
		}
		for _, m := range mf.GetMetric() {
			h := m.GetHistogram()
			if h.GetSampleCount() == 0 {
				continue
			}
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "conn_tag" {
					out[lp.GetValue()] = h.GetSampleSum() / float64(h.GetSampleCount()) * 1000
				}
			}
		}
	}
	return out
}

// counterSum adds up every series of the counter name.
func counterSum(g prometheus.Gatherer, name string) float64 {
	mfs, err := g.Gather()
	if err != nil {
		return 0
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}
