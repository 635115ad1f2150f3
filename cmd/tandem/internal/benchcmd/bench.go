package benchcmd

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
	"time"

	"github.com/tandemhq/tandem/internal/bench"
	"github.com/tandemhq/tandem/internal/cli"
)

func parseInts(s string) ([]int, error) {
	var out []int
	for _, p := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("want a comma-separated list of integers >= 1, got %q", s)
		}
		out = append(out, n)
	}
	return out, nil
}

// runEngine is `tandem bench engine`: flags, then bench.Engine.
func runEngine(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("tandem bench engine")
	stores := fs.String("stores", "redis,mysql,naive", "engines to measure: redis, mysql (unit rows), naive (single-row baseline)")
	items := fs.Int("items", 1, "items the load is spread over (1: one hot item)")
	cartSize := fs.Int("cart-size", 1, "units per cart, as lines of distinct items (at most --items lines)")
	conc := fs.String("concurrency", "1,8,32,128", "concurrency sweep")
	dur := fs.Duration("duration", 8*time.Second, "duration of each cell")
	lat := fs.Duration("mysql-latency", 0, "one-way latency added by an in-process TCP proxy in front of MySQL (emulates a datacenter hop)")
	dsn := fs.String("mysql-dsn", "root@tcp(127.0.0.1:3306)/", "MySQL server (a scratch database is created and dropped)")
	raddr := fs.String("redis-addr", "127.0.0.1:6379", "Redis server (a scratch key prefix is used and deleted)")
	rcluster := fs.String("redis-cluster", "", "a Redis Cluster's seed nodes (host:port,...) instead of --redis-addr")
	shops := fs.Int("shops", 1, "shops the carts are spread over (on a Redis Cluster, each shop is a hash slot)")
	poolCap := fs.Int("pool-cap", 1000, "unit rows per position in the MySQL engine")
	maxConns := fs.Int("mysql-max-conns", 64, "connection pool of the mysql engine and of the naive baseline, at most the concurrency (the server's max_connections is shared)")
	maxInflight := fs.Int("mysql-max-inflight", 0, "reserves the mysql engine runs at once, the others queued first in, first out (0: the engine's default, its pool less one)")
	js := fs.Bool("json", false, "print JSON")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run (client, driver and latency proxy) to this `FILE`")
	if err := cli.ParseArgs(fs, args, benchEngineSynopsis, benchEngineSummary, stdout); err != nil {
		return err
	}
	stop, err := startCPUProfile(*cpuProfile)
	if err != nil {
		return err
	}
	defer stop()
	b := bench.Engine{Items: *items, CartSize: *cartSize, Duration: *dur, MySQLLatency: *lat,
		MySQLDSN: *dsn, Redis: bench.NewRedis(*raddr, *rcluster), Shops: *shops, PoolCap: *poolCap, MaxConns: *maxConns, MaxInflight: *maxInflight}
	if b.Concurrency, err = parseInts(*conc); err != nil {
		fmt.Fprintln(stderr, "--concurrency:", err)
		return cli.ErrUsage
	}
	for _, s := range strings.Split(*stores, ",") {
		switch s = strings.TrimSpace(s); s {
		case "redis", "mysql", "naive":
			b.Stores = append(b.Stores, s)
		default:
			fmt.Fprintf(stderr, "--stores: unknown store %q (want redis, mysql, naive)\n", s)
			return cli.ErrUsage
		}
	}
	if b.Items < 1 || b.CartSize < 1 || b.Duration <= 0 || b.MySQLLatency < 0 || b.MaxConns < 1 || b.Shops < 1 || b.MaxInflight < 0 {
		fmt.Fprintln(stderr, "--items, --cart-size, --duration, --shops and --mysql-max-conns must be positive, --mysql-max-inflight not negative")
		return cli.ErrUsage
	}
	run := startBenchRun("engine", args)
	results, err := b.Run(ctx, stderr)
	if err != nil {
		return err
	}
	endBenchRun(run, stderr)
	return bench.PrintResults(stdout, run, results, *js)
}

// startBenchRun records the start of `tandem bench sub args`.
func startBenchRun(sub string, args []string) *bench.RunInfo {
	return bench.StartRun(bench.CommandLine("tandem bench "+sub, args))
}

// endBenchRun records the end of the run and says how busy the machine was.
func endBenchRun(run *bench.RunInfo, progress io.Writer) {
	run.End()
	fmt.Fprintf(progress, "bench: load average (1 min) %.2f at the start, %.2f at the end, %d CPUs\n", run.Load1Start, run.Load1End, run.CPUs)
}

// startCPUProfile writes a CPU profile of the run to path until stop is
// called; nothing when path is empty.
func startCPUProfile(path string) (stop func(), err error) {
	return startRecording(path, pprof.StartCPUProfile, pprof.StopCPUProfile)
}

// startTrace writes an execution trace of the run to path until stop is
// called; nothing when path is empty.
func startTrace(path string) (stop func(), err error) {
	return startRecording(path, trace.Start, trace.Stop)
}

// startRecording runs start on a new file at path, and returns what ends
// the recording and closes the file.
func startRecording(path string, start func(io.Writer) error, end func()) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := start(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { end(); f.Close() }, nil
}
