package bench_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tandemhq/tandem/internal/bench"
)

// TestReportLimitFigures judges issue 25's figures from cells built here.
func TestReportLimitFigures(t *testing.T) {
	engine := func(store string, latMS, ops float64) bench.HTTPResult {
		r := bench.HTTPResult{Result: bench.Result{Suite: "engine", Store: store, Items: 1, CartSize: 1, Concurrency: 32,
			MySQLLatencyMS: latMS, OpsPerSec: ops, CPUUSPerOp: 50}}
		return r
	}
	loop := engine("mysql", 0, 1000)
	loop.TotalCPUUSPerOp, loop.Cores, loop.CPUBoundOpsPerSec, loop.OfLimit = 1600, 2, 1250, 0.8
	lat := engine("mysql", 0.5, 950)
	lat.MySQLRoundTripMS, lat.MySQLDirectRoundTripMS = 1.25, 0.15
	raw := engine("redis", 0, 20000)
	http := bench.HTTPResult{Result: bench.Result{Suite: "http", Mode: "redis", Items: 1, CartSize: 1, Concurrency: 32, OpsPerSec: 11000, CPUUSPerOp: 120}}
	half := func(mode string, round int, p99 float64) bench.HTTPResult {
		return bench.HTTPResult{Result: bench.Result{Suite: "http", Mode: mode, Items: 1, CartSize: 1, Concurrency: 256, P99MS: p99},
			Rate: 250, RateOfMySQL: 0.5, MySQLCapacity: 500, Round: round}
	}
	runs := []bench.ReportRun{
		{File: "engine.json", Cells: []bench.HTTPResult{loop, lat}},
		{File: "http.json", Cells: []bench.HTTPResult{http, raw}},
		{File: "half.json", Cells: []bench.HTTPResult{half("redis", 1, 8), half("shadow", 1, 11), half("redis", 2, 8), half("shadow", 2, 13)}},
	}
	report := bench.Report(runs)
	for _, tc := range []struct{ figure, measured, verdict string }{
		{"loopback, C=32: mysql engine ops/s / its CPU-bound limit", "80% (1000 of 1250 ops/s at 1600 µs of CPU per op on 2 cores; engine.json)", "met"},
		{"0.5 ms one-way latency, C=32: mysql engine ops/s / its loopback ops/s", "95% (950 / 1000 ops/s; the proxy added 1.10 ms to the round trip for 1.00 ms asked; engine.json)", "met"},
		{"redis mode through HTTP, C=32: ops/s / the raw redis engine's", "0.55x (11000 / 20000 ops/s; CPU per op 120 / 50 µs; http.json)", "**not met**"},
		{"shadow mode at a fraction of mysql mode's capacity, open loop: buyer p99 / redis mode's in every round", "round 1 1.38x (11.0 / 8.0 ms), round 2 1.62x (13.0 / 8.0 ms); half.json", "**not met**"},
	} {
		row := figureRow(t, report, tc.figure)
		if !strings.Contains(row, tc.measured) {
			t.Errorf("%s: got row %q, want it to measure %q", tc.figure, row, tc.measured)
		}
		if got := verdict(row); got != tc.verdict {
			t.Errorf("%s: got verdict %q, want %q", tc.figure, got, tc.verdict)
		}
	}
	t.Run("EveryRun", func(t *testing.T) {
		naive := engine("naive", 0, 700)
		second, third := loop, loop
		second.OpsPerSec, third.OpsPerSec = 900, 800
		var runs []bench.ReportRun
		for i, m := range []bench.HTTPResult{loop, second, third} {
			runs = append(runs, bench.ReportRun{File: fmt.Sprintf("loop%d.json", i+1), Cells: []bench.HTTPResult{m, naive}})
		}
		name := "loopback, C=32: mysql / naive ops/s in every run"
		row := figureRow(t, bench.Report(runs), name)
		if want := "3 runs: 1.43x (loop1.json), 1.29x (loop2.json), 1.14x (loop3.json)"; !strings.Contains(row, want) || verdict(row) != "**not met**" {
			t.Errorf("got row %q, want %q and not met (the third run is under 1.2x)", row, want)
		}
		if row := figureRow(t, bench.Report(runs[:2]), name); verdict(row) != "**not met**" {
			t.Errorf("got row %q, want not met with 2 runs only", row)
		}
		third.OpsPerSec = 850
		runs[2].Cells[0] = third
		if row := figureRow(t, bench.Report(runs), name); verdict(row) != "met" {
			t.Errorf("got row %q, want met", row)
		}
	})
	t.Run("DishonestProxy", func(t *testing.T) {
		slow := lat
		slow.MySQLRoundTripMS = 2.4 // the old proxy's Go timers: 2.25 ms added for 1 ms asked
		report := bench.Report([]bench.ReportRun{{File: "engine.json", Cells: []bench.HTTPResult{loop, slow}}})
		row := figureRow(t, report, "0.5 ms one-way latency, C=32: mysql engine ops/s / its loopback ops/s")
		if verdict(row) != "**not met**" || !strings.Contains(row, "the proxy added 2.25 ms") {
			t.Errorf("got row %q, want not met with the proxy's added round trip", row)
		}
	})
	t.Run("NoData", func(t *testing.T) {
		report := bench.Report(mustRuns(t, "engine-loopback.json"))
		row := figureRow(t, report, "loopback, C=32: mysql engine ops/s / its CPU-bound limit")
		if verdict(row) != "no data" {
			t.Errorf("got row %q, want no data (the cells have no servers' CPU)", row)
		}
	})
}
