package bench

import "github.com/prometheus/client_golang/prometheus"

// Unexported helpers the external tests exercise.
var (
	ModePath = modePath
	DialAddr = dialAddr
)

// HoldsSince returns the mean and p99 hold per conn_tag observed in g
// after before ran.
func HoldsSince(g prometheus.Gatherer, between func()) (means, p99 map[string]float64) {
	before := gatherHolds(g)
	between()
	d := gatherHolds(g).since(before)
	return d.meansMS(), d.quantilesMS(0.99)
}
