// Command tandem runs the shadow-mode migration controller (serve), its
// database migrations (migrate), its load generator (bench) and the replay
// of a capture (replay). This package only dispatches and puts the server
// and the demo together: the server is internal/server, the demo
// internal/demo, the bench internal/benchcmd; the server imports neither.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/tandemhq/tandem/cmd/tandem/internal/benchcmd"
	"github.com/tandemhq/tandem/cmd/tandem/internal/server"
	"github.com/tandemhq/tandem/internal/cli"
)

const usage = `usage:
  tandem serve [--config FILE] [--listen ADDR] [--admin-listen ADDR] [--demo-traffic] [--log-format json|console] [--log-level debug|info|warn|error]
  tandem migrate --config FILE
  tandem bench engine [--stores redis,mysql,naive] [--items 1] [--cart-size 1] [--concurrency 1,8,32,128]
                      [--duration 8s] [--mysql-latency 0] [--mysql-dsn DSN] [--redis-addr ADDR] [--json]
                      [--redis-cluster HOST:PORT,...] [--shops 1]
                      [--pool-cap 1000] [--mysql-max-conns 64] [--mysql-max-inflight 0] [--cpuprofile FILE]
  tandem bench http [--config FILE] [--modes redis,shadow,mysql] [--concurrency 32] [--rate 0] [--duration 8s]
                    [--warmup D] [--items 1] [--cart-size 1] [--shop 1] [--pod POD] [--mysql-dsn DSN]
                    [--redis-addr ADDR] [--cpuprofile FILE] [--json]
                    [--redis-cluster HOST:PORT,...] [--rate-of-mysql F] [--repeat 1] [--compare-engine]
  tandem bench http --killswitch N [--redis-cluster HOST:PORT,...] [--json]
                    (kill switch propagation between two in-process instances)
  tandem bench backfill [--holds 50000] [--shops 200] [--rate 400] [--warmup 2s] [--mysql-dsn DSN]
                        [--redis-addr ADDR] [--throttle] [--max-buyer-p99 D] [--audit] [--json]
                        [--batch-holds N] [--workers N] [--cpuprofile FILE] [--trace FILE]
  tandem bench plan [--holds 200000] [--shops 200] [--timeout 2m] [--mysql-dsn DSN] [--redis-addr ADDR] [--json]
                    (a pod of real size through the rollout plan: time to its shadow soak)
  tandem bench report [--update FILE] RUN.json...
                      (markdown tables and issue 14's figures from the benches' --json output)
  tandem replay --capture FILE [--speed 1] [--mysql DSN] [--find-max [--p99-max 100ms]] [--json] [--html FILE]
                (rehearses a capture of a pod's traffic on the MySQL engine of a scratch database)
  tandem version
  tandem help

'tandem COMMAND --help' describes a command and every flag it takes.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run dispatches a command line and returns the exit code: 0 ok (also for
// --help), 1 failed, 2 usage.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "serve":
		err = runServe(ctx, args[1:], stdout, stderr)
	case "migrate":
		err = server.RunMigrate(ctx, args[1:], stdout, stderr)
	case "bench":
		err = benchcmd.Run(ctx, args[1:], stdout, stderr)
	case "replay":
		err = runReplay(ctx, args[1:], stdout, stderr)
	case "version", "--version":
		err = runVersion(args[1:], stdout)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "tandem: unknown command %q, want serve, migrate, bench or version\n'tandem --help' lists every command\n", args[0])
		return 2
	}
	switch {
	case err == nil, errors.Is(err, cli.ErrHelp):
		return 0
	case errors.Is(err, cli.ErrUsage):
		var ue *cli.UsageError
		switch {
		case errors.As(err, &ue) && ue.Synopsis != "":
			fmt.Fprintf(stderr, "tandem: %s\nusage: %s\n'%s --help' lists every flag\n", ue.Msg, ue.Synopsis, ue.Command)
			return 2
		case errors.As(err, &ue):
			fmt.Fprintln(stderr, "tandem:", ue.Msg)
		case err != cli.ErrUsage:
			fmt.Fprintln(stderr, "tandem:", err)
		}
		fmt.Fprintln(stderr, "'tandem --help' lists every command and flag")
		return 2
	default:
		fmt.Fprintln(stderr, "tandem:", err)
		return 1
	}
}

func runVersion(args []string, stdout io.Writer) error {
	fs := cli.NewFlagSet("tandem version")
	if err := cli.ParseArgs(fs, args, "tandem version", "Prints the module version and the VCS commit tandem was built from.", stdout); err != nil {
		return err
	}
	fmt.Fprintln(stdout, cli.Version("tandem"))
	return nil
}
