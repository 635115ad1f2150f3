// Command tandem runs the shadow-mode migration controller (serve), its
// database migrations (migrate) and its load generator (bench).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `usage:
  tandem serve [--config FILE] [--demo-traffic] [--log-format json|console]
  tandem migrate --config FILE
  tandem bench engine [--stores redis,mysql,naive] [--items 1] [--cart-size 1] [--concurrency 1,8,32,128]
                      [--duration 8s] [--mysql-latency 0] [--mysql-dsn DSN] [--redis-addr ADDR] [--json]
                      [--redis-cluster HOST:PORT,...] [--shops 1]
                      [--pool-cap 1000] [--mysql-max-conns 64] [--cpuprofile FILE]
  tandem bench http [--config FILE] [--modes redis,shadow,mysql] [--concurrency 32] [--rate 0] [--duration 8s] [--json]
  tandem bench http --killswitch N [--redis-cluster HOST:PORT,...] [--json]
                      (kill switch propagation between two in-process instances)
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run dispatches a command line and returns the exit code: 0 ok, 1 failed,
// 2 usage.
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
		err = runMigrate(ctx, args[1:], stdout, stderr)
	case "bench":
		if len(args) < 2 {
			fmt.Fprint(stderr, usage)
			return 2
		}
		switch args[1] {
		case "engine":
			err = runBenchEngine(ctx, args[2:], stdout, stderr)
		case "http":
			err = runBenchHTTP(ctx, args[2:], stdout, stderr)
		default:
			fmt.Fprint(stderr, usage)
			return 2
		}
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "tandem: unknown command %q\n%s", args[0], usage)
		return 2
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprint(stderr, usage)
		return 2
	default:
		fmt.Fprintln(stderr, "tandem:", err)
		return 1
	}
}
