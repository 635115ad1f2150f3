// Package bench is tandem's load generator and benchmark: the engines
// measured directly (Engine: redis, mysql unit rows, the naive single-row
// baseline), the service over HTTP per pod mode (HTTP), the kill switch's
// propagation between two instances (KillSwitch), the online backfill
// (Backfill), and the markdown report of their JSON results (Report).
//
// Every run works on scratch databases and Redis key prefixes
// (internal/scratch) and removes them. The HTTP benches run `tandem serve`
// in-process through a StartFunc that cmd/tandem/internal/benchcmd passes
// in, so this package holds no wiring of its own; benchcmd parses the
// flags. The server does not import this package.
package bench
