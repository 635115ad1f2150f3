// Command tandem runs the shadow-mode migration controller (serve), its
// database migrations (migrate) and its load generator (bench).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

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
  tandem bench report [--update FILE] RUN.json...
                      (markdown tables and issue 14's figures from the benches' --json output)
  tandem replay --capture FILE [--speed 1] [--mysql DSN] [--find-max [--p99-max 100ms]] [--json] [--html FILE]
                (rehearses a capture of a pod's traffic on the MySQL engine of a scratch database)
  tandem version
  tandem help

'tandem COMMAND --help' describes a command and every flag it takes.
`

// Synopses and summaries of each command's --help.
const (
	serveSynopsis = "tandem serve [--config FILE] [--listen ADDR] [--admin-listen ADDR] [--demo-traffic] [--log-format json|console] [--log-level debug|info|warn|error]"
	serveSummary  = `Runs the checkout API and the admin API, the reapers, the rollout controller
and the audit loop. Without --config it runs the demo: three pods on local
MySQL/MariaDB and Redis (or embedded ones), a generated admin token and demo
traffic. --listen and --admin-listen override the config's and the demo's
addresses. TANDEM_ADMIN_TOKEN is required with --config.`
	migrateSynopsis = "tandem migrate --config FILE"
	migrateSummary  = `Creates or upgrades every table of the control database and of every pod's
MySQL; idempotent; creates a missing database when the user may.`
	benchSynopsis = "tandem bench engine|http|backfill|report [FLAGS]"
	benchSummary  = `Load generator and benchmark: 'tandem bench engine' measures the engines
directly, 'tandem bench http' the service over HTTP. 'tandem bench engine
--help' and 'tandem bench http --help' list every flag. 'tandem bench report'
renders the JSON of runs as markdown.`
	benchEngineSynopsis = "tandem bench engine [FLAGS]"
	benchEngineSummary  = `Measures reserve throughput and latency of the engines (redis, mysql unit
rows, naive single-row baseline) on scratch databases and key prefixes.`
	benchHTTPSynopsis = "tandem bench http [FLAGS]"
	benchHTTPSummary  = `Measures the service over HTTP per pod mode, on an in-process server with
scratch databases or on a running one (--config), or with --killswitch N
the kill switch's propagation between two in-process instances.`
)

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
		err = runMigrate(ctx, args[1:], stdout, stderr)
	case "bench":
		err = runBench(ctx, args[1:], stdout, stderr)
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
	case err == nil, errors.Is(err, errHelp):
		return 0
	case errors.Is(err, errUsage):
		var ue *usageError
		switch {
		case errors.As(err, &ue) && ue.synopsis != "":
			fmt.Fprintf(stderr, "tandem: %s\nusage: %s\n'%s --help' lists every flag\n", ue.msg, ue.synopsis, ue.command)
			return 2
		case errors.As(err, &ue):
			fmt.Fprintln(stderr, "tandem:", ue.msg)
		case err != errUsage:
			fmt.Fprintln(stderr, "tandem:", err)
		}
		fmt.Fprintln(stderr, "'tandem --help' lists every command and flag")
		return 2
	default:
		fmt.Fprintln(stderr, "tandem:", err)
		return 1
	}
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usagef("bench: want engine, http, backfill or report")
	}
	switch args[0] {
	case "engine":
		return runBenchEngine(ctx, args[1:], stdout, stderr)
	case "http":
		return runBenchHTTP(ctx, args[1:], stdout, stderr)
	case "backfill":
		return runBenchBackfill(ctx, args[1:], stdout, stderr)
	case "report":
		return runBenchReport(args[1:], stdout)
	case "-h", "-help", "--help", "help":
		fmt.Fprintf(stdout, "usage: %s\n\n%s\n", benchSynopsis, benchSummary)
		return errHelp
	}
	return usagef("bench: unknown benchmark %q, want engine, http, backfill or report", args[0])
}

func runVersion(args []string, stdout io.Writer) error {
	fs := newFlagSet("tandem version")
	if err := parseArgs(fs, args, "tandem version", "Prints the module version and the VCS commit tandem was built from.", stdout); err != nil {
		return err
	}
	fmt.Fprintln(stdout, cli.Version("tandem"))
	return nil
}

// usageError is a mistake on the command line (exit 2): what is wrong
// and, when known, the synopsis of the command it was made in.
type usageError struct {
	msg, command, synopsis string
}

func (e *usageError) Error() string { return e.msg }

// Is makes every usage error an errUsage.
func (e *usageError) Is(target error) bool { return target == errUsage }

// usagef returns a usage error of no particular command.
func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// errHelp says that --help was asked for and the help printed.
var errHelp = errors.New("help printed")

// newFlagSet returns a flag set that prints nothing itself: parseArgs
// prints the help to stdout, once, or run prints the error to stderr.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parseArgs parses a command's flags. -h or --help prints the synopsis,
// the summary and every flag to stdout and returns errHelp (exit 0); a bad
// flag or a stray argument returns a usage error naming it (exit 2).
func parseArgs(fs *flag.FlagSet, args []string, synopsis, summary string, stdout io.Writer) error {
	if err := parseFlags(fs, args, synopsis, summary, stdout); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return &usageError{msg: fmt.Sprintf("%s: unexpected argument %q", strings.TrimPrefix(fs.Name(), "tandem "), fs.Arg(0)),
			command: fs.Name(), synopsis: synopsis}
	}
	return nil
}

// parseFlags is parseArgs for a command that takes arguments after its
// flags (fs.Args()).
func parseFlags(fs *flag.FlagSet, args []string, synopsis, summary string, stdout io.Writer) error {
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprintf(stdout, "usage: %s\n\n%s\n", synopsis, summary)
		hasFlags := false
		fs.VisitAll(func(*flag.Flag) { hasFlags = true })
		if hasFlags {
			fmt.Fprint(stdout, "\nflags:\n")
			cli.PrintFlags(stdout, fs)
		}
		return errHelp
	case err != nil:
		return &usageError{msg: strings.TrimPrefix(fs.Name(), "tandem ") + ": " + err.Error(), command: fs.Name(), synopsis: synopsis}
	}
	return nil
}
