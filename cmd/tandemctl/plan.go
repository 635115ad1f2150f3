package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tandemhq/tandem"
)

// planActions are the changes "plan ACTION" sends, by path; approve and
// skip also name a pod.
var planActions = map[string]string{
	"start":   "/admin/plan/start",
	"pause":   "/admin/plan/pause",
	"resume":  "/admin/plan/resume",
	"abort":   "/admin/plan/abort",
	"approve": "/admin/plan/approve",
	"skip":    "/admin/plan/skip",
}

// planStartRequest is the body of POST /admin/plan/start.
type planStartRequest struct {
	Reason     string `json:"reason"`
	ShadowSoak string `json:"shadow_soak,omitempty"`
	MySQLSoak  string `json:"mysql_soak,omitempty"`
	FinalMode  string `json:"final_mode,omitempty"`
	Parallel   int    `json:"parallel,omitempty"`
	Approval   *bool  `json:"approval,omitempty"`
	// Rehearsal replaces the configured rehearsal gate's settings.
	Rehearsal *planRehearsalRequest `json:"rehearsal,omitempty"`
}

// planRehearsalRequest is the rehearsal gate of POST /admin/plan/start.
type planRehearsalRequest struct {
	Speed  *float64 `json:"speed,omitempty"`
	P99Max string   `json:"p99_max,omitempty"`
}

// planPodRequest is the body of POST /admin/plan/approve and /skip.
type planPodRequest struct {
	Reason string `json:"reason"`
	Pod    string `json:"pod"`
}

func planCmd(fs *flag.FlagSet) runFunc {
	reason := fs.String("reason", "", "why (required with every action; written to the audit log)")
	shadowSoak := fs.String("shadow-soak", "", "start: how long each pod soaks in shadow (default from the config)")
	mysqlSoak := fs.String("mysql-soak", "", "start: how long each pod soaks in mysql (default from the config)")
	finalMode := fs.String("final-mode", "", "start: mysql or mysql_only (default from the config)")
	parallel := fs.Int("parallel", 0, "start: at most this many pods in transition (default from the config)")
	approval := fs.String("approval", "", "start: true to wait for 'plan approve POD' before each promotion")
	rehearsalSpeed := fs.String("rehearsal-speed", "", "start: rehearse each pod's latest capture at `N` times its speed before shadow -> mysql (0: off; default from the config)")
	rehearsalP99Max := fs.String("rehearsal-p99-max", "", "start: a rehearsal holds with every op's p99 under `D` (default from the config)")
	run := watchFlags(fs, "plan")
	return func(ctx context.Context, c *client, args []string) error {
		var st tandem.Plan
		if len(args) == 0 {
			if *reason != "" {
				return usagef("--reason goes with an action")
			}
			return run(ctx, c, func(ctx context.Context) error {
				if ok, err := c.call(ctx, http.MethodGet, "/admin/plan", nil, nil, &st); !ok {
					return err
				}
				printPlan(c.stdout, st, time.Now())
				return nil
			})
		}
		if flagSet(fs, "watch") || flagSet(fs, "interval") {
			return usagef("--watch shows the plan; it does not go with plan %s", args[0])
		}
		path, known := planActions[args[0]]
		if !known {
			return usagef("unknown plan action %q: want start, pause, resume, abort, approve or skip", args[0])
		}
		if *reason == "" {
			return usagef("--reason is required")
		}
		var body any = reasonRequest{Reason: *reason}
		switch args[0] {
		case "approve", "skip":
			if len(args) != 2 {
				return usagef("plan %s takes POD", args[0])
			}
			body = planPodRequest{Reason: *reason, Pod: args[1]}
		case "start":
			req := planStartRequest{Reason: *reason, ShadowSoak: *shadowSoak, MySQLSoak: *mysqlSoak, FinalMode: *finalMode, Parallel: *parallel}
			if *approval != "" {
				b, err := strconv.ParseBool(*approval)
				if err != nil {
					return usagef("--approval must be true or false")
				}
				req.Approval = &b
			}
			if *rehearsalSpeed != "" || *rehearsalP99Max != "" {
				req.Rehearsal = &planRehearsalRequest{P99Max: *rehearsalP99Max}
				if *rehearsalSpeed != "" {
					v, err := strconv.ParseFloat(*rehearsalSpeed, 64)
					if err != nil {
						return usagef("--rehearsal-speed must be a number, got %q", *rehearsalSpeed)
					}
					req.Rehearsal.Speed = &v
				}
			}
			body = req
			fallthrough
		default:
			if len(args) != 1 {
				return usagef("plan %s takes no more arguments, got %d", args[0], len(args)-1)
			}
		}
		if ok, err := c.call(ctx, http.MethodPost, path, nil, body, &st); !ok {
			return err
		}
		printPlan(c.stdout, st, time.Now())
		return nil
	}
}

// printPlan shows the phase, the driver, why the plan waits, and every pod
// in rollout order, smallest first, with its step, soak and gates.
func printPlan(w io.Writer, st tandem.Plan, now time.Time) {
	fmt.Fprintf(w, "plan:        %s\n", orDash(string(st.Phase)))
	if st.Driver != "" {
		fmt.Fprintf(w, "driver:      %s", st.Driver)
		if st.LeaseUntil != nil {
			fmt.Fprintf(w, " (lease until %s)", when(*st.LeaseUntil))
		}
		fmt.Fprintln(w)
	}
	s := st.Settings
	if s.FinalMode != "" {
		fmt.Fprintf(w, "settings:    shadow soak %s, mysql soak %s, final mode %s, parallel %d, approval %t\n",
			s.ShadowSoak, s.MySQLSoak, s.FinalMode, s.Parallel, s.Approval)
	}
	if len(s.ConfirmWebhooks) > 0 {
		fmt.Fprintf(w, "confirm:     each promotion waits for a 2xx from %s (within %s each)\n",
			strings.Join(s.ConfirmWebhooks, ", "), s.ConfirmTimeout)
	}
	if r := s.Rehearsal; r != nil {
		fmt.Fprintf(w, "rehearsal:   each pod's latest capture at %gx, every op's p99 under %s, before shadow -> mysql\n", r.Speed, r.P99Max)
	}
	if st.Waiting != "" {
		fmt.Fprintf(w, "waiting:     %s\n", st.Waiting)
	}
	if eta, ok := planETA(st, now); ok && st.Phase == tandem.PlanRunning {
		fmt.Fprintf(w, "eta:         about %s (the soaks left, if every gate passes)\n", eta)
	}
	if len(st.Pods) == 0 {
		fmt.Fprintln(w, "no pods")
		return
	}
	fmt.Fprintf(w, "on mysql:    %s\n", planSourceOfTruth(st.Pods))
	tw := newTable(w, "ORDER", "POD", "MODE", "SOT", "STEP", "SOAK_LEFT", "GATES", "WAITING")
	for i, p := range st.Pods {
		left := "-"
		if p.SoakUntil != nil {
			left = "0s"
			if d := p.SoakUntil.Sub(now); d > 0 {
				left = d.Round(time.Second).String()
			}
		}
		sot := effectiveSoT(p)
		if p.KillSwitch {
			sot += " (killed)"
		}
		row(tw, strconv.Itoa(i+1), p.Pod, string(p.Mode), sot, string(p.Step), left, planGates(p), orDash(p.Waiting))
	}
	tw.Flush()
	for _, p := range st.Pods {
		switch p.Step {
		case tandem.StepPending, tandem.StepDone, tandem.StepSkipped, tandem.StepAborted:
			continue
		}
		if p.KillSwitch {
			fmt.Fprintf(w, "%s gates: %s while its kill switch is engaged\n", p.Pod, notApplicable)
			continue
		}
		fmt.Fprintf(w, "%s gates:\n", p.Pod)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, ch := range p.Gates.Checks {
			line := fmt.Sprintf("  %s\t%s\tvalue %s\tthreshold %s", ch.Gate, gateStatus(ch),
				gateNumber(ch.Gate, ch.Value), gateThreshold(ch.Gate, ch.Threshold))
			if ch.Missing != "" {
				line += "\t(" + ch.Missing + ")"
			}
			fmt.Fprintln(tw, line)
		}
		tw.Flush()
	}
}

// planSourceOfTruth counts the pods MySQL answers for now, by their
// effective source of truth (a killed pod in mysql is served by Redis):
// "1 of 3 pods as source of truth (killed, served by Redis: pod-b)".
func planSourceOfTruth(pods []tandem.PlanPod) string {
	onMySQL := 0
	var killed []string
	for _, p := range pods {
		if effectiveSoT(p) == tandem.StoreMySQL {
			onMySQL++
		}
		if p.KillSwitch && p.Mode.SourceOfTruth() == tandem.StoreMySQL {
			killed = append(killed, p.Pod)
		}
	}
	s := fmt.Sprintf("%d of %d pods as source of truth", onMySQL, len(pods))
	if len(killed) > 0 {
		s += fmt.Sprintf(" (killed, served by Redis: %s)", strings.Join(killed, ","))
	}
	return s
}

// planETA estimates the time the soaks still take: the rest of each
// running soak and both soaks of every pending pod, parallel at a time.
func planETA(st tandem.Plan, now time.Time) (time.Duration, bool) {
	shadow, err1 := time.ParseDuration(st.Settings.ShadowSoak)
	mysql, err2 := time.ParseDuration(st.Settings.MySQLSoak)
	if err1 != nil || err2 != nil || st.Settings.Parallel < 1 {
		return 0, false
	}
	var total time.Duration
	for _, p := range st.Pods {
		left := time.Duration(0)
		if p.SoakUntil != nil && p.SoakUntil.After(now) {
			left = p.SoakUntil.Sub(now)
		}
		switch p.Step {
		case tandem.StepPending, tandem.StepBackfill:
			total += shadow + mysql
		case tandem.StepShadowSoak, tandem.StepAwaitingApproval:
			total += left + mysql
		case tandem.StepMySQLSoak:
			total += left
		}
	}
	return (total / time.Duration(st.Settings.Parallel)).Round(time.Second), true
}

// effectiveSoT is the store that answers p's buyers now; a server that
// does not say is taken to mean the one of p's mode, killed or not.
func effectiveSoT(p tandem.PlanPod) string {
	if p.SourceOfTruth != "" {
		return p.SourceOfTruth
	}
	return p.Mode.Effective(p.KillSwitch).SourceOfTruth()
}

// planGates sums a pod's gates up: "pass", the failing ones, or n/a while
// its kill switch is engaged.
func planGates(p tandem.PlanPod) string {
	if p.KillSwitch {
		return notApplicable + " (killed)"
	}
	if p.Gates.Passing {
		return "pass"
	}
	var bad []string
	for _, ch := range p.Gates.Checks {
		if !ch.Passing {
			bad = append(bad, ch.Gate)
		}
	}
	return "fail: " + listOr(bad, "?")
}
