package main_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// everyCommand is every tandemctl command.
var everyCommand = []string{"pods", "mode", "kill", "unkill", "killswitch", "divergences", "report",
	"audit", "resync", "throttle", "log", "instances", "plan", "capture", "version", "completion"}

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

// TestConventions checks what an operator expects of any command line
// tool: --version, short usage errors that point at --help, host:port for
// --url, no flag silently ignored.
func TestConventions(t *testing.T) {
	t.Run("VersionFlag", func(t *testing.T) {
		code, stdout, stderr := run(t, map[string]string{}, "--version")
		if code != 0 || stderr != "" || !strings.HasPrefix(stdout, "tandemctl ") {
			t.Errorf("got exit %d, stdout %q, stderr %q; want 0 and the version line", code, stdout, stderr)
		}
	})
	t.Run("UsageErrorIsShort", func(t *testing.T) {
		for _, args := range [][]string{{"--bogus"}, {"flip"}, {}, {"pods", "--bogus"}} {
			code, stdout, stderr := run(t, envFor("http://127.0.0.1:1"), args...)
			if code != 2 || stdout != "" {
				t.Errorf("%q: got exit %d, stdout %q; want 2 and nothing", args, code, stdout)
			}
			if n := strings.Count(stderr, "\n"); n > 3 || !strings.Contains(stderr, "--help") {
				t.Errorf("%q: got %d lines %q, want at most 3 with a pointer to --help", args, n, stderr)
			}
		}
	})
	t.Run("URLHostPort", func(t *testing.T) {
		api := newFakeAPI(t, 200, podsAnswer)
		hostPort := strings.TrimPrefix(api.URL, "http://")
		for _, env := range []map[string]string{envFor(hostPort), envFor("http://127.0.0.1:1")} {
			if code, _, stderr := run(t, env, "--url", hostPort, "pods"); code != 0 {
				t.Fatalf("got exit %d (%s), want 0", code, stderr)
			}
		}
		if code, _, stderr := run(t, envFor("ftp://x"), "pods"); code != 2 || !strings.Contains(stderr, "--url: want") {
			t.Errorf("got exit %d, stderr %q; want 2 and what --url takes", code, stderr)
		}
	})
	t.Run("IntervalWithoutWatch", func(t *testing.T) {
		api := newFakeAPI(t, 200, podsAnswer)
		code, _, stderr := run(t, envFor(api.URL), "pods", "--interval", "1s")
		if code != 2 || !strings.Contains(stderr, "--interval needs --watch") {
			t.Errorf("got exit %d, stderr %q; want 2 and --interval needs --watch", code, stderr)
		}
		if n := len(api.requests()); n != 0 {
			t.Errorf("got %d requests, want none", n)
		}
	})
}

// TestCompletion checks that each shell's script names every command and
// the flags of a command, and that bash reads the bash script.
func TestCompletion(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish"} {
		t.Run(shell, func(t *testing.T) {
			code, stdout, stderr := run(t, map[string]string{}, "completion", shell)
			if code != 0 || stderr != "" {
				t.Fatalf("got exit %d, stderr %q; want 0", code, stderr)
			}
			for _, want := range append(everyCommand, "dry-run", "fail-on-drift", "mysql_only") {
				if !strings.Contains(stdout, want) {
					t.Errorf("got no %q in the %s script", want, shell)
				}
			}
			bash, err := exec.LookPath("bash")
			if shell != "bash" || err != nil {
				return
			}
			script := filepath.Join(t.TempDir(), "c.bash")
			if err := os.WriteFile(script, []byte(stdout), 0o600); err != nil {
				t.Fatal(err)
			}
			// Complete "tandemctl mode pod-a --dr" as bash would.
			out, err := exec.Command(bash, "-c", `source "$1"; COMP_WORDS=(tandemctl mode pod-a --dr); COMP_CWORD=3; _tandemctl; echo "${COMPREPLY[@]}"`, "-", script).CombinedOutput()
			if err != nil || strings.TrimSpace(string(out)) != "--dry-run" {
				t.Errorf("got %q (%v), want --dry-run", out, err)
			}
		})
	}
	if code, _, _ := run(t, map[string]string{}, "completion", "tcsh"); code != 2 {
		t.Errorf("got exit %d for tcsh, want 2", code)
	}
}
