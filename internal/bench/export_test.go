package bench

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemhq/tandem"
)

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

// SetMode walks pod to mode through the admin API at admin (host:port),
// as a cell does.
func SetMode(ctx context.Context, admin, token, pod string, mode tandem.Mode) error {
	c := newClient(&target{admin: admin, adminToken: token, pod: pod}, 1)
	defer c.close()
	return c.setMode(ctx, mode)
}
