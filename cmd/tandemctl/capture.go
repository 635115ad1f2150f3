package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"text/tabwriter"
	"time"

	"github.com/tandemhq/tandem"
)

// DownloadTimeout bounds `capture get`, whose file may be large.
const DownloadTimeout = 10 * time.Minute

// captureRequest is the body of POST /admin/pods/{pod}/capture.
type captureRequest struct {
	Reason     string `json:"reason"`
	Duration   string `json:"duration"`
	MaxOps     int64  `json:"max_ops,omitempty"`
	KeepTokens bool   `json:"keep_tokens,omitempty"`
}

func captureCmd(fs *flag.FlagSet) runFunc {
	reason := fs.String("reason", "tandemctl capture", "why (written to the audit log)")
	forD := fs.Duration("for", 0, "how long to record, like 10m (with POD; required)")
	maxOps := fs.Int64("max-ops", 0, "stop after N operations (default: the server's, 1000000)")
	keep := fs.Bool("keep-tokens", false, "record cart tokens as they are (default: a keyed hash of each)")
	out := fs.String("o", "", "with get: write the file to `FILE` (required)")
	return func(ctx context.Context, c *client, args []string) error {
		switch {
		case len(args) == 0:
			return listCaptures(ctx, c)
		case args[0] == "list":
			return listCaptures(ctx, c)
		case args[0] == "get":
			if len(args) != 2 {
				return usagef("capture get takes one capture ID, got %d arguments", len(args)-1)
			}
			if *out == "" {
				return usagef("capture get needs -o FILE")
			}
			return getCapture(ctx, c, args[1], *out)
		}
		if len(args) != 1 {
			return usagef("capture takes one POD, got %d arguments", len(args))
		}
		if *forD <= 0 {
			return usagef("--for must be a duration above 0, like 10m")
		}
		if *reason == "" {
			return usagef("--reason must not be empty")
		}
		if *maxOps < 0 {
			return usagef("--max-ops must be >= 1")
		}
		var info tandem.CaptureInfo
		body := captureRequest{Reason: *reason, Duration: forD.String(), MaxOps: *maxOps, KeepTokens: *keep}
		if ok, err := c.call(ctx, http.MethodPost, podPath(args[0], "capture"), nil, body, &info); !ok {
			return err
		}
		fmt.Fprintf(c.stdout, "capture %s of %s: recording for %s (at most %d ops); %d positions and %d holds at its start\n",
			info.ID, info.Pod, info.Duration, info.MaxOps, info.Positions, info.Holds)
		fmt.Fprintf(c.stdout, "then: tandemctl capture get %s -o %s.tcap && tandem replay --capture %s.tcap --speed 1\n", info.ID, info.ID, info.ID)
		return nil
	}
}

func listCaptures(ctx context.Context, c *client) error {
	var ans struct {
		Captures []tandem.CaptureInfo `json:"captures"`
	}
	if ok, err := c.call(ctx, http.MethodGet, "/admin/captures", nil, nil, &ans); !ok {
		return err
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tPOD\tSTATE\tSTARTED\tOPS\tDROPPED\tBYTES\tENDED")
	for _, ci := range ans.Captures {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\n", ci.ID, ci.Pod, ci.State, ci.StartedAt.Format(time.RFC3339),
			ci.Ops, ci.Dropped, ci.Bytes, ci.Ended)
	}
	return tw.Flush()
}

func getCapture(ctx context.Context, c *client, id, path string) error {
	api := *c.api
	if api.HTTP != nil {
		hc := *api.HTTP
		hc.Timeout = DownloadTimeout
		api.HTTP = &hc
	}
	tmp := path + ".part"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	n, err := api.Download(ctx, "/admin/captures/"+url.PathEscape(id), f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	fmt.Fprintf(c.stderr, "capture %s: %d bytes written to %s\n", id, n, path)
	return nil
}
