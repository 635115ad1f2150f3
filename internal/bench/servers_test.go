package bench_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/internal/bench"
)

func TestStatCPU(t *testing.T) {
	t.Run("OK", func(t *testing.T) {
		// A command name with a space and a parenthesis, as the kernel
		// prints it; utime 1234 and stime 56 ticks (fields 14 and 15).
		stat := "3811 (my (odd) d) S 1 3811 3811 0 -1 4194560 12345 0 0 0 1234 56 0 0 20 0 38 0 1234 2000000000 30000 18446744073709551615\n"
		user, sys, err := bench.StatCPU([]byte(stat))
		if err != nil {
			t.Fatal(err)
		}
		if user != 12340*time.Millisecond || sys != 560*time.Millisecond {
			t.Errorf("got user %v sys %v, want 12.34s and 560ms", user, sys)
		}
	})
	t.Run("ErrShort", func(t *testing.T) {
		for _, stat := range []string{"", "12 (x) S 1 2 3", "12 x S"} {
			if _, _, err := bench.StatCPU([]byte(stat)); err == nil {
				t.Errorf("got no error for %q, want one", stat)
			}
		}
	})
}

func TestListenInodes(t *testing.T) {
	// 127.0.0.1:3306 (0CEA) listening, an established connection from that
	// port, and 127.0.0.1:6379 (18EB) listening.
	table := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:0CEA 00000000:0000 0A 00000000:00000000 00:00000000 00000000   106        0 22108 1 0000000000000000 100 0 0 10 0
   1: 0100007F:0CEA 0100007F:9C40 01 00000000:00000000 00:00000000 00000000   106        0 99123 1 0000000000000000 20 4 30 10 -1
   2: 0100007F:18EB 00000000:0000 0A 00000000:00000000 00:00000000 00000000   107        0 22109 1 0000000000000000 100 0 0 10 0
`
	for _, tc := range []struct {
		port int
		want []uint64
	}{{3306, []uint64{22108}}, {6379, []uint64{22109}}, {5432, nil}} {
		got, err := bench.ListenInodes(strings.NewReader(table), tc.port)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(tc.want) || len(got) == 1 && got[0] != tc.want[0] {
			t.Errorf("port %d: got %v, want %v", tc.port, got, tc.want)
		}
	}
}

func TestCPUBoundLimit(t *testing.T) {
	for _, tc := range []struct {
		cores int
		us    float64
		want  float64
	}{{2, 100, 20000}, {2, 27, 2e6 / 27}, {8, 1000, 8000}, {2, 0, 0}, {0, 100, 0}} {
		if got := bench.CPUBoundLimit(tc.cores, tc.us); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("CPUBoundLimit(%d, %v): got %v, want %v", tc.cores, tc.us, got, tc.want)
		}
	}
}

func TestCostPerOp(t *testing.T) {
	status := func(q, reads, fsyncs float64) map[string]float64 {
		return map[string]float64{"Questions": q, "Handler_read_key": reads, "Handler_read_next": 2 * reads,
			"Handler_read_first": 0, "Handler_read_last": 0, "Handler_read_prev": 0, "Handler_read_rnd": 0,
			"Handler_read_rnd_next": reads, "Innodb_data_fsyncs": fsyncs}
	}
	before := bench.ServerSample{MySQLCPU: 10 * time.Second, RedisCPU: time.Second, Status: status(100, 1000, 50), RedisCommands: 10}
	// 1000 operations: mysqld 2 s more (2000 us/op), redis 0.1 s (100
	// us/op), 4001 statements (the meter's own SHOW is one), 4000 reads
	// of each of three counters, 1000 fsyncs, 3001 commands (INFO is one).
	after := bench.ServerSample{MySQLCPU: 12 * time.Second, RedisCPU: 1100 * time.Millisecond, Status: status(4101, 5000, 1050), RedisCommands: 3011}
	r := bench.Result{OpsPerSec: 500, CPUUSPerOp: 400}
	bench.CostPerOp(&r, before, after, 1000, 2)
	c := r.ServerCost
	for name, got := range map[string]*float64{"mysql cpu": c.MySQLCPUUSPerOp, "redis cpu": c.RedisCPUUSPerOp,
		"statements": c.MySQLStatementsPerOp, "rows read": c.MySQLRowsReadPerOp, "fsyncs": c.MySQLFsyncsPerOp, "redis commands": c.RedisCommandsPerOp} {
		if got == nil {
			t.Errorf("%s: got none, want a figure", name)
		}
	}
	if t.Failed() {
		return
	}
	for _, tc := range []struct {
		name      string
		got, want float64
	}{
		{"mysql cpu us/op", *c.MySQLCPUUSPerOp, 2000},
		{"redis cpu us/op", *c.RedisCPUUSPerOp, 100},
		{"statements/op", *c.MySQLStatementsPerOp, 4},
		{"rows read/op", *c.MySQLRowsReadPerOp, 16},
		{"fsyncs/op", *c.MySQLFsyncsPerOp, 1},
		{"redis commands/op", *c.RedisCommandsPerOp, 3},
		{"total cpu us/op", c.TotalCPUUSPerOp, 2500},
		{"limit ops/s", c.CPUBoundOpsPerSec, 800},
		{"of limit", c.OfLimit, 0.625},
	} {
		if math.Abs(tc.got-tc.want) > 1e-9 {
			t.Errorf("%s: got %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	if c.MySQLLogFsyncsPerOp != nil {
		t.Errorf("got log fsyncs %v, want none (the server has no Innodb_os_log_fsyncs)", *c.MySQLLogFsyncsPerOp)
	}
}

func TestLocalPIDNotOnThisHost(t *testing.T) {
	// 192.0.2.1 is TEST-NET-1: never an address of this host.
	_, err := bench.LocalPID("192.0.2.1:3306")
	if err == nil || !strings.Contains(err.Error(), "not on this host") {
		t.Errorf("got %v, want not on this host", err)
	}
}

func TestLatencyHonest(t *testing.T) {
	for _, tc := range []struct {
		rtt, direct, lat float64
		want             bool
	}{
		{1.1, 0.1, 0.5, true},   // exactly 2 x 0.5 added
		{1.28, 0.1, 0.5, true},  // 18% over
		{1.35, 0.1, 0.5, false}, // 25% over
		{2.4, 0.1, 0.5, false},  // the old proxy's Go timers
		{0.85, 0.1, 0.5, false}, // 25% under
		{0.1, 0.1, 0, true},     // no proxy
	} {
		if got := bench.LatencyHonest(tc.rtt, tc.direct, tc.lat); got != tc.want {
			t.Errorf("LatencyHonest(%v, %v, %v): got %v, want %v", tc.rtt, tc.direct, tc.lat, got, tc.want)
		}
	}
}

func TestBuyerBody(t *testing.T) {
	for _, lines := range [][]tandem.LineRequest{
		{{ItemID: 1, Quantity: 1}},
		{{ItemID: 1, Quantity: 3}, {ItemID: 2, Quantity: 2}, {ItemID: 8, Quantity: 2}},
	} {
		got, want, err := bench.ReserveBodies("1a2b-3", "m", 1, 1_000_123, 7, 12345, lines)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("got  %s\nwant %s", got, want)
		}
	}
}
