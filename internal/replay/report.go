package replay

import (
	"fmt"
	"html/template"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
)

// WriteText prints a result for a person.
func WriteText(w io.Writer, res *Result) {
	fmt.Fprintf(w, "replay of %s (pod %s) at %gx: %d ops in %.2fs (capture span %.2fs, scheduled %.2fs, replayer lag max %.1f ms)\n",
		res.Capture, res.Pod, res.Speed, res.Ops, res.ElapsedSeconds, res.CaptureSeconds, res.ScheduleSeconds, res.MaxLagMS)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "OP\tCOUNT\tOFFERED/S\tACHIEVED/S\tP50\tP99\tP99.9\tERRORS\tSAME\tGRANTED->REFUSED\tREFUSED->GRANTED")
	for _, s := range res.PerOp {
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.1f\t%.2fms\t%.2fms\t%.2fms\t%d\t%d\t%d\t%d\n", s.Op, s.Count, s.OfferedPerSec, s.AchievedPerSec,
			s.P50MS, s.P99MS, s.P999MS, s.Errors, s.SameAsCaptured, s.GrantedRefused, s.RefusedGranted)
	}
	tw.Flush()
	for _, s := range res.PerOp {
		fmt.Fprintf(w, "%s: captured %s; replayed %s\n", s.Op, statuses(s.Captured), statuses(s.Replayed))
	}
	if len(res.ConnHoldMS) > 0 {
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "CONN_TAG\tFLOWS\tHOLD_MEAN\tHOLD_P99\tRETRIES")
		for _, tag := range sortedKeys(res.ConnHoldMS) {
			h := res.ConnHoldMS[tag]
			fmt.Fprintf(tw, "%s\t%d\t%.2fms\t%.2fms\t%.0f\n", tag, h.Count, h.MeanMS, h.P99MS, res.Retries[tag])
		}
		tw.Flush()
	}
	fmt.Fprintf(w, "slow-path share of reserves: %.1f%%\n", res.SlowPathShare*100)
	fmt.Fprintf(w, "outcome diff: %d granted in the capture and refused here, %d refused in the capture and granted here",
		res.Diff.GrantedThenRefused, res.Diff.RefusedThenGranted)
	if len(res.Diff.Changes) > 0 {
		fmt.Fprintf(w, " (%s)", changes(res.Diff.Changes))
	}
	fmt.Fprintln(w)
	if len(res.Violations) > 0 {
		fmt.Fprintf(w, "INVARIANTS BROKEN (%d):\n", len(res.Violations))
		for _, v := range res.Violations {
			fmt.Fprintf(w, "  %+v: %s\n", v.Key, v.Message)
		}
	} else {
		fmt.Fprintln(w, "engine invariants: hold (no oversell; on_hand = unpooled + pool + reserved)")
	}
	fmt.Fprintf(w, "verdict: %s\n", res.Verdict())
}

func statuses(m statusMap) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, string(k))
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[statusOf(k)]))
	}
	return strings.Join(parts, " ")
}

func changes(m map[string]int) string {
	keys := sortedKeys(m)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s: %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// chart is an inline SVG line chart of one series over the timeline.
type chart struct {
	Title  string
	Unit   string
	Width  int
	Height int
	Max    float64
	Lines  []chartLine
}

type chartLine struct {
	Label  string
	Color  string
	Points string
}

func newChart(title, unit string, pts []Point, series ...struct {
	label, color string
	value        func(Point) float64
}) chart {
	c := chart{Title: title, Unit: unit, Width: 760, Height: 200}
	end := 0.0
	for _, p := range pts {
		end = max(end, p.AtSeconds)
		for _, s := range series {
			c.Max = max(c.Max, s.value(p))
		}
	}
	if c.Max == 0 {
		c.Max = 1
	}
	if end == 0 {
		end = 1
	}
	for _, s := range series {
		var b strings.Builder
		for _, p := range pts {
			x := 40 + p.AtSeconds/end*float64(c.Width-50)
			y := float64(c.Height-20) - s.value(p)/c.Max*float64(c.Height-30)
			fmt.Fprintf(&b, "%.1f,%.1f ", x, y)
		}
		c.Lines = append(c.Lines, chartLine{Label: s.label, Color: s.color, Points: b.String()})
	}
	return c
}

var htmlReport = template.Must(template.New("report").Funcs(template.FuncMap{"statuses": statuses,
	"add": func(a, b int) int { return a + b }, "mul": func(a, b int) int { return a * b },
	"pct": func(f float64) float64 { return f * 100 }}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>tandem replay: {{.R.Capture}} at {{.R.Speed}}x</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}
th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}
.ok{color:#176f2c;font-weight:bold}.bad{color:#b00020;font-weight:bold}
svg{background:#fafafa;border:1px solid #ddd;margin:.5em 0}
</style></head><body>
<h1>Rehearsal of {{.R.Capture}} (pod {{.R.Pod}}) at {{.R.Speed}}x</h1>
<p>{{.R.Ops}} operations in {{printf "%.2f" .R.ElapsedSeconds}} s (capture span {{printf "%.2f" .R.CaptureSeconds}} s, scheduled {{printf "%.2f" .R.ScheduleSeconds}} s).
Verdict: <span class="{{if .R.Held}}ok{{else}}bad{{end}}">{{.R.Verdict}}</span></p>
{{range .Charts}}<h2>{{.Title}}</h2>
<svg width="{{.Width}}" height="{{.Height}}" viewBox="0 0 {{.Width}} {{.Height}}" role="img" aria-label="{{.Title}}">
<line x1="40" y1="{{.Height}}" x2="40" y2="0" stroke="#999"/><line x1="40" y1="180" x2="{{.Width}}" y2="180" stroke="#999"/>
<text x="2" y="14" font-size="11">{{printf "%.1f" .Max}} {{.Unit}}</text><text x="2" y="178" font-size="11">0</text>
{{range $i, $l := .Lines}}<polyline fill="none" stroke="{{$l.Color}}" stroke-width="2" points="{{$l.Points}}"/>
<text x="{{add 60 (mul $i 120)}}" y="14" font-size="12" fill="{{$l.Color}}">{{$l.Label}}</text>{{end}}
</svg>{{end}}
<h2>Per operation</h2>
<table><tr><th>op</th><th>count</th><th>offered/s</th><th>achieved/s</th><th>p50 ms</th><th>p99 ms</th><th>p99.9 ms</th><th>errors</th><th>granted→refused</th><th>refused→granted</th><th>captured</th><th>replayed</th></tr>
{{range .R.PerOp}}<tr><td>{{.Op}}</td><td>{{.Count}}</td><td>{{printf "%.1f" .OfferedPerSec}}</td><td>{{printf "%.1f" .AchievedPerSec}}</td><td>{{printf "%.2f" .P50MS}}</td><td>{{printf "%.2f" .P99MS}}</td><td>{{printf "%.2f" .P999MS}}</td><td>{{.Errors}}</td><td>{{.GrantedRefused}}</td><td>{{.RefusedGranted}}</td><td>{{statuses .Captured}}</td><td>{{statuses .Replayed}}</td></tr>
{{end}}</table>
<h2>Connection hold per conn_tag</h2>
<table><tr><th>conn_tag</th><th>flows</th><th>mean ms</th><th>p99 ms</th></tr>
{{range $tag, $h := .R.ConnHoldMS}}<tr><td>{{$tag}}</td><td>{{$h.Count}}</td><td>{{printf "%.2f" $h.MeanMS}}</td><td>{{printf "%.2f" $h.P99MS}}</td></tr>
{{end}}</table>
<p>Slow-path share of reserves: {{printf "%.1f" (pct .R.SlowPathShare)}}%. Engine invariants at the end: {{if .R.Violations}}<span class="bad">{{len .R.Violations}} broken</span>{{else}}<span class="ok">hold</span>{{end}}.</p>
</body></html>
`))

// WriteHTML writes a self-contained report page: latency and throughput
// over time as inline SVG, and the tables of WriteText.
func WriteHTML(w io.Writer, res *Result) error {
	type s = struct {
		label, color string
		value        func(Point) float64
	}
	charts := []chart{
		newChart("Throughput (answers per second)", "ops/s", res.Timeline, s{"ops/s", "#1f77b4", func(p Point) float64 { return p.OpsPerSec }}),
		newChart("Latency", "ms", res.Timeline,
			s{"p50", "#2ca02c", func(p Point) float64 { return p.P50MS }},
			s{"p99", "#d62728", func(p Point) float64 { return p.P99MS }}),
	}
	return htmlReport.Execute(w, struct {
		R      *Result
		Charts []chart
	}{res, charts})
}
