package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/tandemhq/tandem/capture"
	"github.com/tandemhq/tandem/internal/cli"
	"github.com/tandemhq/tandem/internal/replay"
)

const (
	replaySynopsis = "tandem replay --capture FILE [--speed N | --find-max [--p99-max D]] [--mysql DSN] [--json] [--html FILE]"
	replaySummary  = `Rehearses a capture (tandemctl capture get ID -o FILE) on the MySQL engine
with production settings: on a scratch database it creates (or --mysql, a
database that carries the scratch marker table tandem_scratch_marker, which
it wipes), it loads the capture's start positions and holds and replays its
operations open loop at their original inter-arrival times divided by
--speed. It prints per op offered and achieved ops/s, p50/p99/p99.9,
errors and the outcome diff against the capture, the engine's connection
hold per conn_tag, retries and slow-path share, and checks the engine's
invariants. --find-max doubles the speed from --speed until a replay has a
p99 above --p99-max, errors or broken invariants, and reports the largest
speed that held. Exits 1 when the (last) replay did not hold.`
)

// runReplay is `tandem replay`.
func runReplay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("tandem replay")
	file := fs.String("capture", "", "the capture `FILE` (required)")
	speed := fs.Float64("speed", 1, "replay at `N` times the captured speed")
	dsn := fs.String("mysql", "", "replay on this database `DSN` (it must carry the scratch marker; it is wiped); default: a scratch database on --server")
	server := fs.String("server", replay.DefaultServerDSN, "the MySQL/MariaDB server `DSN` on which the scratch database is created")
	keep := fs.Bool("keep", false, "keep the scratch database after the replay")
	findMax := fs.Bool("find-max", false, "double the speed until the replay does not hold; report the largest that held")
	steps := fs.Int("steps", 8, "with --find-max: at most `N` replays")
	p99Max := fs.Duration("p99-max", 0, "a replay holds only with every op's p99 under `D` (like 50ms); with --find-max, default 100ms")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	htmlFile := fs.String("html", "", "also write a self-contained HTML report to `FILE`")
	poolCap := fs.Int("pool-cap", 0, "the engine's unit rows per position (default: the engine's, 1000)")
	maxConns := fs.Int("mysql-max-open-conns", 0, "the engine's connection pool (default: the engine's, 32)")
	if err := cli.ParseArgs(fs, args, replaySynopsis, replaySummary, stdout); err != nil {
		return err
	}
	if *file == "" {
		return &cli.UsageError{Msg: "replay: --capture FILE is required", Command: "tandem replay", Synopsis: replaySynopsis}
	}
	if *speed <= 0 {
		return &cli.UsageError{Msg: "replay: --speed must be above 0", Command: "tandem replay", Synopsis: replaySynopsis}
	}
	f, err := readCapture(*file)
	if err != nil {
		return err
	}
	progress := stderr
	h := &replay.Rehearsal{File: f, MySQLDSN: *dsn, ServerDSN: *server, Keep: *keep, P99Max: *p99Max,
		PoolCap: *poolCap, MaxOpenConns: *maxConns, Progress: progress}
	if *findMax && h.P99Max == 0 {
		h.P99Max = defaultFindMaxP99
	}
	results, best, err := rehearse(ctx, h, *speed, *findMax, *steps)
	if err != nil {
		return err
	}
	last := results[len(results)-1]
	if *htmlFile != "" {
		if err := writeHTML(*htmlFile, last); err != nil {
			return err
		}
	}
	if err := printReplays(stdout, results, best, h.P99Max, *speed, *findMax, *asJSON); err != nil {
		return err
	}
	if *findMax {
		if best == 0 {
			return fmt.Errorf("replay: no speed held")
		}
		return nil
	}
	if !last.Held {
		return fmt.Errorf("replay at %gx: %s", last.Speed, last.Verdict())
	}
	return nil
}

// rehearse runs one replay at speed, or with findMax the replays of
// Rehearsal.FindMax (best is the largest speed that held).
func rehearse(ctx context.Context, h *replay.Rehearsal, speed float64, findMax bool, steps int) (results []*replay.Result, best float64, err error) {
	if findMax {
		return h.FindMax(ctx, speed, steps)
	}
	res, err := h.Run(ctx, speed)
	if res != nil {
		results = append(results, res)
	}
	return results, 0, err
}

// printReplays writes the replays' results, as text or JSON (the last
// result alone, or with findMax every run and the largest speed that
// held).
func printReplays(stdout io.Writer, results []*replay.Result, best float64, p99Max time.Duration, speed float64, findMax, asJSON bool) error {
	if asJSON {
		out := any(results[len(results)-1])
		if findMax {
			out = map[string]any{"max_speed_held": best, "p99_max_ms": p99Max.Seconds() * 1000, "runs": results}
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	for _, res := range results {
		replay.WriteText(stdout, res)
		fmt.Fprintln(stdout)
	}
	if findMax {
		if best > 0 {
			fmt.Fprintf(stdout, "find-max: the engine held %gx the captured traffic (p99 under %s, no errors)\n", best, p99Max)
		} else {
			fmt.Fprintf(stdout, "find-max: the engine did not hold even %gx\n", speed)
		}
	}
	return nil
}

// defaultFindMaxP99 is --find-max's p99 limit when --p99-max is not set.
const defaultFindMaxP99 = 100 * time.Millisecond

func readCapture(path string) (*capture.File, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	f, err := capture.ReadFile(fh)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

func writeHTML(path string, res *replay.Result) error {
	fh, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := replay.WriteHTML(fh, res); err != nil {
		fh.Close()
		return err
	}
	return fh.Close()
}
