package bench

import (
	"fmt"
	"strings"
)

// limitFigures are issue 25's figures: each path against what this machine
// can do (the CPU-bound limit), an honest latency hidden by concurrency,
// the HTTP path against the raw engine, and the shadow's buyer p99 in
// every round.
func limitFigures(runs []ReportRun) []figure {
	return []figure{limitFigure(runs), everyRunFigure(runs), latencyHiddenFigure(runs), httpOverEngineFigure(runs), shadowEveryRoundFigure(runs)}
}

// everyRunFigure is mysql against naive at loopback, C=32, in every run
// that has both cells: at least 3 runs, each at 1.2x or more.
func everyRunFigure(runs []ReportRun) figure {
	const name, target = "loopback, C=32: mysql / naive ops/s in every run", ">= 1.2x in each of 3 runs or more"
	var parts []string
	met := true
	for _, r := range runs {
		m, okm := r.engineCell("mysql", 32, 0)
		n, okn := r.engineCell("naive", 32, 0)
		if !okm || !okn {
			continue
		}
		x := ratio(m.OpsPerSec, n.OpsPerSec)
		met = met && x >= 1.2
		parts = append(parts, fmt.Sprintf("%.2fx (%s)", x, r.File))
	}
	if len(parts) == 0 {
		return noData(name, target, "runs with mysql and naive engine cells at C=32, loopback")
	}
	runsText := fmt.Sprintf("%d runs", len(parts))
	if len(parts) == 1 {
		runsText = "1 run"
	}
	return judged(name, runsText+": "+strings.Join(parts, ", "), target, met && len(parts) >= 3)
}

// limitFigure is the mysql engine at loopback, C=32, against its cell's
// CPU-bound limit.
func limitFigure(runs []ReportRun) figure {
	const name, target = "loopback, C=32: mysql engine ops/s / its CPU-bound limit", ">= 80%"
	for _, r := range runs {
		if m, ok := r.engineCell("mysql", 32, 0); ok && m.CPUBoundOpsPerSec > 0 {
			return judged(name, fmt.Sprintf("%.0f%% (%.0f of %.0f ops/s at %.0f µs of CPU per op on %d cores; %s)",
				100*m.OfLimit, m.OpsPerSec, m.CPUBoundOpsPerSec, m.TotalCPUUSPerOp, m.Cores, r.File), target, m.OfLimit >= 0.8)
		}
	}
	return noData(name, target, "a mysql engine cell at C=32, loopback, with the servers' CPU (cpu_bound_ops_per_sec)")
}

// latencyHiddenFigure is the mysql engine at C=32 behind 0.5 ms each way
// against its own loopback figure, the same run's when there is one; it
// is met only when the proxy's round trip was within 20% of the asked one.
func latencyHiddenFigure(runs []ReportRun) figure {
	const name, target = "0.5 ms one-way latency, C=32: mysql engine ops/s / its loopback ops/s", ">= 90%, the proxy within 20% of 2 x 0.5 ms"
	var lat, loop HTTPResult
	var latFile, loopFile string
	for _, r := range runs {
		l, okl := r.engineCell("mysql", 32, 0.5)
		b, okb := r.engineCell("mysql", 32, 0)
		if okl && okb {
			lat, loop, latFile, loopFile = l, b, r.File, r.File
			break
		}
		if okl && latFile == "" {
			lat, latFile = l, r.File
		}
		if okb && loopFile == "" {
			loop, loopFile = b, r.File
		}
	}
	if latFile == "" || loopFile == "" {
		return noData(name, target, "mysql engine cells at C=32, loopback and 0.5 ms")
	}
	files := latFile
	if loopFile != latFile {
		files = latFile + " and " + loopFile + ", separate runs"
	}
	x := ratio(lat.OpsPerSec, loop.OpsPerSec)
	proxy, honest := "round trip through the proxy not checked against the direct one", false
	if lat.MySQLDirectRoundTripMS > 0 {
		honest = latencyHonest(lat.MySQLRoundTripMS, lat.MySQLDirectRoundTripMS, 0.5)
		proxy = fmt.Sprintf("the proxy added %.2f ms to the round trip for 1.00 ms asked", lat.MySQLRoundTripMS-lat.MySQLDirectRoundTripMS)
	}
	return judged(name, fmt.Sprintf("%.0f%% (%.0f / %.0f ops/s; %s; %s)", 100*x, lat.OpsPerSec, loop.OpsPerSec, proxy, files),
		target, x >= 0.9 && honest)
}

// httpOverEngineFigure is redis mode through HTTP at C=32, closed loop,
// against the raw redis engine at C=32 in the same run (bench http
// --compare-engine).
func httpOverEngineFigure(runs []ReportRun) figure {
	const name, target = "redis mode through HTTP, C=32: ops/s / the raw redis engine's", ">= 0.6x"
	for _, r := range runs {
		e, ok := r.engineCell("redis", 32, 0)
		if !ok {
			continue
		}
		for _, c := range r.Cells {
			if c.Suite == "http" && c.Mode == "redis" && c.Concurrency == 32 && c.Rate == 0 && c.Items == 1 && c.CartSize == 1 {
				x := ratio(c.OpsPerSec, e.OpsPerSec)
				return judged(name, fmt.Sprintf("%.2fx (%.0f / %.0f ops/s; CPU per op %.0f / %.0f µs; %s)",
					x, c.OpsPerSec, e.OpsPerSec, c.CPUUSPerOp, e.CPUUSPerOp, r.File), target, x >= 0.6)
			}
		}
	}
	return noData(name, target, "a bench http --modes redis --concurrency 32 --compare-engine run")
}

// shadowEveryRoundFigure is the shadow's buyer p99 against redis mode's in
// each interleaved round of a --rate-of-mysql run, not only their medians.
func shadowEveryRoundFigure(runs []ReportRun) figure {
	const name, target = "shadow mode at a fraction of mysql mode's capacity, open loop: buyer p99 / redis mode's in every round", "<= 1.5x in each round"
	for _, r := range runs {
		redis, shadow := map[int]HTTPResult{}, map[int]HTTPResult{}
		for _, c := range r.Cells {
			if c.Suite != "http" || c.RateOfMySQL <= 0 {
				continue
			}
			switch c.Mode {
			case "redis":
				redis[c.Round] = c
			case "shadow":
				shadow[c.Round] = c
			}
		}
		if len(shadow) == 0 || len(redis) == 0 {
			continue
		}
		var parts []string
		met := true
		for round := 0; round <= len(shadow); round++ {
			s, oks := shadow[round]
			d, okd := redis[round]
			if !oks || !okd {
				continue
			}
			x := ratio(s.P99MS, d.P99MS)
			met = met && x <= 1.5
			parts = append(parts, fmt.Sprintf("round %d %.2fx (%.1f / %.1f ms)", max(round, 1), x, s.P99MS, d.P99MS))
		}
		if len(parts) == 0 {
			continue
		}
		return judged(name, strings.Join(parts, ", ")+"; "+r.File, target, met)
	}
	return noData(name, target, "a bench http --rate-of-mysql run with redis and shadow")
}
