// Package benchcmd is `tandem bench`: the flags of each benchmark, and the
// in-process `tandem serve` the HTTP benches drive. The measuring is in
// internal/bench. The server (cmd/tandem/internal/server) does not import
// this package, so that `tandem serve` carries none of the bench's code
// (the server's deps_test.go checks).
package benchcmd

import (
	"context"
	"fmt"
	"io"

	"github.com/tandemhq/tandem/internal/cli"
)

// Synopses and summaries of each benchmark's --help.
const (
	benchSynopsis = "tandem bench engine|http|backfill|plan|report [FLAGS]"
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

// Run is `tandem bench`: args name the benchmark, then its flags. Errors
// are those of the tandem command: cli.ErrHelp, cli.ErrUsage (and
// *cli.UsageError), or a failed run.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return cli.Usagef("bench: want engine, http, backfill, plan or report")
	}
	switch args[0] {
	case "engine":
		return runEngine(ctx, args[1:], stdout, stderr)
	case "http":
		return runHTTP(ctx, args[1:], stdout, stderr)
	case "backfill":
		return runBackfill(ctx, args[1:], stdout, stderr)
	case "plan":
		return runPlan(ctx, args[1:], stdout, stderr)
	case "report":
		return runReport(args[1:], stdout)
	case "-h", "-help", "--help", "help":
		fmt.Fprintf(stdout, "usage: %s\n\n%s\n", benchSynopsis, benchSummary)
		return cli.ErrHelp
	}
	return cli.Usagef("bench: unknown benchmark %q, want engine, http, backfill, plan or report", args[0])
}
