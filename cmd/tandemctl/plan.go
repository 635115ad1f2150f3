package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// planStatus is the answer of GET /admin/plan and of every plan change.
type planStatus struct {
	Phase     string     `json:"phase"`
	Order     []string   `json:"order"`
	Promoted  []string   `json:"promoted"`
	SoakUntil *time.Time `json:"soak_until"`
	Waiting   string     `json:"waiting"`
}

// planActions are the changes "plan ACTION" sends, by path.
var planActions = map[string]string{
	"start": "/admin/plan/start",
	"pause": "/admin/plan/pause",
	"abort": "/admin/plan/abort",
}

func planCmd(fs *flag.FlagSet) runFunc {
	reason := fs.String("reason", "", "why (required with start, pause and abort; written to the audit log)")
	return func(ctx context.Context, c *client, args []string) error {
		var st planStatus
		switch len(args) {
		case 0:
			if *reason != "" {
				return usagef("--reason goes with start, pause or abort")
			}
			if ok, err := c.call(ctx, http.MethodGet, "/admin/plan", nil, nil, &st); !ok {
				return err
			}
		case 1:
			path, known := planActions[args[0]]
			if !known {
				return usagef("unknown plan action %q: want start, pause or abort", args[0])
			}
			if *reason == "" {
				return usagef("--reason is required")
			}
			if ok, err := c.call(ctx, http.MethodPost, path, nil, reasonRequest{Reason: *reason}, &st); !ok {
				return err
			}
		default:
			return usagef("plan takes at most one action, got %d arguments", len(args))
		}
		printPlan(c.stdout, st)
		return nil
	}
}

// printPlan shows the phase, why the plan waits, and every pod in rollout
// order, smallest first, with whether the plan promoted it.
func printPlan(w io.Writer, st planStatus) {
	fmt.Fprintf(w, "plan:        %s\n", orDash(st.Phase))
	if st.Waiting != "" {
		fmt.Fprintf(w, "waiting:     %s\n", st.Waiting)
	}
	if st.SoakUntil != nil && !st.SoakUntil.IsZero() {
		fmt.Fprintf(w, "soak until:  %s\n", when(*st.SoakUntil))
	}
	if len(st.Order) == 0 {
		fmt.Fprintln(w, "no pods")
		return
	}
	promoted := make(map[string]bool, len(st.Promoted))
	for _, p := range st.Promoted {
		promoted[p] = true
	}
	// Pods already on mysql before the plan started are skipped by it and
	// show as not promoted; the waiting line names the pod it stands at.
	tw := newTable(w, "ORDER", "POD", "PLAN")
	for i, p := range st.Order {
		row(tw, strconv.Itoa(i+1), p, onOff(promoted[p], "promoted", "not promoted"))
	}
	tw.Flush()
}
