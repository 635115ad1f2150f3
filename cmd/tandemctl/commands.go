package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/tandemhq/tandem"
)

// commands lists every command in the order the usage shows them.
var commands = []*command{
	{name: "pods", usage: "pods [POD] [--watch [--interval 2s]]",
		summary: "list the pods, or show one with each gate against its threshold", setup: podsCmd},
	{name: "mode", usage: "mode POD MODE --reason R [--force] [--dry-run]",
		summary: "move a pod to redis|shadow|mysql|mysql_only", setup: modeCmd},
	{name: "kill", usage: "kill (--pods a,b | --all) --reason R",
		summary: "engage the kill switch of the pods (Redis answers)", setup: killSwitchCmd(http.MethodPost)},
	{name: "unkill", usage: "unkill (--pods a,b | --all) --reason R",
		summary: "disengage the kill switch of the pods", setup: killSwitchCmd(http.MethodDelete)},
	{name: "killswitch", usage: "killswitch",
		summary: "show the kill switch", setup: showKillSwitchCmd},
	{name: "divergences", usage: "divergences [--pod P] [--kind K] [--since 1h] [--limit N] [--group] [--watch [--interval 2s] | --format csv|jsonl]",
		summary: "list recent divergences newest first, grouped by position (--group), or export them", setup: divergencesCmd},
	{name: "report", usage: "report [--watch [--interval 2s]]",
		summary: "per pod: comparisons, divergences, rate, latency", setup: reportCmd},
	{name: "audit", usage: "audit POD [--reason R] [--fail-on-drift]",
		summary: "run a pod's drift audit now", setup: auditCmd},
	{name: "resync", usage: "resync POD --from mysql --reason R [--yes]",
		summary: "rebuild a pod's Redis from MySQL (asks on a terminal unless --yes)", setup: resyncCmd},
	{name: "throttle", usage: "throttle POD on|off --reason R",
		summary: "throttle a pod's background work by hand, or stop", setup: throttleCmd},
	{name: "log", usage: "log [--pod P] [--action A] [--limit N]",
		summary: "show the audit log of changes, newest first", setup: logCmd},
	{name: "config", usage: "config",
		summary: "show the server's effective configuration, secrets redacted", setup: configCmd},
	{name: "instances", usage: "instances",
		summary: "list running serve instances and their control version", setup: instancesCmd},
	{name: "plan", usage: "plan [--watch] [start|pause|resume|abort --reason R | approve|skip POD --reason R]",
		summary: "show the pod-by-pod rollout plan, or start, pause, resume, abort it, approve or skip a pod", setup: planCmd},
	{name: "capture", usage: "capture POD --for 10m [--max-ops N] [--reason R] | capture [list] | capture get ID -o FILE",
		summary: "record a pod's traffic for a rehearsal (tandem replay), list the captures, or download one", setup: captureCmd},
	{name: "version", usage: "version",
		summary: "print tandemctl's module version and VCS commit", setup: versionCmd, local: true},
	{name: "completion", usage: "completion bash|zsh|fish",
		summary: "print a shell completion script (source <(tandemctl completion bash))", local: true},
}

func podsCmd(fs *flag.FlagSet) runFunc {
	run := watchFlags(fs, "pods")
	return func(ctx context.Context, c *client, args []string) error {
		if len(args) > 1 {
			return usagef("pods takes at most one POD, got %d arguments", len(args))
		}
		return run(ctx, c, func(ctx context.Context) error { return showPods(ctx, c, args) })
	}
}

// showPods prints every pod, or one with its gate checks.
func showPods(ctx context.Context, c *client, args []string) error {
	switch len(args) {
	case 0:
		var ans struct {
			Pods []tandem.PodStatus `json:"pods"`
		}
		if ok, err := c.call(ctx, http.MethodGet, "/admin/pods", nil, nil, &ans); !ok {
			return err
		}
		printPods(c.stdout, ans.Pods)
	case 1:
		var pod tandem.PodStatus
		if ok, err := c.call(ctx, http.MethodGet, podPath(args[0], ""), nil, nil, &pod); !ok {
			return err
		}
		printPods(c.stdout, []tandem.PodStatus{pod})
		if pod.KillSwitch {
			fmt.Fprintf(c.stdout, "\ngates: %s while the kill switch is engaged (Redis serves %s whatever they say)\n", notApplicable, pod.Pod)
			return nil
		}
		printGateChecks(c.stdout, pod.Gates.Checks)
	}
	return nil
}

// modeRequest is the body of PUT /admin/pods/{pod}/mode.
type modeRequest struct {
	Mode   tandem.Mode `json:"mode"`
	Reason string      `json:"reason"`
	Force  bool        `json:"force,omitempty"`
	DryRun bool        `json:"dry_run,omitempty"`
}

func modeCmd(fs *flag.FlagSet) runFunc {
	reason := fs.String("reason", "", "why (required; written to the audit log)")
	force := fs.Bool("force", false, "override failed gates (logged)")
	dryRun := fs.Bool("dry-run", false, "check the transition and its gates; change nothing")
	return func(ctx context.Context, c *client, args []string) error {
		if len(args) != 2 {
			return usagef("mode takes POD and MODE, got %d arguments", len(args))
		}
		pod, mode := args[0], tandem.Mode(args[1])
		if !mode.Valid() {
			return usagef("unknown mode %q: want redis, shadow, mysql or mysql_only", mode)
		}
		if *reason == "" {
			return usagef("--reason is required")
		}
		body := modeRequest{Mode: mode, Reason: *reason, Force: *force, DryRun: *dryRun}
		if *dryRun {
			var dry tandem.DryRun
			show, err := c.call(ctx, http.MethodPut, podPath(pod, "mode"), nil, body, &dry)
			if err != nil {
				return err
			}
			if show {
				printDryRun(c.stdout, pod, mode, dry)
			}
			if !dry.WouldApply {
				// A dry run that would be refused fails, so that a script
				// can gate the real change on it.
				return &apiError{Code: tandem.ETRANSITIONREFUSED, Message: fmt.Sprintf(
					"dry run: %s -> %s would be refused (failed gates: %s)", pod, mode, listOr(dry.FailedGates, "none"))}
			}
			return nil
		}
		var st tandem.PodStatus
		if ok, err := c.call(ctx, http.MethodPut, podPath(pod, "mode"), nil, body, &st); !ok {
			return err
		}
		printPods(c.stdout, []tandem.PodStatus{st})
		return nil
	}
}

// killRequest is the body of POST and DELETE /admin/killswitch.
type killRequest struct {
	Reason string   `json:"reason"`
	Pods   []string `json:"pods,omitempty"`
}

// killSwitchCmd engages (POST) or disengages (DELETE) the kill switch of
// the pods named with --pods, or of every pod with --all: the targets are
// always explicit, so that a forgotten flag never reaches the whole fleet.
func killSwitchCmd(method string) func(fs *flag.FlagSet) runFunc {
	return func(fs *flag.FlagSet) runFunc {
		reason := fs.String("reason", "", "why (required; written to the audit log)")
		pods := fs.String("pods", "", "comma-separated pods (this or --all is required)")
		all := fs.Bool("all", false, "every pod (this or --pods is required)")
		return func(ctx context.Context, c *client, args []string) error {
			if len(args) != 0 {
				return usagef("unexpected argument %q (name pods with --pods a,b)", args[0])
			}
			if *reason == "" {
				return usagef("--reason is required")
			}
			podsSet := false
			fs.Visit(func(f *flag.Flag) { podsSet = podsSet || f.Name == "pods" })
			body := killRequest{Reason: *reason}
			switch {
			case podsSet && *all:
				return usagef("--pods and --all exclude each other")
			case *all:
			case podsSet:
				names, err := parsePods(*pods)
				if err != nil {
					return err
				}
				body.Pods = names
			default:
				return usagef("name the pods with --pods a,b, or --all for every pod")
			}
			var st tandem.KillSwitchState
			show, err := c.call(ctx, method, "/admin/killswitch", nil, body, &st)
			if err != nil {
				return err
			}
			if show {
				printKillSwitch(c.stdout, st)
			}
			if len(st.Refused) > 0 {
				names := make([]string, len(st.Refused))
				for i, r := range st.Refused {
					names[i] = r.Pod + " (" + r.Reason + ")"
				}
				return &apiError{Code: "refused", Message: "not every pod could fall back to Redis: " + strings.Join(names, "; ")}
			}
			return nil
		}
	}
}

func showKillSwitchCmd(fs *flag.FlagSet) runFunc {
	return func(ctx context.Context, c *client, args []string) error {
		if len(args) != 0 {
			return usagef("killswitch takes no arguments")
		}
		var st tandem.KillSwitchState
		if ok, err := c.call(ctx, http.MethodGet, "/admin/killswitch", nil, nil, &st); !ok {
			return err
		}
		printKillSwitch(c.stdout, st)
		return nil
	}
}

func divergencesCmd(fs *flag.FlagSet) runFunc {
	pod := fs.String("pod", "", "only this pod")
	kind := fs.String("kind", "", "only this kind: "+tandem.KindNames(", "))
	limit := fs.Int("limit", 0, "at most N (default: the server's)")
	since := fs.String("since", "", "only since `T`: a duration back from now (1h) or an RFC 3339 time")
	group := fs.Bool("group", false, "group by pod, kind, op and position, with counts and an example each")
	format := fs.String("format", "", "csv or jsonl: export the rows as the server writes them")
	watch := fs.Bool("watch", false, "refresh every --interval until interrupted (Ctrl-C)")
	interval := fs.Duration("interval", DefaultWatchInterval, "time between refreshes with --watch")
	return func(ctx context.Context, c *client, args []string) error {
		if len(args) != 0 {
			return usagef("unexpected argument %q", args[0])
		}
		if !*watch && flagSet(fs, "interval") {
			return usagef("--interval needs --watch (divergences --watch --interval %s)", *interval)
		}
		if *watch && *format != "" {
			return usagef("--watch does not go with --format (an export is one answer)")
		}
		if *watch && *interval <= 0 {
			return usagef("--interval must be > 0, got %s", *interval)
		}
		q := url.Values{}
		if *pod != "" {
			q.Set("pod", *pod)
		}
		if *kind != "" {
			q.Set("kind", *kind)
		}
		if *since != "" {
			q.Set("since", *since)
		}
		if *group {
			if *format != "" || *limit != 0 {
				return usagef("--group takes neither --format nor --limit")
			}
			show := showDivergenceGroups(c, q)
			if *watch {
				return watchPods(ctx, c, *interval, show)
			}
			return show(ctx)
		}
		if err := setLimit(q, *limit); err != nil {
			return err
		}
		switch *format {
		case "":
		case "csv", "jsonl":
			q.Set("format", *format)
			raw, err := c.api.Do(ctx, http.MethodGet, "/admin/divergences", q, nil)
			if err != nil {
				return err
			}
			_, err = c.stdout.Write(raw)
			return err
		default:
			return usagef("--format must be csv or jsonl, got %q", *format)
		}
		show := showDivergences(c, q)
		if *watch {
			return watchPods(ctx, c, *interval, show)
		}
		return show(ctx)
	}
}

// showDivergenceGroups returns a show of the divergences that q selects,
// grouped by pod, kind, op and position.
func showDivergenceGroups(c *client, q url.Values) func(context.Context) error {
	return func(ctx context.Context) error {
		var ans divergenceSummary
		if ok, err := c.call(ctx, http.MethodGet, "/admin/divergences/summary", q, nil, &ans); !ok {
			return err
		}
		printDivergenceGroups(c.stdout, ans)
		return nil
	}
}

// showDivergences returns a show of the divergences that q selects, one
// by one.
func showDivergences(c *client, q url.Values) func(context.Context) error {
	return func(ctx context.Context) error {
		var ans struct {
			Divergences []tandem.ExplainedDivergence `json:"divergences"`
		}
		if ok, err := c.call(ctx, http.MethodGet, "/admin/divergences", q, nil, &ans); !ok {
			return err
		}
		printDivergences(c.stdout, ans.Divergences)
		return nil
	}
}

// divergenceSummary is the answer of GET /admin/divergences/summary.
type divergenceSummary struct {
	Groups    []tandem.DivergenceGroup `json:"groups"`
	Sampled   int                      `json:"sampled"`
	Truncated bool                     `json:"truncated"`
}

func configCmd(fs *flag.FlagSet) runFunc {
	return func(ctx context.Context, c *client, args []string) error {
		if len(args) != 0 {
			return usagef("config takes no arguments")
		}
		var cfg map[string]any
		if ok, err := c.call(ctx, http.MethodGet, "/admin/config", nil, nil, &cfg); !ok {
			return err
		}
		return printConfig(c.stdout, cfg)
	}
}

func reportCmd(fs *flag.FlagSet) runFunc {
	run := watchFlags(fs, "report")
	return func(ctx context.Context, c *client, args []string) error {
		if len(args) != 0 {
			return usagef("report takes no arguments")
		}
		return run(ctx, c, func(ctx context.Context) error {
			var ans struct {
				Pods []tandem.Report `json:"pods"`
			}
			if ok, err := c.call(ctx, http.MethodGet, "/admin/report", nil, nil, &ans); !ok {
				return err
			}
			printReport(c.stdout, ans.Pods)
			return nil
		})
	}
}

// reasonRequest is the body of POST /admin/pods/{pod}/audit.
type reasonRequest struct {
	Reason string `json:"reason"`
}

func auditCmd(fs *flag.FlagSet) runFunc {
	reason := fs.String("reason", "tandemctl audit", "why")
	failOnDrift := fs.Bool("fail-on-drift", false, fmt.Sprintf("exit %d when the audit finds drift (for scripts and cron)", ExitDrift))
	return func(ctx context.Context, c *client, args []string) error {
		if len(args) != 1 {
			return usagef("audit takes one POD, got %d arguments", len(args))
		}
		if *reason == "" {
			return usagef("--reason must not be empty")
		}
		var a tandem.Audit
		show, err := c.call(ctx, http.MethodPost, podPath(args[0], "audit"), nil, reasonRequest{Reason: *reason}, &a)
		if err != nil {
			return err
		}
		if show {
			printAudit(c.stdout, a)
		}
		if *failOnDrift && !a.Clean {
			return &driftError{pod: a.Pod, drifted: len(a.Drifted), checked: a.Checked}
		}
		return nil
	}
}

// resyncRequest is the body of POST /admin/pods/{pod}/resync.
type resyncRequest struct {
	Reason string `json:"reason"`
	From   string `json:"from"`
}

func resyncCmd(fs *flag.FlagSet) runFunc {
	reason := fs.String("reason", "", "why (required; written to the audit log)")
	from := fs.String("from", "", "the store to rebuild from (required; only mysql)")
	yes := fs.Bool("yes", false, "do not ask for confirmation on a terminal")
	return func(ctx context.Context, c *client, args []string) error {
		if len(args) != 1 {
			return usagef("resync takes one POD, got %d arguments", len(args))
		}
		if *from != tandem.StoreMySQL {
			return usagef("--from must be mysql, got %q", *from)
		}
		if *reason == "" {
			return usagef("--reason is required")
		}
		if err := guardResync(ctx, c, args[0], *yes); err != nil {
			return err
		}
		var ans struct {
			Pod           string `json:"pod"`
			KeysRewritten int    `json:"keys_rewritten"`
		}
		body := resyncRequest{Reason: *reason, From: *from}
		if ok, err := c.call(ctx, http.MethodPost, podPath(args[0], "resync"), nil, body, &ans); !ok {
			return err
		}
		fmt.Fprintf(c.stdout, "%s: Redis rebuilt from %s, %d keys rewritten\n", ans.Pod, *from, ans.KeysRewritten)
		return nil
	}
}

// logScan is how many of the newest entries log reads when it filters by
// pod or action (the admin API's largest page).
const logScan = 1000

func logCmd(fs *flag.FlagSet) runFunc {
	limit := fs.Int("limit", 0, "at most N entries (default: the server's)")
	pod := fs.String("pod", "", "only the entries of this pod")
	action := fs.String("action", "", "only the entries of this action (set_mode, killswitch_engage, killswitch_disengage, resync, plan_start, automatic_abort...)")
	return func(ctx context.Context, c *client, args []string) error {
		if len(args) != 0 {
			return usagef("unexpected argument %q", args[0])
		}
		q := url.Values{}
		if err := setLimit(q, *limit); err != nil {
			return err
		}
		var ans struct {
			Entries []tandem.AuditLogEntry `json:"entries"`
		}
		if *pod == "" && *action == "" {
			if ok, err := c.call(ctx, http.MethodGet, "/admin/audit-log", q, nil, &ans); !ok {
				return err
			}
			printAuditLog(c.stdout, ans.Entries)
			return nil
		}
		// The filter runs here, over the newest logScan entries; with
		// --json it prints the entries it kept, not the page it read.
		q.Set("limit", strconv.Itoa(logScan))
		raw := c.api.Raw
		c.api.Raw = nil
		err := c.api.Call(ctx, http.MethodGet, "/admin/audit-log", q, nil, &ans)
		c.api.Raw = raw
		if err != nil {
			return err
		}
		ans.Entries = filterLog(ans.Entries, *pod, *action, *limit)
		if c.json {
			return json.NewEncoder(c.stdout).Encode(ans)
		}
		printAuditLog(c.stdout, ans.Entries)
		return nil
	}
}

// filterLog keeps the entries of pod and action ("" matches any), at most
// limit of them (0: the server's default page).
func filterLog(es []tandem.AuditLogEntry, pod, action string, limit int) []tandem.AuditLogEntry {
	if limit <= 0 {
		limit = 100
	}
	out := []tandem.AuditLogEntry{}
	for _, e := range es {
		if (pod == "" || e.Pod == pod) && (action == "" || e.Action == action) && len(out) < limit {
			out = append(out, e)
		}
	}
	return out
}

// flagSet reports whether the flag name was given on the command line.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func instancesCmd(fs *flag.FlagSet) runFunc {
	return func(ctx context.Context, c *client, args []string) error {
		if len(args) != 0 {
			return usagef("instances takes no arguments")
		}
		var ans struct {
			Instances []tandem.Instance `json:"instances"`
		}
		if ok, err := c.call(ctx, http.MethodGet, "/admin/instances", nil, nil, &ans); !ok {
			return err
		}
		printInstances(c.stdout, ans.Instances)
		return nil
	}
}

// podPath returns /admin/pods/{pod}[/action] with the pod name escaped.
func podPath(pod, action string) string {
	p := "/admin/pods/" + url.PathEscape(pod)
	if action != "" {
		p += "/" + action
	}
	return p
}

// setLimit adds limit to q when the flag was given (0 leaves the server's
// default).
func setLimit(q url.Values, limit int) error {
	if limit < 0 {
		return usagef("--limit must be > 0, got %d", limit)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	return nil
}

// parsePods splits the value of --pods ("a,b" or "a, b"): it must name at
// least one pod, with no empty name ("a,,b") and none twice.
func parsePods(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" || strings.Trim(s, ", \t") == "" {
		return nil, usagef("--pods names no pod")
	}
	parts := strings.Split(s, ",")
	out := make([]string, 0, len(parts))
	for _, p := range parts {
		p = strings.TrimSpace(p)
		if p == "" {
			return nil, usagef("--pods %q holds an empty name", s)
		}
		if slices.Contains(out, p) {
			return nil, usagef("--pods names %q twice", p)
		}
		out = append(out, p)
	}
	return out, nil
}

// guardResync warns when the pod took traffic in its recent window (a
// rebuild of Redis races what buyers do meanwhile) and, on a terminal
// without --yes, asks before the rebuild. Elsewhere (a script) it warns
// and goes on.
func guardResync(ctx context.Context, c *client, pod string, yes bool) error {
	var st tandem.PodStatus
	if err := c.api.Call(ctx, http.MethodGet, podPath(pod, ""), nil, nil, &st); err != nil {
		return err
	}
	if st.Abort != nil && st.Abort.Comparisons > 0 {
		fmt.Fprintf(c.stderr, "warning: %s took traffic in the last %s (%d dual-written requests); a resync under traffic rewrites Redis while buyers change it\n",
			pod, st.Abort.Window, st.Abort.Comparisons)
	}
	if yes || c.confirm == nil {
		return nil
	}
	if !c.confirm(fmt.Sprintf("Rebuild %s's Redis (mode %s) from MySQL?", pod, st.Mode)) {
		return &apiError{Code: "not_confirmed", Message: "resync of " + pod + " not confirmed; nothing changed"}
	}
	return nil
}
