package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/internal/adminclient"
	"github.com/tandemhq/tandem/rollout"
)

// client talks to a target over one keep-alive transport with enough idle
// connections for every concurrent buyer: the checkout API directly, the
// admin API through adminclient.
type client struct {
	t      *target
	tr     *http.Transport
	client *http.Client
	admin  *adminclient.Client
}

// actor names the bench in the audit log.
const actor = "tandem-bench"

func newClient(t *target, concurrency int) *client {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        concurrency + 16,
		MaxIdleConnsPerHost: concurrency + 16,
		IdleConnTimeout:     90 * time.Second,
	}
	hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	return &client{t: t, tr: tr, client: hc,
		admin: &adminclient.Client{Base: "http://" + t.admin, Token: t.adminToken, Actor: actor, HTTP: hc}}
}

func (c *client) close() { c.tr.CloseIdleConnections() }

// post sends a JSON body to the checkout API and returns the status of a
// 2xx answer, or an *adminclient.Error for any other.
func (c *client) post(ctx context.Context, url string, body []byte) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	return c.send(req, nil)
}

func (c *client) send(req *http.Request, out any) (int, error) {
	if c.t.apiToken != "" {
		req.Header.Set("Authorization", "Bearer "+c.t.apiToken)
	}
	req.Header.Set("X-Actor", actor)
	resp, err := c.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if out == nil && resp.StatusCode/100 == 2 {
		// Nothing to decode: drained (so the connection is reused) without
		// a buffer of its own.
		_, err := io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		return resp.StatusCode, err
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return resp.StatusCode, err
	}
	if resp.StatusCode/100 != 2 {
		return resp.StatusCode, adminclient.DecodeError(resp.StatusCode, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s %s: decode answer: %w", req.Method, req.URL.Path, err)
		}
	}
	return resp.StatusCode, nil
}

// checkout sends a request to the checkout API with body as JSON.
func (c *client) checkout(ctx context.Context, method, path string, body, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+c.t.checkout+path, rd)
	if err != nil {
		return 0, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return c.send(req, out)
}

// call sends an admin request.
func (c *client) call(ctx context.Context, method, path string, body, out any) error {
	if err := c.admin.Call(ctx, method, path, nil, body, out); err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	return nil
}

const benchReason = "tandem bench http"

// modePath returns the transitions that take a pod from one mode to
// another, one allowed step at a time (redis<->shadow<->mysql<->mysql_only).
func modePath(from, to tandem.Mode) []tandem.Mode {
	order := []tandem.Mode{tandem.ModeRedis, tandem.ModeShadow, tandem.ModeMySQL, tandem.ModeMySQLOnly}
	pos := func(m tandem.Mode) int {
		for i, o := range order {
			if o == m {
				return i
			}
		}
		return -1
	}
	i, j := pos(from), pos(to)
	if i < 0 || j < 0 {
		return nil
	}
	var path []tandem.Mode
	for i != j {
		if i < j {
			i++
		} else {
			i--
		}
		path = append(path, order[i])
	}
	return path
}

// setMode walks the pod to mode through the admin API; shadow -> mysql is
// forced past the gates (a bench cannot wait for them), and mysql_only ->
// mysql resyncs Redis first, as the API requires.
func (c *client) setMode(ctx context.Context, mode tandem.Mode) error {
	var pod tandem.PodStatus
	if err := c.call(ctx, http.MethodGet, "/admin/pods/"+c.t.pod, nil, &pod); err != nil {
		return err
	}
	from := pod.Mode
	for _, step := range modePath(from, mode) {
		if from == tandem.ModeMySQLOnly {
			body := map[string]string{"reason": benchReason, "from": "mysql"}
			if err := c.call(ctx, http.MethodPost, "/admin/pods/"+c.t.pod+"/resync", body, nil); err != nil {
				return err
			}
		}
		body := map[string]any{"mode": step, "reason": benchReason,
			"force": from == tandem.ModeShadow && step == tandem.ModeMySQL}
		asked := time.Now()
		if err := c.call(ctx, http.MethodPut, "/admin/pods/"+c.t.pod+"/mode", body, &pod); err != nil {
			return err
		}
		// Entering shadow answers 202 while its backfill runs in the
		// background: the next step is refused until the mode applies.
		if err := c.awaitMode(ctx, &pod, step, asked); err != nil {
			return err
		}
		from = step
	}
	return nil
}

// awaitMode polls the pod until its transition is over and it is in mode.
// A backfill that failed since asked (the pod stays in redis mode) ends
// the wait at once with the audit log's reason.
func (c *client) awaitMode(ctx context.Context, pod *tandem.PodStatus, mode tandem.Mode, asked time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	for pod.Transition != nil || pod.Mode != mode {
		if pod.Transition == nil {
			if err := c.failedBackfill(ctx, asked); err != nil {
				return fmt.Errorf("pod %s did not reach mode %s: %w", c.t.pod, mode, err)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pod %s did not reach mode %s (mode %s, transition %v): %w", c.t.pod, mode, pod.Mode, pod.Transition, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
		*pod = tandem.PodStatus{}
		if err := c.call(ctx, http.MethodGet, "/admin/pods/"+c.t.pod, nil, pod); err != nil {
			return err
		}
	}
	return nil
}

// failedBackfill returns the failure of the pod's backfill that ended
// since asked, as the audit log records it, or nil.
func (c *client) failedBackfill(ctx context.Context, asked time.Time) error {
	var log struct {
		Entries []tandem.AuditLogEntry `json:"entries"`
	}
	if err := c.admin.Call(ctx, http.MethodGet, "/admin/audit-log", url.Values{"limit": {"20"}}, nil, &log); err != nil {
		return fmt.Errorf("GET /admin/audit-log: %w", err)
	}
	for _, e := range log.Entries {
		if e.Pod == c.t.pod && e.Action == rollout.ActionBackfillEnd && !e.At.Before(asked) && strings.HasPrefix(e.After, "failed") {
			return fmt.Errorf("backfill %s", e.After)
		}
	}
	return nil
}

// stock sets the cell's items to the largest on_hand and waits until the
// checkout API answers them from mode's source of truth (other instances
// of a fleet apply a mode change within a second).
func (c *client) stock(ctx context.Context, shop int64, items []int64, mode tandem.Mode) error {
	want := mode.SourceOfTruth()
	for _, item := range items {
		path := fmt.Sprintf("/v1/inventory/%d/%d/1", shop, item)
		if _, err := c.checkout(ctx, http.MethodPut, path, map[string]int64{"on_hand": tandem.MaxOnHand}, nil); err != nil {
			return fmt.Errorf("PUT %s: %w", path, err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for {
			var inv tandem.Inventory
			if _, err := c.checkout(ctx, http.MethodGet, path, nil, &inv); err != nil {
				return fmt.Errorf("GET %s: %w", path, err)
			}
			if inv.SourceOfTruth == want {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("GET %s: source of truth %s, want %s (kill switch engaged?)", path, inv.SourceOfTruth, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

// report returns the pod's REPORT.
func (c *client) report(ctx context.Context) (tandem.Report, error) {
	var body struct {
		Pods []tandem.Report `json:"pods"`
	}
	if err := c.call(ctx, http.MethodGet, "/admin/report", nil, &body); err != nil {
		return tandem.Report{}, err
	}
	for _, r := range body.Pods {
		if r.Pod == c.t.pod {
			return r, nil
		}
	}
	return tandem.Report{}, fmt.Errorf("GET /admin/report: no pod %s", c.t.pod)
}

// settledReport waits until the shadow work of the cell has been compared
// (the comparison count stops moving), at most a few seconds.
func (c *client) settledReport(ctx context.Context) (tandem.Report, error) {
	prev, err := c.report(ctx)
	if err != nil {
		return prev, err
	}
	for range 30 {
		time.Sleep(100 * time.Millisecond)
		r, err := c.report(ctx)
		if err != nil {
			return r, err
		}
		if r.Comparisons == prev.Comparisons {
			return r, nil
		}
		prev = r
	}
	return prev, nil
}
