package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"sort"
	"strings"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/internal/adminclient"
)

// client calls the admin API for one command and prints its answer.
type client struct {
	api    *adminclient.Client
	json   bool
	stdout io.Writer
	stderr io.Writer
	// confirm asks the operator a yes/no question; nil when no one can
	// answer (not a terminal).
	confirm func(question string) bool
}

// confirm asks question on w and reads the answer from r: only "y" or
// "yes" is a yes.
func confirm(r io.Reader, w io.Writer, question string) bool {
	fmt.Fprintf(w, "%s [y/N] ", question)
	line, _ := bufio.NewReader(r).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true
	}
	return false
}

// apiError is a non-2xx answer of the admin API (its error JSON).
type apiError = adminclient.Error

// detailLines formats an error's details for a human, sorted by key;
// failed_gates is the one an operator most needs to see.
func detailLines(e *apiError) []string {
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

func (c *client) printRaw(raw []byte) {
	c.stdout.Write(raw)
	if len(raw) > 0 && raw[len(raw)-1] != '\n' {
		io.WriteString(c.stdout, "\n")
	}
}

// call sends a request and decodes a 2xx answer into out. With --json the
// raw body is printed to stdout whatever the status, so that scripts can
// read error details too. It reports whether out is to be printed (false
// with --json: already printed).
func (c *client) call(ctx context.Context, method, path string, query url.Values, body, out any) (bool, error) {
	if err := c.api.Call(ctx, method, path, query, body, out); err != nil {
		return false, err
	}
	return !c.json, nil
}

// checkLines formats details.checks of a refused promotion, one gate a
// line: "gate min_comparisons: 660 (threshold >= 1000) FAIL: 340 more
// comparisons".
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
		line := fmt.Sprintf("gate %s: %s (threshold %s) %s", c.Gate, gateNumber(c.Gate, c.Value),
			gateThreshold(c.Gate, c.Threshold), gateStatus(c))
		if c.Missing != "" {
			line += ": " + c.Missing
		}
		lines = append(lines, line)
	}
	return lines
}
