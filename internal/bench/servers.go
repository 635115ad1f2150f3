package bench

import (
	"context"
	"database/sql"
	"fmt"
	"runtime"
	"strconv"
	"strings"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
)

// mysqlCounters are the SHOW GLOBAL STATUS counters a cell takes deltas
// of. Innodb_os_log_fsyncs is MySQL's redo fsync count; MariaDB 10.8 and
// later fold redo fsyncs into Innodb_data_fsyncs and have no such counter.
var mysqlCounters = []string{
	"Questions",
	"Handler_read_first", "Handler_read_key", "Handler_read_last", "Handler_read_next",
	"Handler_read_prev", "Handler_read_rnd", "Handler_read_rnd_next",
	"Innodb_data_fsyncs", "Innodb_os_log_fsyncs",
}

// serverSample is what the servers had done at one moment: their process
// CPU (when on this host), MySQL's status counters and Redis's commands.
type serverSample struct {
	mysqlCPU, redisCPU cpuTime
	mysqlOK, redisOK   bool
	status             map[string]float64
	redisCmds          float64
	redisCmdsOK        bool
}

// serverMeter samples the MySQL and Redis servers a bench runs against, so
// that a cell can report their cost per operation beside the bench
// process's own.
type serverMeter struct {
	db                 *sql.DB
	rdb                redis.UniversalClient
	mysqlPID, redisPID int
	// mysqlWhy and redisWhy say why a server's CPU is not measured.
	mysqlWhy, redisWhy string
}

// newServerMeter finds the processes of the servers at mysqlDSN and rt
// when they run on this host, and opens a connection of its own to each
// for their counters. It never fails: what it cannot measure it says.
func newServerMeter(mysqlDSN string, rt Redis) *serverMeter {
	m := &serverMeter{}
	if cfg, err := mysql.ParseDSN(mysqlDSN); err != nil {
		m.mysqlWhy = err.Error()
	} else {
		if m.mysqlPID, err = localPID(cfg.Addr); err != nil {
			m.mysqlWhy = "MySQL server's CPU not measured: " + err.Error()
		}
		cfg.DBName = ""
		if db, err := sql.Open("mysql", cfg.FormatDSN()); err == nil {
			db.SetMaxOpenConns(1)
			m.db = db
		}
	}
	if len(rt.Cluster) > 0 {
		m.redisWhy = "Redis server's CPU not measured: a Redis Cluster's nodes are not sampled"
	} else if pid, err := localPID(rt.Addr); err != nil {
		m.redisWhy = "Redis server's CPU not measured: " + err.Error()
	} else {
		m.redisPID = pid
	}
	m.rdb = rt.client()
	return m
}

func (m *serverMeter) close() {
	if m.db != nil {
		m.db.Close()
	}
	m.rdb.Close()
}

// sample reads every figure it can; a figure it cannot read stays absent.
func (m *serverMeter) sample(ctx context.Context) serverSample {
	var s serverSample
	if m.mysqlPID > 0 {
		var err error
		s.mysqlCPU, err = pidCPU(m.mysqlPID)
		s.mysqlOK = err == nil
	}
	if m.redisPID > 0 {
		var err error
		s.redisCPU, err = pidCPU(m.redisPID)
		s.redisOK = err == nil
	}
	if m.db != nil {
		s.status = mysqlStatus(ctx, m.db)
	}
	if info, err := m.rdb.Info(ctx, "stats").Result(); err == nil {
		s.redisCmds, s.redisCmdsOK = infoField(info, "total_commands_processed")
	}
	return s
}

// mysqlStatus reads mysqlCounters from SHOW GLOBAL STATUS; nil when the
// server does not answer.
func mysqlStatus(ctx context.Context, db *sql.DB) map[string]float64 {
	rows, err := db.QueryContext(ctx, "SHOW GLOBAL STATUS WHERE Variable_name IN ('"+strings.Join(mysqlCounters, "','")+"')")
	if err != nil {
		return nil
	}
	defer rows.Close()
	out := map[string]float64{}
	for rows.Next() {
		var name, value string
		if rows.Scan(&name, &value) != nil {
			return nil
		}
		if v, err := strconv.ParseFloat(value, 64); err == nil {
			out[name] = v
		}
	}
	if rows.Err() != nil {
		return nil
	}
	return out
}

// infoField returns the value of name in a Redis INFO answer.
func infoField(info, name string) (float64, bool) {
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && k == name {
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil
		}
	}
	return 0, false
}

// ServerCost is what a cell's operations cost outside the bench process:
// the servers' CPU and MySQL's work per operation, and the CPU-bound limit
// all of it sets. The servers' counters and CPU are global: on a machine
// shared with other work they include it.
type ServerCost struct {
	// MySQLCPUUSPerOp and RedisCPUUSPerOp are the server processes' CPU
	// time (/proc/<pid>/stat, user + system) over the cell, in
	// microseconds per operation; absent when the server is not on this
	// host (MySQLCPUNote and RedisCPUNote say why).
	MySQLCPUUSPerOp *float64 `json:"mysql_server_cpu_us_per_op,omitempty"`
	RedisCPUUSPerOp *float64 `json:"redis_server_cpu_us_per_op,omitempty"`
	MySQLCPUNote    string   `json:"mysql_server_cpu_note,omitempty"`
	RedisCPUNote    string   `json:"redis_server_cpu_note,omitempty"`
	// MySQLStatementsPerOp is the Questions delta per operation (the
	// statements clients sent); MySQLRowsReadPerOp the Handler_read_*
	// deltas summed (index and table reads: rows the engine examined);
	// MySQLFsyncsPerOp the Innodb_data_fsyncs delta (on MariaDB, redo
	// fsyncs included), and MySQLLogFsyncsPerOp Innodb_os_log_fsyncs' where
	// the server has it (MySQL).
	MySQLStatementsPerOp *float64 `json:"mysql_statements_per_op,omitempty"`
	MySQLRowsReadPerOp   *float64 `json:"mysql_rows_read_per_op,omitempty"`
	MySQLFsyncsPerOp     *float64 `json:"mysql_fsyncs_per_op,omitempty"`
	MySQLLogFsyncsPerOp  *float64 `json:"mysql_log_fsyncs_per_op,omitempty"`
	// RedisCommandsPerOp is the total_commands_processed delta per op.
	RedisCommandsPerOp *float64 `json:"redis_commands_per_op,omitempty"`
	// TotalCPUUSPerOp is the bench process's CPU per op plus the servers'
	// measured ones; Cores the CPUs of this host; CPUBoundOpsPerSec the
	// CPU-bound limit, Cores x 1 s / TotalCPUUSPerOp; OfLimit the achieved
	// ops/s over it.
	TotalCPUUSPerOp   float64 `json:"total_cpu_us_per_op,omitempty"`
	Cores             int     `json:"cores,omitempty"`
	CPUBoundOpsPerSec float64 `json:"cpu_bound_ops_per_sec,omitempty"`
	OfLimit           float64 `json:"of_cpu_bound_limit,omitempty"`
}

// costPerOp sets the servers' cost per operation from the samples before
// and after the measured load of ops operations, and the cell's CPU-bound
// limit from it and the bench process's CPU per op (r.CPUUSPerOp).
func (r *Result) costPerOp(m *serverMeter, before, after serverSample, ops int64, cores int) {
	if ops <= 0 {
		return
	}
	per := func(d float64) *float64 { v := d / float64(ops); return &v }
	cpu := func(b, a cpuTime) *float64 {
		return per(float64((a.user + a.sys - b.user - b.sys).Nanoseconds()) / 1000)
	}
	c := &r.ServerCost
	c.MySQLCPUNote, c.RedisCPUNote = m.mysqlWhy, m.redisWhy
	total := r.CPUUSPerOp
	if before.mysqlOK && after.mysqlOK {
		c.MySQLCPUUSPerOp = cpu(before.mysqlCPU, after.mysqlCPU)
		total += *c.MySQLCPUUSPerOp
	} else if c.MySQLCPUNote == "" {
		c.MySQLCPUNote = "MySQL server's CPU not measured: its /proc stat could not be read"
	}
	if before.redisOK && after.redisOK {
		c.RedisCPUUSPerOp = cpu(before.redisCPU, after.redisCPU)
		total += *c.RedisCPUUSPerOp
	} else if c.RedisCPUNote == "" {
		c.RedisCPUNote = "Redis server's CPU not measured: its /proc stat could not be read"
	}
	if before.status != nil && after.status != nil {
		delta := func(names ...string) (float64, bool) {
			var sum float64
			for _, n := range names {
				a, ok1 := after.status[n]
				b, ok2 := before.status[n]
				if !ok1 || !ok2 {
					return 0, false
				}
				sum += a - b
			}
			return sum, true
		}
		if d, ok := delta("Questions"); ok {
			// The meter's own SHOW GLOBAL STATUS is one of them.
			c.MySQLStatementsPerOp = per(max(0, d-1))
		}
		if d, ok := delta(mysqlCounters[1:8]...); ok {
			c.MySQLRowsReadPerOp = per(d)
		}
		if d, ok := delta("Innodb_data_fsyncs"); ok {
			c.MySQLFsyncsPerOp = per(d)
		}
		if d, ok := delta("Innodb_os_log_fsyncs"); ok {
			c.MySQLLogFsyncsPerOp = per(d)
		}
	}
	if before.redisCmdsOK && after.redisCmdsOK {
		// The meter's own INFO is one of them.
		c.RedisCommandsPerOp = per(max(0, after.redisCmds-before.redisCmds-1))
	}
	c.TotalCPUUSPerOp, c.Cores = total, cores
	c.CPUBoundOpsPerSec = cpuBoundLimit(cores, total)
	if c.CPUBoundOpsPerSec > 0 {
		c.OfLimit = r.OpsPerSec / c.CPUBoundOpsPerSec
	}
}

// cpuBoundLimit is the operations per second that cores CPUs can give at
// totalUSPerOp microseconds of CPU per operation: cores x 1 s / CPU per
// op; 0 when nothing was measured.
func cpuBoundLimit(cores int, totalUSPerOp float64) float64 {
	if cores <= 0 || totalUSPerOp <= 0 {
		return 0
	}
	return float64(cores) * 1e6 / totalUSPerOp
}

// hostCores is the CPUs of this host the limit is computed for.
func hostCores() int { return runtime.NumCPU() }

// limitText prints a cell's achieved / limit, "-" when not measured.
func (c ServerCost) limitText() string {
	if c.CPUBoundOpsPerSec <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%% of %.0f", 100*c.OfLimit, c.CPUBoundOpsPerSec)
}
