package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/tandemhq/tandem/internal/cli"
)

// versionCmd prints the version line; it needs no admin API.
func versionCmd(fs *flag.FlagSet) runFunc {
	return func(ctx context.Context, c *client, args []string) error {
		if len(args) != 0 {
			return usagef("version takes no arguments")
		}
		fmt.Fprintln(c.stdout, cli.Version("tandemctl"))
		return nil
	}
}
