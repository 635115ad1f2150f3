// Package server is the server of `tandem serve` and `tandem migrate`:
// every part of the service wired together (Main) and its config file.
// End-to-end tests run it in-process. It imports nothing of the bench nor
// of the demo: `tandem bench` (cmd/tandem/internal/benchcmd) and the demo
// (cmd/tandem/internal/demo) import it, and deps_test.go checks that it
// stays that way.
package server

import (
	"context"
	"fmt"
	"io"

	"github.com/tandemhq/tandem/controldb"
	"github.com/tandemhq/tandem/internal/cli"
	"github.com/tandemhq/tandem/mysqlres"
)

// Synopses and summaries of the commands' --help.
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
)

// RunMigrate is `tandem migrate`.
func RunMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("tandem migrate")
	path := fs.String("config", "", "YAML config `FILE` (required)")
	if err := cli.ParseArgs(fs, args, migrateSynopsis, migrateSummary, stdout); err != nil {
		return err
	}
	if *path == "" {
		return &cli.UsageError{Msg: "migrate: --config is required", Command: "tandem migrate", Synopsis: migrateSynopsis}
	}
	cfg, err := LoadConfig(*path)
	if err != nil {
		return err
	}
	return migrateAll(ctx, cfg, stdout)
}

// migrateAll creates or upgrades the control database and every pod's
// MySQL; it is idempotent.
func migrateAll(ctx context.Context, cfg Config, stdout io.Writer) error {
	if err := controldb.NewStore(controldb.Config{DSN: cfg.Control.MySQLDSN}).Migrate(ctx); err != nil {
		return fmt.Errorf("control database: %w", atMySQL(cfg.Control.MySQLDSN, err))
	}
	fmt.Fprintln(stdout, "migrated control database")
	for _, p := range cfg.Pods {
		s := mysqlres.NewStore(p.MySQLDSN)
		if err := s.Migrate(ctx); err != nil {
			return fmt.Errorf("pod %s: %w", p.Name, atMySQL(p.MySQLDSN, err))
		}
		s.Close()
		fmt.Fprintf(stdout, "migrated pod %s\n", p.Name)
	}
	return nil
}
