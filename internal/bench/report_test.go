package bench_test

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tandemhq/tandem/internal/bench"
)

// mustRuns parses the fixture runs of testdata: the --json output of one
// short run of each bench that `make benchmarks` makes.
func mustRuns(t *testing.T, names ...string) []bench.ReportRun {
	t.Helper()
	var runs []bench.ReportRun
	for _, name := range names {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		r, err := bench.ParseRun(name, data)
		if err != nil {
			t.Fatalf("ParseRun(%s): %v", name, err)
		}
		runs = append(runs, r)
	}
	return runs
}

// figureRow returns the row of the figures table that starts with name.
func figureRow(t *testing.T, report, name string) string {
	t.Helper()
	for _, line := range strings.Split(report, "\n") {
		if strings.HasPrefix(line, "| "+name+" |") {
			return line
		}
	}
	t.Fatalf("got no figure %q in the report:\n%s", name, report)
	return ""
}

func verdict(row string) string {
	cells := strings.Split(strings.Trim(row, "|"), "|")
	return strings.TrimSpace(cells[len(cells)-1])
}

func TestReport(t *testing.T) {
	all := []string{"engine-loopback.json", "engine-latency.json", "http-half.json", "http-c1.json", "ks.json", "backfill.json"}
	report := bench.Report(mustRuns(t, all...))
	t.Run("FiguresComputedFromTheCells", func(t *testing.T) {
		for _, tc := range []struct{ figure, measured, verdict string }{
			// engine-latency.json: mysql 472 / naive 94 ops/s at C=32.
			{"0.5 ms one-way latency, C=32: mysql / naive ops/s", "5.03x (472 / 94 ops/s; engine-latency.json)", "**not met**"},
			{"0.5 ms one-way latency, C=32: p99", "mysql 285.8 ms, naive 350.1 ms", "met"},
			{"0.5 ms one-way latency, C=128: mysql / naive ops/s", "3.95x", "**not met**"},
			{"0.5 ms one-way latency, C=128: p99", "mysql 786.9 ms, naive 977.2 ms", "met"},
			{"loopback, C=32: mysql / naive ops/s", "1.51x (722 / 477 ops/s; engine-loopback.json)", "met"},
			{"loopback, C=128: p99", "mysql 394.0 ms, naive 816.8 ms", "met"},
			{"loopback, C=128: mysql p99 / its p50", "3.33x (394.0 / 118.3 ms", "met"},
			{"0.5 ms one-way latency, C=1: mean connection hold per reserve", "9.93 ms", "**not met**"},
			{"shadow mode at 0.50 x mysql mode's capacity (248 of 497 ops/s, open loop): dropped / timed-out shadow operations", "0 / 0 (http-half.json)", "met"},
			{"shadow mode at 0.50 x mysql mode's capacity (248 of 497 ops/s, open loop): buyer p99 / redis mode's", "0.38x (9.5 / 25.0 ms", "met"},
			{"redis mode through HTTP, C=1: p50 added over the raw engine", "0.16 ms (0.26 - 0.10 ms; http-c1.json)", "met"},
		} {
			row := figureRow(t, report, tc.figure)
			if !strings.Contains(row, tc.measured) {
				t.Errorf("%s: got row %q, want it to measure %q", tc.figure, row, tc.measured)
			}
			if got := verdict(row); got != tc.verdict {
				t.Errorf("%s: got verdict %q, want %q", tc.figure, got, tc.verdict)
			}
		}
	})
	t.Run("EveryRunWithCommandAndLoad", func(t *testing.T) {
		for _, want := range []string{
			"tandem bench engine --stores mysql,naive --concurrency 1,32,128 --duration 1s --mysql-latency 500us --json",
			"load average (1 min) 15.51 at the start, 16.11 at the end",
			"tandem bench backfill --holds 500 --shops 5 --rate 50 --warmup 300ms --json",
			"| 500 | 5 | 0.09 | 5464 |",
			"tandem bench http --killswitch 10 --json",
			"| http | shadow | 1 | 1 | 256 | 248 | 0.0 | 248 | 1.65 | 9.46 |",
		} {
			if !strings.Contains(report, want) {
				t.Errorf("got no %q in the report:\n%s", want, report)
			}
		}
	})
	t.Run("NoDataWithoutTheCells", func(t *testing.T) {
		report := bench.Report(mustRuns(t, "engine-loopback.json"))
		for _, figure := range []string{
			"0.5 ms one-way latency, C=32: mysql / naive ops/s",
			"0.5 ms one-way latency, C=1: mean connection hold per reserve",
			"shadow mode at half of mysql mode's capacity: buyer p99 / redis mode's",
			"redis mode through HTTP, C=1: p50 added over the raw engine",
		} {
			if got := verdict(figureRow(t, report, figure)); got != "no data" {
				t.Errorf("%s: got verdict %q, want no data", figure, got)
			}
		}
		if got := verdict(figureRow(t, report, "loopback, C=32: mysql / naive ops/s")); got != "met" {
			t.Errorf("loopback C=32: got verdict %q, want met (its cells are in the run)", got)
		}
	})
}

// A --rate-of-mysql run whose capacity cell tripped the automatic abort
// (part of it served by Redis) says its rate is over-estimated.
// The connection hold per reserve is judged against the round trip
// measured through the latency proxy when the run has it: the proxy's
// timers make a round trip longer than twice the latency asked for.
func TestReportHoldAgainstMeasuredRoundTrip(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "engine-latency.json"))
	if err != nil {
		t.Fatal(err)
	}
	const name = "0.5 ms one-way latency, C=1: mean connection hold per reserve"
	for _, tc := range []struct {
		rtt            string
		target, verdct string
	}{
		{"8.5", "<= 1 round trip (measured through the latency proxy) + 2 ms = 8.5 + 2 = 10.5 ms", "met"},        // 9.93 ms held
		{"7.5", "<= 1 round trip (measured through the latency proxy) + 2 ms = 7.5 + 2 = 9.5 ms", "**not met**"}, // 9.93 ms held
	} {
		measured := strings.ReplaceAll(string(data), `"mysql_latency_ms": 0.5`, `"mysql_latency_ms": 0.5, "mysql_round_trip_ms": `+tc.rtt)
		r, err := bench.ParseRun("engine-latency.json", []byte(measured))
		if err != nil {
			t.Fatal(err)
		}
		row := figureRow(t, bench.Report([]bench.ReportRun{r}), name)
		if !strings.Contains(row, "9.93 ms") || !strings.Contains(row, tc.target) {
			t.Errorf("round trip %s ms: got row %q, want 9.93 ms against %q", tc.rtt, row, tc.target)
		}
		if got := verdict(row); got != tc.verdct {
			t.Errorf("round trip %s ms: got verdict %q, want %q", tc.rtt, got, tc.verdct)
		}
	}
}

func TestReportCapacityCellKilled(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "http-half.json"))
	if err != nil {
		t.Fatal(err)
	}
	// The run's first cell is mysql mode's capacity.
	killed := strings.Replace(string(data), `"kill_switch": false`, `"kill_switch": true`, 1)
	r, err := bench.ParseRun("http-half-killed.json", []byte(killed))
	if err != nil {
		t.Fatal(err)
	}
	report := bench.Report([]bench.ReportRun{r})
	row := figureRow(t, report, "shadow mode at 0.50 x mysql mode's capacity (248 of 497 ops/s, open loop): dropped / timed-out shadow operations")
	if !strings.Contains(row, "kill switch engaged, so its capacity is over-estimated") {
		t.Errorf("got row %q, want it to say the capacity is over-estimated", row)
	}
	row = figureRow(t, bench.Report(mustRuns(t, "http-half.json")), "shadow mode at 0.50 x mysql mode's capacity (248 of 497 ops/s, open loop): dropped / timed-out shadow operations")
	if strings.Contains(row, "over-estimated") {
		t.Errorf("got row %q for a run without the kill switch, want no note", row)
	}
}

// TestReportRepeatedRounds judges the shadow figures of a --repeat run from
// all of its rounds: drops summed, p99s compared as medians, every round's
// p99 listed.
func TestReportRepeatedRounds(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "http-half.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Results []map[string]any `json:"results"`
		Run     map[string]any   `json:"run"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	// Three rounds of redis and shadow after the capacity cell: the
	// middle shadow round drops one operation, the first redis round is
	// an outlier.
	capacity, redis, shadow := doc.Results[0], doc.Results[1], doc.Results[2]
	results := []map[string]any{capacity}
	for i, p99 := range [][2]float64{{30, 8}, {6, 9}, {5, 7}} {
		r, s := maps.Clone(redis), maps.Clone(shadow)
		r["round"], s["round"] = i+1, i+1
		r["p99_ms"], s["p99_ms"] = p99[0], p99[1]
		if i == 1 {
			s["shadow_drops"] = 1
		}
		results = append(results, r, s)
	}
	doc.Results = results
	repeated, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	run, err := bench.ParseRun("http-rounds.json", repeated)
	if err != nil {
		t.Fatal(err)
	}
	report := bench.Report([]bench.ReportRun{run})
	at := "shadow mode at 0.50 x mysql mode's capacity (248 of 497 ops/s, open loop)"
	row := figureRow(t, report, at+": buyer p99 / redis mode's")
	if want := "1.33x (medians of 3 and 3 interleaved rounds: 8.0 / 6.0 ms; the rounds' p99s: shadow 8.0, 9.0, 7.0, redis 30.0, 6.0, 5.0"; !strings.Contains(row, want) {
		t.Errorf("got row %q, want it to measure %q", row, want)
	}
	if got := verdict(row); got != "met" {
		t.Errorf("got verdict %q, want met", got)
	}
	row = figureRow(t, report, at+": dropped / timed-out shadow operations")
	if !strings.Contains(row, "1 / 0 (3 cells; http-rounds.json)") || verdict(row) != "**not met**" {
		t.Errorf("got row %q, want the drop of round 2 counted and the figure not met", row)
	}
	if !strings.Contains(report, "| http | shadow (round 2) |") {
		t.Errorf("got no row of shadow's round 2 in the report:\n%s", report)
	}
}

func TestParseRunRefusesOtherJSON(t *testing.T) {
	for _, tc := range []struct{ name, data string }{
		{"NotJSON", "bench: mysql C=1 for 1s..."},
		{"NoResults", `{"suite": "engine"}`},
		{"UnknownSuite", `{"results": [{"suite": "disk"}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := bench.ParseRun("x.json", []byte(tc.data)); err == nil {
				t.Errorf("got no error, want one")
			}
		})
	}
}

func TestReplaceSection(t *testing.T) {
	doc := "# Benchmarks\n\nprose before\n\n" + bench.SectionBegin + "\nold table\n" + bench.SectionEnd + "\n\nprose after\n"
	t.Run("ReplacesOnlyTheSection", func(t *testing.T) {
		got, err := bench.ReplaceSection(doc, "new table\n")
		if err != nil {
			t.Fatal(err)
		}
		want := "# Benchmarks\n\nprose before\n\n" + bench.SectionBegin + "\nnew table\n" + bench.SectionEnd + "\n\nprose after\n"
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	})
	t.Run("Idempotent", func(t *testing.T) {
		once, _ := bench.ReplaceSection(doc, "new table")
		twice, _ := bench.ReplaceSection(once, "new table")
		if once != twice {
			t.Errorf("got %q after a second run, want %q", twice, once)
		}
	})
	t.Run("NoMarkers", func(t *testing.T) {
		if _, err := bench.ReplaceSection("# Benchmarks\n", "table"); err == nil {
			t.Error("got no error, want one: there is no section to replace")
		}
	})
}
