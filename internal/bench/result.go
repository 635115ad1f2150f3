package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Result is one cell of a benchmark, in the JSON form scripts read.
type Result struct {
	Suite          string  `json:"suite"`
	Store          string  `json:"store,omitempty"`
	Mode           string  `json:"mode,omitempty"`
	Items          int     `json:"items"`
	CartSize       int     `json:"cart_size"`
	Concurrency    int     `json:"concurrency"`
	Rate           float64 `json:"rate,omitempty"`
	MySQLLatencyMS float64 `json:"mysql_latency_ms"`
	// MySQLRoundTripMS is the round trip measured through the latency
	// proxy (median of SELECT 1 on one connection), when there is one.
	MySQLRoundTripMS float64 `json:"mysql_round_trip_ms,omitempty"`
	// MySQLDirectRoundTripMS is the same round trip straight to the
	// server, measured beside it: the proxy adds the difference (within
	// 20% of 2 x MySQLLatencyMS, or the bench says so).
	MySQLDirectRoundTripMS float64 `json:"mysql_direct_round_trip_ms,omitempty"`
	MaxConns               int     `json:"mysql_max_conns,omitempty"`
	// MaxInflight is the mysql engine's admission: how many reserves it
	// ran at once, the others queued first in, first out.
	MaxInflight int                `json:"mysql_max_inflight,omitempty"`
	OpsPerSec   float64            `json:"ops_per_sec"`
	P50MS       float64            `json:"p50_ms"`
	P99MS       float64            `json:"p99_ms"`
	P999MS      float64            `json:"p999_ms"`
	Errors      int64              `json:"errors"`
	Refused     int64              `json:"refused"`
	ConnHoldMS  map[string]float64 `json:"conn_hold_mean_ms,omitempty"`
	// SlowPath counts the MySQL reserves that left the SKIP LOCKED fast path
	// for the ledger-locked slow path; Retries the transactions rerun after
	// a deadlock or lock-wait timeout.
	SlowPath int64 `json:"slow_path,omitempty"`
	Retries  int64 `json:"tx_retries,omitempty"`
	// FirstError is the text of the first failed operation of the cell.
	FirstError  string  `json:"first_error,omitempty"`
	ShadowP99MS float64 `json:"shadow_p99_ms,omitempty"`
	ShadowDrops int64   `json:"shadow_drops,omitempty"`
	// ConnHoldP99MS is the p99 of the connection hold per conn_tag,
	// estimated from the engine's histogram buckets (linear within a
	// bucket, as Prometheus' histogram_quantile): coarse, a bucket wide.
	// Both conn_hold maps cover the measured load only.
	ConnHoldP99MS map[string]float64 `json:"conn_hold_p99_ms,omitempty"`
	// CPUUSPerOp is the bench process's CPU time (getrusage RUSAGE_SELF,
	// user + system) over the measured load, in microseconds per
	// operation: the client, the driver and the latency proxy for the
	// engine suite, the client and the in-process server for http. The
	// database servers are other processes and not counted.
	CPUUSPerOp     float64 `json:"cpu_us_per_op"`
	CPUUserUSPerOp float64 `json:"cpu_user_us_per_op"`
	CPUSysUSPerOp  float64 `json:"cpu_sys_us_per_op"`
	// ServerCost is the servers' side of the cost per operation and the
	// cell's CPU-bound limit.
	ServerCost
}

// PrintResults prints the cells as a table, or as JSON with the run's
// description (when not nil).
func PrintResults(w io.Writer, run *RunInfo, results []Result, asJSON bool) error {
	if asJSON {
		return printJSON(w, run, results)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "suite\tstore/mode\titems\tcart\tconc\tlat_ms\tops/s\tp50_ms\tp99_ms\tp99.9_ms\terrors\trefused\tcpu_us/op\t"+
		"mysqld_us/op\tredis_us/op\tstmts/op\trows/op\tfsyncs/op\tredis_cmds/op\tachieved/cpu_limit\t")
	for _, r := range results {
		name := r.Store
		if name == "" {
			name = r.Mode
		}
		c := r.ServerCost
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%.1f\t%.0f\t%.2f\t%.2f\t%.2f\t%d\t%d\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.Suite, name, r.Items, r.CartSize,
			r.Concurrency, r.MySQLLatencyMS, r.OpsPerSec, r.P50MS, r.P99MS, r.P999MS, r.Errors, r.Refused, r.CPUUSPerOp,
			optText(c.MySQLCPUUSPerOp, "%.0f"), optText(c.RedisCPUUSPerOp, "%.0f"), optText(c.MySQLStatementsPerOp, "%.1f"),
			optText(c.MySQLRowsReadPerOp, "%.1f"), optText(c.MySQLFsyncsPerOp, "%.2f"), optText(c.RedisCommandsPerOp, "%.1f"), c.limitText())
	}
	for _, r := range results {
		if r.FirstError != "" {
			fmt.Fprintf(tw, "first error of %s at C=%d: %s\n", r.Store+r.Mode, r.Concurrency, r.FirstError)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if notes := serverNotes(results); notes != "" {
		fmt.Fprintln(w, notes)
	}
	for _, r := range results {
		if len(r.ConnHoldMS) == 0 {
			continue
		}
		tags := make([]string, 0, len(r.ConnHoldMS))
		for t := range r.ConnHoldMS {
			tags = append(tags, t)
		}
		sort.Strings(tags)
		parts := make([]string, len(tags))
		for i, t := range tags {
			parts[i] = fmt.Sprintf("%s=%.2f/%.2fms", t, r.ConnHoldMS[t], r.ConnHoldP99MS[t])
		}
		fmt.Fprintf(w, "mysql conn hold (mean/p99) of %s at C=%d: %s; slow path %d, retries %d\n", r.Store+r.Mode, r.Concurrency, strings.Join(parts, " "), r.SlowPath, r.Retries)
	}
	return nil
}

// printJSON prints {"run": run, "results": results}, indented.
func printJSON(w io.Writer, run *RunInfo, results any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	out := map[string]any{"results": results}
	if run != nil {
		out["run"] = run
	}
	return enc.Encode(out)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// optText prints *v with format, or "-" when v is nil (not measured).
func optText(v *float64, format string) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf(format, *v)
}

// serverNotes says, once per run, which server's CPU was not measured and
// why, and how the limit is computed.
func serverNotes(results []Result) string {
	var notes []string
	seen := map[string]bool{}
	for _, r := range results {
		for _, n := range []string{r.MySQLCPUNote, r.RedisCPUNote} {
			if n == "" || seen[n] {
				continue
			}
			seen[n] = true
			notes = append(notes, n)
		}
	}
	for _, r := range results {
		if r.Cores > 0 {
			notes = append(notes, fmt.Sprintf("cpu_limit: %d cores x 1 s / (bench + mysqld + redis CPU per op); the servers' CPU and counters are global (other clients of the servers count too)", r.Cores))
			break
		}
	}
	if len(notes) == 0 {
		return ""
	}
	return "servers: " + strings.Join(notes, "; ")
}
