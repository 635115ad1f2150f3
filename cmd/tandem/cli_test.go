package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/tandemhq/tandem/internal/testenv"
)

func runArgs(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// TestHelp checks that -h and --help print the help once, to stdout, and
// exit 0 for every command and subcommand.
func TestHelp(t *testing.T) {
	commands := [][]string{{"serve"}, {"migrate"}, {"bench"}, {"bench", "engine"}, {"bench", "http"}, {"version"}}
	for _, cmd := range commands {
		for _, h := range []string{"-h", "--help"} {
			args := append(append([]string{}, cmd...), h)
			t.Run(strings.Join(args, "_"), func(t *testing.T) {
				code, stdout, stderr := runArgs(t, args...)
				if code != 0 {
					t.Fatalf("got exit %d, want 0 (stderr %q)", code, stderr)
				}
				if stderr != "" {
					t.Errorf("got stderr %q, want nothing", stderr)
				}
				if n := strings.Count(stdout, "usage:"); n != 1 {
					t.Errorf("got %d usage lines, want 1:\n%s", n, stdout)
				}
				if want := "usage: tandem " + cmd[0]; !strings.HasPrefix(stdout, want) {
					t.Errorf("got %q, want it to start with %q", stdout, want)
				}
			})
		}
	}
	for _, h := range []string{"help", "-h", "--help"} {
		t.Run("tandem_"+h, func(t *testing.T) {
			code, stdout, stderr := runArgs(t, h)
			if code != 0 || stderr != "" || strings.Count(stdout, "usage:") != 1 {
				t.Errorf("got exit %d, stdout %q, stderr %q; want exit 0 and the usage once on stdout", code, stdout, stderr)
			}
		})
	}
}

// TestUsageErrors checks that a mistake on the command line exits 2 and
// says what is wrong, once, on stderr.
func TestUsageErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--bogus"}, "tandem: serve: flag provided but not defined: -bogus\nusage: tandem serve"},
		{[]string{"serve", "extra"}, `tandem: serve: unexpected argument "extra"`},
		{[]string{"serve", "--listen", "nowhere"}, `tandem: serve: --listen: want host:port, got "nowhere"`},
		{[]string{"serve", "--admin-listen", "nowhere"}, `tandem: serve: --admin-listen: want host:port, got "nowhere"`},
		{[]string{"serve", "--log-level", "loud"}, "tandem: serve: --log-level must be debug, info, warn or error, got \"loud\"\nusage: tandem serve"},
		{[]string{"serve", "--config", "/nonexistent.yaml", "--log-format", "xml"}, `tandem: serve: --log-format must be json or console, got "xml"`},
		{[]string{"migrate"}, "tandem: migrate: --config is required\nusage: tandem migrate --config FILE"},
		{[]string{"bench"}, "tandem: bench: want engine, http, backfill, plan or report"},
		{[]string{"bench", "disk"}, `tandem: bench: unknown benchmark "disk"`},
		{[]string{"bench", "http", "--rate", "fast"}, "tandem: bench http: invalid value \"fast\" for flag -rate"},
		{[]string{"version", "now"}, `tandem: version: unexpected argument "now"`},
		{[]string{"launch"}, `tandem: unknown command "launch"`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, "_"), func(t *testing.T) {
			code, stdout, stderr := runArgs(t, tt.args...)
			if code != 2 {
				t.Errorf("got exit %d, want 2", code)
			}
			if stdout != "" {
				t.Errorf("got stdout %q, want nothing", stdout)
			}
			if !strings.Contains(stderr, tt.want) {
				t.Errorf("got stderr %q, want it to contain %q", stderr, tt.want)
			}
			if n := strings.Count(stderr, "\n"); n > 3 || !strings.Contains(stderr, "--help") {
				t.Errorf("got %d lines, want at most 3 with a pointer to --help:\n%s", n, stderr)
			}
		})
	}
}

// TestBenchHelpListsEveryFlag reads the flags each bench subcommand
// defines from its source and checks that its --help and the general usage
// list every one.
func TestBenchHelpListsEveryFlag(t *testing.T) {
	flagDef := regexp.MustCompile(`fs\.(?:String|Int|Int64|Float64|Bool|Duration)\("([a-z0-9-]+)"`)
	_, general, _ := runArgs(t, "help")
	for sub, file := range map[string]string{"engine": "bench.go", "http": "benchhttp.go", "backfill": "benchbackfill.go"} {
		t.Run(sub, func(t *testing.T) {
			src, err := os.ReadFile(filepath.Join("internal", "benchcmd", file))
			if err != nil {
				t.Fatal(err)
			}
			defs := flagDef.FindAllStringSubmatch(string(src), -1)
			if len(defs) < 5 {
				t.Fatalf("got %d flag definitions in %s, want the bench's flags", len(defs), file)
			}
			_, help, _ := runArgs(t, "bench", sub, "--help")
			for _, d := range defs {
				if !strings.Contains(help, "  --"+d[1]+" ") && !strings.Contains(help, "  --"+d[1]+"\n") {
					t.Errorf("got no --%s in 'tandem bench %s --help', want every flag", d[1], sub)
				}
				if !strings.Contains(general, "--"+d[1]+" ") && !strings.Contains(general, "--"+d[1]+"]") {
					t.Errorf("got no --%s in 'tandem help', want every flag of bench %s", d[1], sub)
				}
			}
		})
	}
}

func TestVersionCommand(t *testing.T) {
	code, stdout, stderr := runArgs(t, "version")
	if code != 0 || stderr != "" {
		t.Fatalf("got exit %d, stderr %q; want 0 and nothing", code, stderr)
	}
	if !regexp.MustCompile(`^tandem \S+ \(commit \S+.*\) go1\.`).MatchString(stdout) {
		t.Errorf("got %q, want 'tandem VERSION (commit ...) goVERSION'", stdout)
	}
}

// TestMigrateNamesTheAddress checks that a server that cannot be reached is
// named by its address, with the reason, not "connection failed".
func TestMigrateNamesTheAddress(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tandem.yaml")
	cfg := "control:\n  mysql_dsn: \"root:secret@tcp(127.0.0.1:1)/tandem_control\"\npods:\n  - name: a\n    shops: [1]\n" +
		"    mysql_dsn: \"root@tcp(127.0.0.1:1)/tandem_a\"\n    redis_addr: 127.0.0.1:6379\n"
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runArgs(t, "migrate", "--config", path)
	if want := "mysql at 127.0.0.1:1 is unavailable: connection refused"; code != 1 || !strings.Contains(stderr, want) {
		t.Errorf("got exit %d, stderr %q; want 1 and %q", code, stderr, want)
	}
	if strings.Contains(stderr, "secret") {
		t.Errorf("got %q, which shows the password", stderr)
	}
}

// TestServeInterruptedWhileStarting: Ctrl-C before serve has started is a
// stop asked for: exit 0 (make run then ends cleanly), not an error about
// a canceled request.
func TestServeInterruptedWhileStarting(t *testing.T) {
	testenv.RequireIntegration(t)
	path := filepath.Join(t.TempDir(), "tandem.yaml")
	_, prefix := testenv.MustRedis(t)
	cfg := fmt.Sprintf("control:\n  mysql_dsn: %q\n  redis_addr: %s\n  redis_prefix: %q\npods:\n  - name: a\n    shops: [1]\n"+
		"    mysql_dsn: %q\n    redis_addr: %s\n    redis_prefix: %q\n",
		testenv.MustCreateDatabase(t), testenv.RedisAddr(), prefix+"control:", testenv.MustCreateDatabase(t), testenv.RedisAddr(), prefix+"a:")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TANDEM_ADMIN_TOKEN", "tok")
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // Ctrl-C before anything started
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{"serve", "--config", path, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"}, &stdout, &stderr)
	if code != 0 {
		t.Errorf("got exit %d (%s), want 0", code, stderr.String())
	}
}
