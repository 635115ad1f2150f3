package benchcmd

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/tandemhq/tandem/internal/bench"
	"github.com/tandemhq/tandem/internal/cli"
)

const (
	benchBackfillSynopsis = "tandem bench backfill [FLAGS]"
	benchBackfillSummary  = `Measures the online backfill that a pod entering shadow runs: --holds active
holds are written into a scratch Redis as a legacy pod has them, buyers
reserve and release through the router at --rate, and the copy into a
scratch MySQL runs meanwhile, under the pod's default throttle. Prints
holds/s, the phases' durations, the buyers' p50/p99 before and during the
copy, the time the copy waited for the throttle by reason and each flow's
connection hold per batch or page, then checks that the stores converge.
With --audit, the pod is then audited in shadow, quiet and under buyers.`
)

// runBackfill is `tandem bench backfill`: flags, then bench.Backfill.
func runBackfill(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("tandem bench backfill")
	holds := fs.Int("holds", 50000, "active holds to copy")
	shops := fs.Int("shops", 200, "shops the holds are spread over (one position each)")
	rate := fs.Int("rate", 400, "buyer operations per second (a reserve then its release) during the run; 0 for a quiet pod")
	warmup := fs.Duration("warmup", 2*time.Second, "buyers' measurement before the copy")
	dsn := fs.String("mysql-dsn", "root@tcp(127.0.0.1:3306)/", "MySQL server (a scratch database is created and dropped)")
	raddr := fs.String("redis-addr", "127.0.0.1:6379", "Redis server (a scratch key prefix is used and deleted)")
	js := fs.Bool("json", false, "print JSON")
	throttled := fs.Bool("throttle", true, "run the copy under the pod's default throttle, as serve does (--throttle=false: none)")
	maxP99 := fs.Duration("max-buyer-p99", 0, "the throttle's limit on the buyers' p99 (default: throttle.max_buyer_p99's default)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run (buyers, router, copy and driver) to this `FILE`")
	batch := fs.Int("batch-holds", 0, "holds per copy transaction, as backfill.batch_holds (0: its default)")
	workers := fs.Int("workers", 0, "copy batches at once, as backfill.workers (0: its default)")
	traceFile := fs.String("trace", "", "write an execution trace of the whole run to this `FILE` (go tool trace)")
	audit := fs.Bool("audit", false, "after the copy, audit the pod in shadow: quiet (time, rows examined per hold), then under the buyers (their p99)")
	if err := cli.ParseArgs(fs, args, benchBackfillSynopsis, benchBackfillSummary, stdout); err != nil {
		return err
	}
	if *holds < 1 || *shops < 1 || *rate < 0 || *warmup <= 0 || *batch < 0 || *workers < 0 {
		fmt.Fprintln(stderr, "--holds, --shops and --warmup must be positive, --rate, --batch-holds and --workers at least 0")
		return cli.ErrUsage
	}
	b := bench.Backfill{Holds: *holds, Shops: *shops, Rate: *rate, Warmup: *warmup, MySQLDSN: *dsn, Redis: bench.NewRedis(*raddr, ""),
		NoThrottle: !*throttled, Audit: *audit, MaxBuyerP99: *maxP99, BatchHolds: *batch, Workers: *workers}
	stop, err := startCPUProfile(*cpuProfile)
	if err != nil {
		return err
	}
	defer stop()
	stopTrace, err := startTrace(*traceFile)
	if err != nil {
		return err
	}
	defer stopTrace()
	run := startBenchRun("backfill", args)
	res, err := b.Run(ctx, stderr)
	if err != nil {
		return err
	}
	endBenchRun(run, stderr)
	return bench.PrintBackfill(stdout, run, res, *js)
}
