package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"

	"github.com/tandemhq/tandem"
)

// throttleRequest is the body of PUT /admin/pods/{pod}/throttle.
type throttleRequest struct {
	Throttled bool   `json:"throttled"`
	Reason    string `json:"reason"`
}

// throttleCmd is `tandemctl throttle POD on|off --reason R`: the pod's
// manual throttle of background work.
func throttleCmd(fs *flag.FlagSet) runFunc {
	reason := fs.String("reason", "", "why (required; written to the audit log)")
	return func(ctx context.Context, c *client, args []string) error {
		if len(args) != 2 {
			return usagef("throttle takes POD and on or off, got %d arguments", len(args))
		}
		var on bool
		switch args[1] {
		case "on":
			on = true
		case "off":
		default:
			return usagef("throttle takes on or off, got %q", args[1])
		}
		if *reason == "" {
			return usagef("--reason is required")
		}
		var st tandem.PodStatus
		if ok, err := c.call(ctx, http.MethodPut, podPath(args[0], "throttle"), nil, throttleRequest{Throttled: on, Reason: *reason}, &st); !ok {
			return err
		}
		fmt.Fprintf(c.stdout, "%s: %s\n", st.Pod, throttleText(st.Throttle))
		return nil
	}
}

// throttleText says whether a pod's background work is throttled, and why.
func throttleText(th *tandem.ThrottleState) string {
	if th == nil || !th.Throttled {
		return "background work runs (not throttled)"
	}
	s := "background work throttled: " + th.Reason
	if th.Since != nil {
		s += " since " + th.Since.UTC().Format("15:04:05")
	}
	if th.Manual != nil && th.Signal != tandem.SignalManual {
		s += "; manual throttle on (" + th.Manual.Reason + ")"
	}
	return s
}
