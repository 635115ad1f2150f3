package bench

import (
	"math"
	"sort"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// connHoldMetric is the MySQL engine's histogram of how long each flow,
// by conn_tag, holds a connection.
const connHoldMetric = "tandem_mysql_conn_hold_seconds"

// holdHist is one conn_tag's connection-hold histogram: sample count and
// sum, and the cumulative count at each finite upper bound.
type holdHist struct {
	count  uint64
	sum    float64
	bounds []float64
	cum    []uint64
}

// holds is a snapshot of the hold histograms by conn_tag (the series of
// every pod and store summed).
type holds map[string]holdHist

// gatherHolds reads the hold histograms from g; nil when g is nil or fails.
func gatherHolds(g prometheus.Gatherer) holds {
	if g == nil {
		return nil
	}
	mfs, err := g.Gather()
	if err != nil {
		return nil
	}
	out := holds{}
	for _, mf := range mfs {
		if mf.GetName() != connHoldMetric || mf.GetType() != dto.MetricType_HISTOGRAM {
			continue
		}
		for _, m := range mf.GetMetric() {
			tag := ""
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "conn_tag" {
					tag = lp.GetValue()
				}
			}
			out[tag] = out[tag].add(m.GetHistogram())
		}
	}
	return out
}

// gatherHoldsOf gathers from the Gatherer gather returns, if any.
func gatherHoldsOf(gather func() prometheus.Gatherer) holds {
	if gather == nil {
		return nil
	}
	return gatherHolds(gather())
}

func (h holdHist) add(p *dto.Histogram) holdHist {
	bs := p.GetBucket()
	if h.bounds == nil {
		h.bounds, h.cum = make([]float64, len(bs)), make([]uint64, len(bs))
		for i, b := range bs {
			h.bounds[i] = b.GetUpperBound()
		}
	}
	h.count += p.GetSampleCount()
	h.sum += p.GetSampleSum()
	for i, b := range bs {
		if i < len(h.cum) && b.GetUpperBound() == h.bounds[i] {
			h.cum[i] += b.GetCumulativeCount()
		}
	}
	return h
}

// since returns what was observed after before was taken.
func (s holds) since(before holds) holds {
	out := holds{}
	for tag, h := range s {
		b, ok := before[tag]
		d := holdHist{count: h.count - b.count, sum: h.sum - b.sum, bounds: h.bounds, cum: make([]uint64, len(h.cum))}
		for i := range h.cum {
			d.cum[i] = h.cum[i]
			if ok && i < len(b.cum) {
				d.cum[i] -= b.cum[i]
			}
		}
		if d.count > 0 {
			out[tag] = d
		}
	}
	return out
}

// meansMS returns each tag's mean hold in milliseconds.
func (s holds) meansMS() map[string]float64 {
	if len(s) == 0 {
		return nil
	}
	out := map[string]float64{}
	for tag, h := range s {
		out[tag] = h.sum / float64(h.count) * 1000
	}
	return out
}

// quantilesMS returns each tag's q-quantile hold in milliseconds.
func (s holds) quantilesMS(q float64) map[string]float64 {
	if len(s) == 0 {
		return nil
	}
	out := map[string]float64{}
	for tag, h := range s {
		out[tag] = h.quantile(q) * 1000
	}
	return out
}

// quantile estimates the q-quantile as Prometheus' histogram_quantile
// does: linear within the bucket that holds it, the highest finite bound
// when it falls above every bound. Its precision is the bucket's width.
func (h holdHist) quantile(q float64) float64 {
	if h.count == 0 {
		return math.NaN()
	}
	rank := q * float64(h.count)
	i := sort.Search(len(h.cum), func(i int) bool { return float64(h.cum[i]) >= rank })
	if i == len(h.cum) {
		if len(h.bounds) == 0 {
			return math.NaN()
		}
		return h.bounds[len(h.bounds)-1]
	}
	lower, below := 0.0, uint64(0)
	if i > 0 {
		lower, below = h.bounds[i-1], h.cum[i-1]
	}
	inBucket := float64(h.cum[i] - below)
	if inBucket == 0 {
		return h.bounds[i]
	}
	return lower + (h.bounds[i]-lower)*(rank-float64(below))/inBucket
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
