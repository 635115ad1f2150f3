package main

import (
	"context"
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
	{name: "divergences", usage: "divergences [--pod P] [--kind K] [--limit N]",
		summary: "list recent divergences, newest first", setup: divergencesCmd},
	{name: "report", usage: "report",
		summary: "per pod: comparisons, divergences, rate, latency", setup: reportCmd},
	{name: "audit", usage: "audit POD [--reason R] [--fail-on-drift]",
		summary: "run a pod's drift audit now", setup: auditCmd},
	{name: "resync", usage: "resync POD --from mysql --reason R",
		summary: "rebuild a pod's Redis from MySQL", setup: resyncCmd},
	{name: "throttle", usage: "throttle POD on|off --reason R",
		summary: "throttle a pod's background work by hand, or stop", setup: throttleCmd},
	{name: "log", usage: "log [--limit N]",
		summary: "show the audit log of changes, newest first", setup: logCmd},
	{name: "instances", usage: "instances",
		summary: "list running serve instances and their control version", setup: instancesCmd},
	{name: "plan", usage: "plan [start|pause|resume|abort --reason R | approve|skip POD --reason R]",
		summary: "show the pod-by-pod rollout plan, or start, pause, resume, abort it, approve or skip a pod", setup: planCmd},
	{name: "version", usage: "version",
		summary: "print tandemctl's module version and VCS commit", setup: versionCmd, local: true},
}

func podsCmd(fs *flag.FlagSet) runFunc {
	watch := fs.Bool("watch", false, "refresh every --interval until interrupted (Ctrl-C)")
	interval := fs.Duration("interval", DefaultWatchInterval, "time between refreshes with --watch")
	return func(ctx context.Context, c *client, args []string) error {
		if len(args) > 1 {
			return usagef("pods takes at most one POD, got %d arguments", len(args))
		}
		if !*watch {
			return showPods(ctx, c, args)
		}
		if *interval <= 0 {
			return usagef("--interval must be > 0, got %s", *interval)
		}
		return watchPods(ctx, c, *interval, func(ctx context.Context) error { return showPods(ctx, c, args) })
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
	return func(ctx context.Context, c *client, args []string) error {
		if len(args) != 0 {
			return usagef("unexpected argument %q", args[0])
		}
		q := url.Values{}
		if *pod != "" {
			q.Set("pod", *pod)
		}
		if *kind != "" {
			q.Set("kind", *kind)
		}
		if err := setLimit(q, *limit); err != nil {
			return err
		}
		var ans struct {
			Divergences []tandem.Divergence `json:"divergences"`
		}
		if ok, err := c.call(ctx, http.MethodGet, "/admin/divergences", q, nil, &ans); !ok {
			return err
		}
		printDivergences(c.stdout, ans.Divergences)
		return nil
	}
}

func reportCmd(fs *flag.FlagSet) runFunc {
	return func(ctx context.Context, c *client, args []string) error {
		if len(args) != 0 {
			return usagef("report takes no arguments")
		}
		var ans struct {
			Pods []tandem.Report `json:"pods"`
		}
		if ok, err := c.call(ctx, http.MethodGet, "/admin/report", nil, nil, &ans); !ok {
			return err
		}
		printReport(c.stdout, ans.Pods)
		return nil
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

func logCmd(fs *flag.FlagSet) runFunc {
	limit := fs.Int("limit", 0, "at most N entries (default: the server's)")
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
		if ok, err := c.call(ctx, http.MethodGet, "/admin/audit-log", q, nil, &ans); !ok {
			return err
		}
		printAuditLog(c.stdout, ans.Entries)
		return nil
	}
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
