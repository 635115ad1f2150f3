// Command tandemctl is the admin API of tandem from a terminal: it lists the
// pods, changes their mode, engages and disengages the kill switch, runs
// audits and resyncs, runs the pod-by-pod rollout plan, and reads
// divergences, the report, the audit log and the running instances.
//
// It reads TANDEM_ADMIN_URL (default http://127.0.0.1:8081) and
// TANDEM_ADMIN_TOKEN. It exits 0 on success, 1 when the API refuses or
// fails (the error code and message go to stderr), 2 on a usage error and
// 3 when audit --fail-on-drift finds drift.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"os/user"
	"strings"
	"syscall"
	"time"

	"github.com/tandemhq/tandem/internal/adminclient"
	"github.com/tandemhq/tandem/internal/cli"
)

// Exit codes of tandemctl.
const (
	ExitOK    = 0 // the command did what it was asked
	ExitError = 1 // the API refused, did not find, or failed; or cannot be reached
	ExitUsage = 2 // bad flags or arguments, or no token
)

// DefaultURL is the admin API address used when TANDEM_ADMIN_URL is unset.
const DefaultURL = "http://127.0.0.1:8081"

// DefaultTimeout bounds every HTTP request tandemctl makes.
const DefaultTimeout = 10 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := NewMain().Run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}

// Main is one run of tandemctl with its environment, so that tests can run
// it against a fake admin API and read what it prints.
type Main struct {
	// Env looks up an environment variable (os.Getenv in production).
	Env func(string) string
	// Stdout receives answers; Stderr receives errors and usage.
	Stdout io.Writer
	Stderr io.Writer
	// HTTPClient makes the requests; it must have a timeout.
	HTTPClient *http.Client
	// Stdin answers confirmations; Interactive reports whether a person
	// sits at it (a terminal), the only case in which tandemctl asks.
	Stdin       io.Reader
	Interactive func() bool
	// OSUser and Hostname name the actor when neither --actor nor $USER
	// does (the OS account, then the machine); nil or "" skips them.
	OSUser   func() string
	Hostname func() string
}

// NewMain returns a Main wired to the process's environment and streams,
// with an HTTP client that gives up after DefaultTimeout.
func NewMain() *Main {
	return &Main{
		Env:    os.Getenv,
		Stdout: os.Stdout,
		Stderr: os.Stderr,
		Stdin:  os.Stdin,
		Interactive: func() bool {
			return isTerminal(os.Stdin) && isTerminal(os.Stderr)
		},
		HTTPClient: &http.Client{Timeout: DefaultTimeout},
		OSUser: func() string {
			u, err := user.Current()
			if err != nil {
				return ""
			}
			return u.Username
		},
		Hostname: func() string {
			h, _ := os.Hostname()
			return h
		},
	}
}

// defaultActor names who makes a change when --actor does not: $USER,
// else the OS account, else the host name, so that the audit log always
// says who.
func (m *Main) defaultActor() string {
	if u := strings.TrimSpace(m.Env("USER")); u != "" {
		return u
	}
	for _, f := range []func() string{m.OSUser, m.Hostname} {
		if f == nil {
			continue
		}
		if v := strings.TrimSpace(f()); v != "" {
			return v
		}
	}
	return ""
}

// globals are the flags that every command accepts, before or after its name.
type globals struct {
	json  bool
	actor string
	url   string
}

func (g *globals) register(fs *flag.FlagSet) {
	fs.BoolVar(&g.json, "json", g.json, "print the raw JSON answer")
	fs.StringVar(&g.actor, "actor", g.actor, "who makes the change, sent as X-Actor (default $USER, else the OS user, else the host name)")
	fs.StringVar(&g.url, "url", g.url, "admin API base URL, or host:port (overrides $TANDEM_ADMIN_URL)")
}

// usageError is a mistake on the command line: exit 2 with usage.
type usageError struct {
	msg   string
	usage string // the command's usage, or "" for the general one
}

func (e *usageError) Error() string { return e.msg }

// usagef returns a usage error; Run adds the command's usage to it.
func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// command is one subcommand of tandemctl.
type command struct {
	name    string
	usage   string // synopsis after "tandemctl "
	summary string
	// setup registers the command's own flags on fs and returns the func
	// that runs it with the positional arguments that remain.
	setup func(fs *flag.FlagSet) runFunc
	// local commands (version) run without the admin API or a token.
	local bool
}

// runFunc runs a command against the admin API.
type runFunc func(ctx context.Context, c *client, args []string) error

// Run runs the command line args (without the program name) and returns the
// exit code.
func (m *Main) Run(ctx context.Context, args []string) int {
	g := &globals{actor: m.defaultActor(), url: m.Env("TANDEM_ADMIN_URL")}
	if g.url == "" {
		g.url = DefaultURL
	}

	fs := newFlagSet("tandemctl")
	g.register(fs)
	showVersion := fs.Bool("version", false, "print the version line")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			m.printUsage(m.Stdout)
			return ExitOK
		}
		return m.usage(&usageError{msg: err.Error()})
	}
	if *showVersion {
		fmt.Fprintln(m.Stdout, cli.Version("tandemctl"))
		return ExitOK
	}
	if fs.NArg() == 0 {
		return m.usage(&usageError{msg: "no command given"})
	}
	name, rest := fs.Arg(0), fs.Args()[1:]
	if name == "help" {
		// "help CMD" is "CMD --help".
		if len(rest) == 0 || lookup(rest[0]) == nil {
			m.printUsage(m.Stdout)
			return ExitOK
		}
		name, rest = rest[0], []string{"--help"}
	}
	cmd := lookup(name)
	if cmd == nil {
		return m.usage(&usageError{msg: fmt.Sprintf("unknown command %q", name)})
	}

	cfs := newFlagSet("tandemctl " + name)
	g.register(cfs)
	run := cmd.setup(cfs)
	pos, err := parseInterspersed(cfs, rest)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			m.printCommandUsage(m.Stdout, cmd, cfs)
			return ExitOK
		}
		return m.usage(&usageError{msg: err.Error(), usage: cmd.usage})
	}

	c, uerr := m.newClient(cmd, g)
	if uerr != nil {
		return m.usage(uerr)
	}
	return m.finish(cmd, run(ctx, c, pos))
}

// newClient returns the client a command talks to the admin API with:
// the admin token (or the viewer token), the --url and --actor flags, and
// the output the terminal takes.
func (m *Main) newClient(cmd *command, g *globals) (*client, *usageError) {
	token := m.Env("TANDEM_ADMIN_TOKEN")
	if token == "" {
		// A read-only operator holds the viewer token only; changes are
		// then refused by the server (403 forbidden).
		token = m.Env("TANDEM_VIEWER_TOKEN")
	}
	if token == "" && !cmd.local {
		return nil, &usageError{msg: "TANDEM_ADMIN_TOKEN is not set (or TANDEM_VIEWER_TOKEN, read-only)", usage: cmd.usage}
	}
	base, err := normalizeURL(g.url)
	if err != nil {
		return nil, &usageError{msg: err.Error(), usage: cmd.usage}
	}
	hc := m.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: DefaultTimeout}
	}
	c := &client{
		api:    &adminclient.Client{Base: base, Token: token, Actor: g.actor, HTTP: hc},
		json:   g.json,
		stdout: m.Stdout,
		stderr: m.Stderr,
	}
	if c.json {
		c.api.Raw = c.printRaw
	} else if useColour(m.Stdout, m.Env) {
		c.stdout = &colourWriter{w: m.Stdout}
	}
	if m.Interactive != nil && m.Stdin != nil && m.Interactive() {
		c.confirm = func(question string) bool { return confirm(m.Stdin, m.Stderr, question) }
	}
	return c, nil
}

// finish turns what a command returned into its exit code, telling the
// operator why it failed.
func (m *Main) finish(cmd *command, err error) int {
	var ue *usageError
	var ae *apiError
	var de *driftError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &de):
		fmt.Fprintf(m.Stderr, "tandemctl: %v\n", de)
		return ExitDrift
	case errors.As(err, &ue):
		if ue.usage == "" {
			ue.usage = cmd.usage
		}
		return m.usage(ue)
	case errors.As(err, &ae):
		fmt.Fprintf(m.Stderr, "%s: %s\n", ae.Code, ae.Message)
		for _, line := range detailLines(ae) {
			fmt.Fprintf(m.Stderr, "  %s\n", line)
		}
		return ExitError
	default:
		fmt.Fprintf(m.Stderr, "tandemctl: %v\n", err)
		return ExitError
	}
}

// usage prints a usage error and returns ExitUsage: what is wrong, the
// synopsis of the command (or of tandemctl) and where the help is, three
// lines rather than the whole usage, so that the mistake stays in sight.
func (m *Main) usage(e *usageError) int {
	fmt.Fprintf(m.Stderr, "tandemctl: %s\n", e.msg)
	if e.usage != "" {
		name, _, _ := strings.Cut(e.usage, " ")
		fmt.Fprintf(m.Stderr, "usage: tandemctl %s\n", e.usage)
		fmt.Fprintf(m.Stderr, "'tandemctl %s --help' lists its flags\n", name)
		return ExitUsage
	}
	fmt.Fprintln(m.Stderr, "usage: "+synopsis)
	fmt.Fprintln(m.Stderr, "'tandemctl --help' lists every command and flag")
	return ExitUsage
}

// synopsis is the first line of tandemctl's usage.
const synopsis = "tandemctl [--json] [--actor NAME] [--url URL] COMMAND [ARGS]"

// normalizeURL reads --url or $TANDEM_ADMIN_URL: a base URL, or host:port
// alone (127.0.0.1:8081), which means http://host:port.
func normalizeURL(s string) (string, error) {
	raw := strings.TrimSpace(s)
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("--url: want http://host:port, https://host:port or host:port, got %q", s)
	}
	return raw, nil
}

func (m *Main) printUsage(w io.Writer) {
	fmt.Fprint(w, `tandemctl: the tandem admin API from a terminal

usage: `+synopsis+`

commands:
`)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-52s %s\n", c.usage, c.summary)
	}
	fmt.Fprint(w, `
global flags (before or after the command):
  --json         print the raw JSON answer instead of a table
  --actor NAME   who makes the change, sent as X-Actor (default $USER, else the OS user, else the host name)
  --url URL      admin API base URL, or host:port (default $TANDEM_ADMIN_URL or `+DefaultURL+`)
  --version      print the version line (as 'tandemctl version')

environment:
  TANDEM_ADMIN_URL    admin API base URL
  TANDEM_ADMIN_TOKEN  admin token, sent as a bearer token (required for changes)
  TANDEM_VIEWER_TOKEN read-only token, used when TANDEM_ADMIN_TOKEN is unset

exit codes: 0 ok, 1 refused, not found or any API error, 2 usage error,
            3 drift found (audit --fail-on-drift)
`)
}

func (m *Main) printCommandUsage(w io.Writer, cmd *command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "usage: tandemctl %s\n\n%s\n\nflags:\n", cmd.usage, cmd.summary)
	cli.PrintFlags(w, fs)
}

func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // Run prints errors itself, in one format
	return fs
}

// parseInterspersed parses flags anywhere among the positional arguments,
// so that "mode pod-a shadow --reason x" works as operators type it. After
// "--" everything is positional.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if i := len(args) - len(rest); i > 0 && args[i-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

func lookup(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}
