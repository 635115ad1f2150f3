package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"

	"github.com/tandemhq/tandem"
)

// maxAnswer bounds how much of an answer tandemctl reads; admin answers are
// lists capped by a limit, far below it.
const maxAnswer = 32 << 20

// client calls the admin API for one command and prints its answer.
type client struct {
	base   string
	token  string
	actor  string
	json   bool
	http   *http.Client
	stdout io.Writer
	stderr io.Writer
}

// apiError is a non-2xx answer of the admin API (API.md "Errors").
type apiError struct {
	Status  int
	Code    string
	Message string
	Details map[string]any
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

// detailLines formats the details for a human, sorted by key; failed_gates
// is the one an operator most needs to see.
func (e *apiError) detailLines() []string {
	keys := make([]string, 0, len(e.Details))
	for k := range e.Details {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	lines := make([]string, 0, len(keys))
	for _, k := range keys {
		v := e.Details[k]
		if k == "checks" {
			lines = append(lines, checkLines(v)...)
			continue
		}
		if list, ok := v.([]any); ok {
			parts := make([]string, len(list))
			for i, x := range list {
				parts[i] = fmt.Sprint(x)
			}
			lines = append(lines, fmt.Sprintf("%s: %s", k, strings.Join(parts, ", ")))
			continue
		}
		b, err := json.Marshal(v)
		if err != nil {
			b = []byte(fmt.Sprint(v))
		}
		lines = append(lines, fmt.Sprintf("%s: %s", k, b))
	}
	return lines
}

// do sends one request and returns the raw body of a 2xx answer. A non-2xx
// answer is an *apiError. With --json the raw body is printed to stdout
// whatever the status, so that scripts can read error details too.
func (c *client) do(ctx context.Context, method, path string, query url.Values, body any) ([]byte, error) {
	u := c.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("encode request: %w", err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.actor != "" {
		req.Header.Set("X-Actor", c.actor)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cannot reach the admin API: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return nil, fmt.Errorf("read answer of %s %s: %w", method, path, err)
	}
	if c.json {
		c.printRaw(raw)
	}
	if resp.StatusCode/100 == 2 {
		return raw, nil
	}
	return nil, decodeError(resp, raw)
}

// decodeError reads API.md's error JSON, or describes an answer that is not
// one (a proxy's HTML page, say) by its status and first bytes.
func decodeError(resp *http.Response, raw []byte) *apiError {
	var e struct {
		Error struct {
			Code    string         `json:"code"`
			Message string         `json:"message"`
			Details map[string]any `json:"details"`
		} `json:"error"`
	}
	if err := json.Unmarshal(raw, &e); err == nil && e.Error.Code != "" {
		return &apiError{Status: resp.StatusCode, Code: e.Error.Code, Message: e.Error.Message, Details: e.Error.Details}
	}
	snippet := strings.TrimSpace(string(raw))
	if len(snippet) > 200 {
		snippet = snippet[:200] + "..."
	}
	if snippet == "" {
		snippet = "empty answer"
	}
	return &apiError{Status: resp.StatusCode, Code: fmt.Sprintf("http_%d", resp.StatusCode), Message: snippet}
}

func (c *client) printRaw(raw []byte) {
	c.stdout.Write(raw)
	if len(raw) > 0 && raw[len(raw)-1] != '\n' {
		io.WriteString(c.stdout, "\n")
	}
}

// call sends a request and, without --json, decodes a 2xx answer into out.
// It reports whether out was filled (false with --json: nothing to print).
func (c *client) call(ctx context.Context, method, path string, query url.Values, body, out any) (bool, error) {
	raw, err := c.do(ctx, method, path, query, body)
	if err != nil {
		return false, err
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return false, fmt.Errorf("decode answer of %s %s: %w", method, path, err)
	}
	return !c.json, nil
}

// checkLines formats details.checks of a refused promotion, one gate a
// line: "comparisons: 660 (threshold 1000) FAIL: 340 more comparisons".
func checkLines(v any) []string {
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	var checks []tandem.GateCheck
	if err := json.Unmarshal(b, &checks); err != nil {
		return []string{"checks: " + string(b)}
	}
	lines := make([]string, 0, len(checks))
	for _, c := range checks {
		line := fmt.Sprintf("gate %s: %g (threshold %g) %s", c.Gate, c.Value, c.Threshold, onOff(c.Passing, "pass", "FAIL"))
		if c.Missing != "" {
			line += ": " + c.Missing
		}
		lines = append(lines, line)
	}
	return lines
}
