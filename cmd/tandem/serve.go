package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/tandemhq/tandem/cmd/tandem/internal/demo"
	"github.com/tandemhq/tandem/cmd/tandem/internal/server"
)

// runServe is `tandem serve`: the server and, without --config, the
// demo's stores and config; with demo traffic (the demo's default), buyers
// on the server's checkout API. It serves until ctx is done, then stops.
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	m := server.NewMain()
	m.Stdout, m.Stderr = stdout, stderr
	if err := m.ParseFlags(args, os.Getenv); err != nil {
		return err
	}
	if m.Demo {
		m.Prepare = (&demo.Demo{}).SetUp
	}
	if err := m.Run(ctx); err != nil {
		if ctx.Err() != nil {
			// Ctrl-C while starting is a stop asked for, not a failure
			// (make run then exits 0 too); what was started is closed.
			fmt.Fprintln(stderr, "tandem: interrupted while starting; stopped")
			return nil
		}
		return err
	}
	var buyers *demo.Traffic
	if m.DemoTraffic {
		buyers = demo.StartTraffic(m)
	}
	<-ctx.Done()
	m.Logger.Info("shutting down")
	buyers.Stop() // first: they would meet a closed server
	return m.Close()
}
