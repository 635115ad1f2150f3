package bench

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// figure is one target of issue 14 against what the runs measured.
type figure struct {
	name, measured, target string
	// met is nil when the runs lack a cell the figure needs.
	met *bool
}

func (f figure) verdict() string {
	switch {
	case f.met == nil:
		return "no data"
	case *f.met:
		return "met"
	default:
		return "**not met**"
	}
}

// noData is a figure whose cells are missing from every run.
func noData(name, target, needs string) figure {
	return figure{name: name, measured: "needs " + needs, target: target}
}

func judged(name, measured, target string, met bool) figure {
	return figure{name: name, measured: measured, target: target, met: &met}
}

// engineCell finds the one-hot-item, one-unit-cart engine cell of store at
// concurrency c and one-way latency latMS in r.
func (r ReportRun) engineCell(store string, c int, latMS float64) (HTTPResult, bool) {
	for _, x := range r.Cells {
		if x.Suite == "engine" && x.Store == store && x.Concurrency == c && x.Items == 1 && x.CartSize == 1 &&
			math.Abs(x.MySQLLatencyMS-latMS) < 1e-6 {
			return x, true
		}
	}
	return HTTPResult{}, false
}

// enginePair finds the first run holding both mysql's and naive's cell at
// concurrency c and latency latMS.
func enginePair(runs []ReportRun, c int, latMS float64) (mysql, naive HTTPResult, file string, ok bool) {
	for _, r := range runs {
		m, okm := r.engineCell("mysql", c, latMS)
		n, okn := r.engineCell("naive", c, latMS)
		if okm && okn {
			return m, n, r.File, true
		}
	}
	return mysql, naive, "", false
}

// ratio is a / b, or +Inf when b is 0.
func ratio(a, b float64) float64 {
	if b == 0 {
		return math.Inf(1)
	}
	return a / b
}

// figures computes issue 14's figures from the runs; none is hard-coded.
func figures(runs []ReportRun) []figure {
	var out []figure
	for _, lat := range []struct {
		ms    float64
		label string
	}{{0.5, "0.5 ms one-way latency"}, {0, "loopback"}} {
		for _, c := range []int{32, 128} {
			out = append(out, engineFigures(runs, lat.ms, lat.label, c)...)
		}
	}
	out = append(out, holdFigure(runs, 0.5))
	out = append(out, shadowFigures(runs)...)
	out = append(out, addedP50Figure(runs))
	return append(out, limitFigures(runs)...)
}

// engineFigures are mysql against naive at one latency and concurrency:
// throughput ratio and p99 at 0.5 ms (C=32 and 128); at loopback the ratio
// at C=32, and at C=128 the p99s and mysql's own tail.
func engineFigures(runs []ReportRun, latMS float64, label string, c int) []figure {
	name := fmt.Sprintf("%s, C=%d", label, c)
	m, n, file, ok := enginePair(runs, c, latMS)
	wantRatio := 20.0
	if latMS == 0 {
		wantRatio = 1.2
	}
	needs := fmt.Sprintf("mysql and naive engine cells at C=%d, %.1f ms", c, latMS)
	var out []figure
	if latMS > 0 || c == 32 {
		target := fmt.Sprintf(">= %.1fx", wantRatio)
		if !ok {
			out = append(out, noData(name+": mysql / naive ops/s", target, needs))
		} else {
			x := ratio(m.OpsPerSec, n.OpsPerSec)
			out = append(out, judged(name+": mysql / naive ops/s",
				fmt.Sprintf("%.2fx (%.0f / %.0f ops/s; %s)", x, m.OpsPerSec, n.OpsPerSec, file), target, x >= wantRatio))
		}
	}
	if latMS > 0 || c == 128 {
		target := "mysql p99 below naive's"
		met := func() bool { return m.P99MS < n.P99MS }
		if latMS == 0 {
			target = "mysql p99 <= naive p99"
			met = func() bool { return m.P99MS <= n.P99MS }
		}
		if !ok {
			out = append(out, noData(name+": p99", target, needs))
		} else {
			out = append(out, judged(name+": p99", fmt.Sprintf("mysql %.1f ms, naive %.1f ms (%s)", m.P99MS, n.P99MS, file), target, met()))
		}
	}
	if latMS == 0 && c == 128 {
		if !ok {
			out = append(out, noData(name+": mysql p99 / its p50", "<= 4x", needs))
		} else {
			x := ratio(m.P99MS, m.P50MS)
			out = append(out, judged(name+": mysql p99 / its p50",
				fmt.Sprintf("%.2fx (%.1f / %.1f ms; %s)", x, m.P99MS, m.P50MS, file), "<= 4x", x <= 4))
		}
	}
	return out
}

// holdFigure is the mean connection hold of a reserve at C=1 under latMS
// of one-way latency, against one round trip + 2 ms: the round trip
// measured through the latency proxy when the cell has it (the proxy's
// timers make it longer than 2 x latMS), else 2 x latMS.
func holdFigure(runs []ReportRun, latMS float64) figure {
	name := fmt.Sprintf("%.1f ms one-way latency, C=1: mean connection hold per reserve", latMS)
	rtt, measured := 2*latMS, ""
	for _, r := range runs {
		if m, ok := r.engineCell("mysql", 1, latMS); ok && m.MySQLRoundTripMS > 0 {
			rtt, measured = m.MySQLRoundTripMS, " (measured through the latency proxy)"
			break
		}
	}
	limit := rtt + 2
	target := fmt.Sprintf("<= 1 round trip%s + 2 ms = %.1f + 2 = %.1f ms", measured, rtt, limit)
	for _, r := range runs {
		if m, ok := r.engineCell("mysql", 1, latMS); ok {
			if hold, ok := m.ConnHoldMS["reserve"]; ok {
				return judged(name, fmt.Sprintf("%.2f ms (p99 %.2f ms; %s)", hold, m.ConnHoldP99MS["reserve"], r.File), target, hold <= limit)
			}
		}
	}
	return noData(name, target, fmt.Sprintf("a mysql engine cell at C=1, %.1f ms, with conn_hold_mean_ms", latMS))
}

// shadowFigures are shadow mode against redis mode, both open loop at a
// fraction of mysql mode's capacity (bench http --rate-of-mysql) in one
// run: no shadow operation dropped or timed out, and the buyers' p99.
func shadowFigures(runs []ReportRun) []figure {
	for _, r := range runs {
		var shadow, redis []*HTTPResult
		capacityKilled := false
		for i := range r.Cells {
			c := &r.Cells[i]
			if c.Suite == "http" && c.Mode == "mysql" && c.Rate == 0 && c.KillSwitch {
				capacityKilled = true
			}
			if c.Suite != "http" || c.RateOfMySQL <= 0 {
				continue
			}
			switch c.Mode {
			case "shadow":
				shadow = append(shadow, c)
			case "redis":
				redis = append(redis, c)
			}
		}
		if len(shadow) == 0 || len(redis) == 0 {
			continue
		}
		first := shadow[0]
		at := fmt.Sprintf("shadow mode at %.2f x mysql mode's capacity (%.0f of %.0f ops/s, open loop)", first.RateOfMySQL, first.Rate, first.MySQLCapacity)
		// An automatic abort during the capacity cell served part of it
		// from Redis: the capacity, hence the rate, is over-estimated.
		note := ""
		if capacityKilled {
			note = "; the mysql cell's kill switch engaged, so its capacity is over-estimated"
		}
		var drops, timeouts int64
		for _, c := range shadow {
			drops += c.ShadowDrops
			timeouts += c.ShadowTimeouts
		}
		// With --repeat, each mode ran several interleaved rounds: their
		// medians are compared, and every round is listed.
		p99s := func(cells []*HTTPResult) []float64 {
			out := make([]float64, len(cells))
			for i, c := range cells {
				out[i] = c.P99MS
			}
			return out
		}
		sp, rp := median(p99s(shadow)), median(p99s(redis))
		x := ratio(sp, rp)
		measured := fmt.Sprintf("%.2fx (%.1f / %.1f ms; %s%s)", x, sp, rp, r.File, note)
		if len(shadow) > 1 || len(redis) > 1 {
			measured = fmt.Sprintf("%.2fx (medians of %d and %d interleaved rounds: %.1f / %.1f ms; the rounds' p99s: shadow %s, redis %s; %s%s)",
				x, len(shadow), len(redis), sp, rp, msList(p99s(shadow)), msList(p99s(redis)), r.File, note)
		}
		return []figure{
			judged(at+": dropped / timed-out shadow operations", fmt.Sprintf("%d / %d (%s%s%s)", drops, timeouts, cellsOf(len(shadow)), r.File, note),
				"0 / 0", drops == 0 && timeouts == 0),
			judged(at+": buyer p99 / redis mode's", measured, "<= 1.5x", x <= 1.5),
		}
	}
	const needs = "a bench http --rate-of-mysql run with redis and shadow"
	return []figure{
		noData("shadow mode at half of mysql mode's capacity: dropped / timed-out shadow operations", "0 / 0", needs),
		noData("shadow mode at half of mysql mode's capacity: buyer p99 / redis mode's", "<= 1.5x", needs),
	}
}

// median is the median of xs (the mean of the middle two for an even
// count); 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// cellsOf says how many cells a figure sums, when more than one.
func cellsOf(n int) string {
	if n < 2 {
		return ""
	}
	return fmt.Sprintf("%d cells; ", n)
}

// msList prints milliseconds as "5.5, 6.4, 8.1".
func msList(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.1f", x)
	}
	return strings.Join(parts, ", ")
}

// addedP50Figure is what HTTP adds to the raw redis engine's p50 at C=1
// (bench http --compare-engine).
func addedP50Figure(runs []ReportRun) figure {
	const name, target = "redis mode through HTTP, C=1: p50 added over the raw engine", "< 0.5 ms"
	for _, r := range runs {
		for _, c := range r.Cells {
			if c.Suite == "http" && c.Mode == "redis" && c.Concurrency == 1 && c.Rate == 0 && c.EngineP50MS > 0 {
				added := c.P50MS - c.EngineP50MS
				return judged(name, fmt.Sprintf("%.2f ms (%.2f - %.2f ms; %s)", added, c.P50MS, c.EngineP50MS, r.File), target, added < 0.5)
			}
		}
	}
	return noData(name, target, "a bench http --modes redis --concurrency 1 --compare-engine run")
}
