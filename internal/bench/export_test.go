package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

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

// StatCPU parses /proc/<pid>/stat contents into user and system CPU.
func StatCPU(stat []byte) (user, sys time.Duration, err error) {
	c, err := statCPU(stat)
	return c.user, c.sys, err
}

// ListenInodes parses a /proc/net/tcp table for the listeners of port.
var ListenInodes = listenInodes

// CPUBoundLimit is cores x 1 s / CPU per op.
var CPUBoundLimit = cpuBoundLimit

// ServerSample is a sample of the servers' figures, as the meter takes it.
type ServerSample struct {
	MySQLCPU, RedisCPU time.Duration // user + system, split evenly
	Status             map[string]float64
	RedisCommands      float64
}

// CostPerOp sets r's server cost from two samples of servers on this host.
func CostPerOp(r *Result, before, after ServerSample, ops int64, cores int) {
	conv := func(s ServerSample) serverSample {
		return serverSample{mysqlCPU: cpuTime{user: s.MySQLCPU / 2, sys: s.MySQLCPU - s.MySQLCPU/2}, mysqlOK: s.MySQLCPU > 0,
			redisCPU: cpuTime{user: s.RedisCPU}, redisOK: s.RedisCPU > 0,
			status: s.Status, redisCmds: s.RedisCommands, redisCmdsOK: s.RedisCommands > 0}
	}
	r.costPerOp(&serverMeter{}, conv(before), conv(after), ops, cores)
}

// LocalPID finds the process of this host listening at addr.
var LocalPID = localPID

// LatencyHonest judges the proxy's added round trip against the asked one.
var LatencyHonest = latencyHonest

// reserveLine and reserveBody are a reserve as encoding/json writes it:
// the reference of buyers.appendBody.
type reserveLine struct {
	ItemID   int64   `json:"inventory_item_id"`
	Quantity int64   `json:"quantity"`
	GroupIDs []int64 `json:"group_ids"`
}

type reserveBody struct {
	CartToken string        `json:"cart_token"`
	ShopID    int64         `json:"shop_id"`
	Lines     []reserveLine `json:"lines"`
}

// ReserveBodies returns the body buyers.appendBody writes and the one
// json.Marshal writes for the same reserve.
func ReserveBodies(cellID, phase string, shop, itemBase int64, w int, seq int64, lines []tandem.LineRequest) (got, want []byte, err error) {
	l := &buyers{b: &HTTP{Shop: shop}, cellID: cellID, itemBase: itemBase}
	got = l.appendBody(nil, phase, w, seq, lines)
	req := reserveBody{CartToken: fmt.Sprintf("bh-%s-%s-%d-%d", cellID, phase, w, seq), ShopID: shop}
	for _, ln := range lines {
		req.Lines = append(req.Lines, reserveLine{ItemID: itemBase + ln.ItemID - 1, Quantity: ln.Quantity, GroupIDs: []int64{1}})
	}
	want, err = json.Marshal(req)
	return got, want, err
}
