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
	benchPlanSynopsis = "tandem bench plan [FLAGS]"
	benchPlanSummary  = `Measures how long a pod of real size takes to enter its shadow soak through
the rollout plan: an in-process 'tandem serve' on scratch stores runs one pod
in mode redis whose Redis holds --holds active holds over --shops shops; the
plan is started through the admin API (POST /admin/plan/start) and the bench
times the pod's way to mode shadow and to the step shadow_soak, the bulk copy
into MySQL included, then audits the pod.`
)

// runPlan is `tandem bench plan`: flags, then bench.PlanEntry.
func runPlan(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("tandem bench plan")
	holds := fs.Int("holds", 200000, "active holds in the pod's Redis")
	shops := fs.Int("shops", 200, "shops the pod lists and the holds are spread over (one position each)")
	timeout := fs.Duration("timeout", 2*time.Minute, "how long to wait for the pod's shadow soak")
	dsn := fs.String("mysql-dsn", "root@tcp(127.0.0.1:3306)/", "MySQL server (scratch databases are created and dropped)")
	raddr := fs.String("redis-addr", "127.0.0.1:6379", "Redis server (a scratch key prefix is used and deleted)")
	js := fs.Bool("json", false, "print JSON")
	if err := cli.ParseArgs(fs, args, benchPlanSynopsis, benchPlanSummary, stdout); err != nil {
		return err
	}
	if *holds < 1 || *shops < 1 || *timeout <= 0 {
		fmt.Fprintln(stderr, "--holds, --shops and --timeout must be positive")
		return cli.ErrUsage
	}
	b := bench.PlanEntry{Holds: *holds, Shops: *shops, Timeout: *timeout, MySQLDSN: *dsn,
		Redis: bench.NewRedis(*raddr, ""), Start: startBenchServer}
	run := startBenchRun("plan", args)
	res, err := b.Run(ctx, stderr)
	if err != nil {
		return err
	}
	endBenchRun(run, stderr)
	return bench.PrintPlanEntry(stdout, run, res, *js)
}
