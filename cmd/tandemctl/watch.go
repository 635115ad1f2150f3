package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

// DefaultWatchInterval is the time between refreshes of pods --watch.
const DefaultWatchInterval = 2 * time.Second

// ExitDrift is the exit code of audit --fail-on-drift when the audit found
// drift, so that a script tells drift from a failed call (ExitError).
const ExitDrift = 3

// driftError is an audit that found drift, with --fail-on-drift.
type driftError struct {
	pod              string
	drifted, checked int
}

func (e *driftError) Error() string {
	return fmt.Sprintf("drift: %d of %d positions of pod %s disagree (see the table above; tandemctl resync %s --from mysql rebuilds Redis)",
		e.drifted, e.checked, e.pod, e.pod)
}

// watchPods runs show every interval until ctx ends (Ctrl-C), which is a
// normal end (exit 0). On a terminal each refresh replaces the last one;
// elsewhere (a pipe, a log) each is printed under a time stamp, and with
// --json each answer is one JSON document. A failed refresh is reported and
// retried; a refusal that no retry fixes (bad token, unknown pod) ends it.
func watchPods(ctx context.Context, c *client, interval time.Duration, show func(context.Context) error) error {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	tty := isTerminal(c.stdout)
	for {
		if !c.json {
			if tty {
				io.WriteString(c.stdout, "\033[H\033[2J")
			}
			fmt.Fprintf(c.stdout, "%s  every %s, Ctrl-C stops\n", when(time.Now()), interval)
		}
		err := show(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			var ae *apiError
			var ue *usageError
			if errors.As(err, &ue) || errors.As(err, &ae) && (ae.Status == http.StatusUnauthorized ||
				ae.Status == http.StatusForbidden || ae.Status == http.StatusNotFound) {
				return err
			}
			fmt.Fprintf(c.stderr, "tandemctl: %v (retrying every %s)\n", err, interval)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// watchFlags adds --watch and --interval to a command that shows
// something, and returns how to run its show: once, or every interval
// until Ctrl-C (watchPods). --interval without --watch is a usage error.
func watchFlags(fs *flag.FlagSet, name string) func(ctx context.Context, c *client, show func(context.Context) error) error {
	watch := fs.Bool("watch", false, "refresh every --interval until interrupted (Ctrl-C)")
	interval := fs.Duration("interval", DefaultWatchInterval, "time between refreshes with --watch")
	return func(ctx context.Context, c *client, show func(context.Context) error) error {
		if !*watch {
			if flagSet(fs, "interval") {
				return usagef("--interval needs --watch (%s --watch --interval %s)", name, *interval)
			}
			return show(ctx)
		}
		if *interval <= 0 {
			return usagef("--interval must be > 0, got %s", *interval)
		}
		return watchPods(ctx, c, *interval, show)
	}
}

// isTerminal reports whether w is a terminal, where a refresh may clear
// the screen.
func isTerminal(w io.Writer) bool {
	if cw, ok := w.(*colourWriter); ok {
		w = cw.w
	}
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
