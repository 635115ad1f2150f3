package main_test

import (
	"regexp"
	"strings"
	"testing"
)

// everyCommand is every tandemctl command.
var everyCommand = []string{"pods", "mode", "kill", "unkill", "killswitch", "divergences", "report",
	"audit", "resync", "throttle", "log", "instances", "plan", "version"}

// TestHelpEveryCommand checks that -h, --help and "help CMD" print the
// command's help once, to stdout, and exit 0, without a token.
func TestHelpEveryCommand(t *testing.T) {
	_, general, _ := run(t, map[string]string{}, "help")
	for _, cmd := range everyCommand {
		if !strings.Contains(general, "\n  "+cmd) {
			t.Errorf("got no %s in 'tandemctl help', want every command", cmd)
		}
		for _, args := range [][]string{{cmd, "-h"}, {cmd, "--help"}, {"help", cmd}} {
			t.Run(strings.Join(args, "_"), func(t *testing.T) {
				code, stdout, stderr := run(t, map[string]string{}, args...)
				if code != 0 {
					t.Fatalf("got exit %d, want 0 (stderr %q)", code, stderr)
				}
				if stderr != "" {
					t.Errorf("got stderr %q, want nothing", stderr)
				}
				if n := strings.Count(stdout, "usage:"); n != 1 {
					t.Errorf("got %d usage lines, want 1:\n%s", n, stdout)
				}
				if want := "usage: tandemctl " + cmd; !strings.HasPrefix(stdout, want) {
					t.Errorf("got %q, want it to start with %q", stdout, want)
				}
				if !strings.Contains(stdout, "  --reason") && cmd == "mode" {
					t.Errorf("got %q, want the --reason flag listed", stdout)
				}
			})
		}
	}
}

// TestVersion checks that version needs no token and prints the version
// line.
func TestVersion(t *testing.T) {
	code, stdout, stderr := run(t, map[string]string{}, "version")
	if code != 0 || stderr != "" {
		t.Fatalf("got exit %d, stderr %q; want 0 and nothing", code, stderr)
	}
	if !regexp.MustCompile(`^tandemctl \S+ \(commit \S+.*\) go1\.`).MatchString(stdout) {
		t.Errorf("got %q, want 'tandemctl VERSION (commit ...) goVERSION'", stdout)
	}
	if code, _, _ := run(t, map[string]string{}, "version", "extra"); code != 2 {
		t.Errorf("got exit %d for an argument, want 2", code)
	}
}
