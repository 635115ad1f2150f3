// Package adminclient calls tandem's admin API (docs/api.md)
// over HTTP: one request and answer format, one error type, shared by
// tandemctl and the bench.
package adminclient

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// MaxAnswer bounds how much of an answer the client reads; admin answers
// are lists capped by a limit, far below it.
const MaxAnswer = 32 << 20

// Client calls the admin API at Base with a bearer token.
type Client struct {
	// Base is the API's base URL, such as http://127.0.0.1:8081.
	Base string
	// Token is sent as a bearer token.
	Token string
	// Actor, when set, is sent as X-Actor: who makes a change.
	Actor string
	// HTTP makes the requests; it must have a timeout.
	HTTP *http.Client
	// Raw, when set, receives the body of every answer whatever its
	// status (tandemctl --json prints it).
	Raw func(body []byte)
}

// Error is a non-2xx answer: its status and the error
// JSON's code, message and details.
type Error struct {
	Status  int
	Code    string
	Message string
	Details map[string]any
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Do sends one request with body as JSON (when not nil) and returns the
// raw body of a 2xx answer. A non-2xx answer is an *Error.
func (c *Client) Do(ctx context.Context, method, path string, query url.Values, body any) ([]byte, error) {
	u := strings.TrimRight(c.Base, "/") + path
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
	req.Header.Set("Authorization", "Bearer "+c.Token)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Actor != "" {
		req.Header.Set("X-Actor", c.Actor)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cannot reach the admin API: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, MaxAnswer))
	if err != nil {
		return nil, fmt.Errorf("read answer of %s %s: %w", method, path, err)
	}
	if c.Raw != nil {
		c.Raw(raw)
	}
	if resp.StatusCode/100 == 2 {
		return raw, nil
	}
	return nil, DecodeError(resp.StatusCode, raw)
}

// Call sends a request and decodes a 2xx answer into out (when not nil).
func (c *Client) Call(ctx context.Context, method, path string, query url.Values, body, out any) error {
	raw, err := c.Do(ctx, method, path, query, body)
	if err != nil {
		return err
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("decode answer of %s %s: %w", method, path, err)
	}
	return nil
}

// DecodeError reads the error JSON {"error": {"code", "message",
// "details"}} (which the checkout API answers too), or describes an answer that is not one (a proxy's HTML page, say)
// by its status and first bytes.
func DecodeError(status int, raw []byte) *Error {
	var e struct {
		Error struct {
			Code    string         `json:"code"`
			Message string         `json:"message"`
			Details map[string]any `json:"details"`
		} `json:"error"`
	}
	if err := json.Unmarshal(raw, &e); err == nil && e.Error.Code != "" {
		return &Error{Status: status, Code: e.Error.Code, Message: e.Error.Message, Details: e.Error.Details}
	}
	snippet := strings.TrimSpace(string(raw))
	if len(snippet) > 200 {
		snippet = snippet[:200] + "..."
	}
	if snippet == "" {
		snippet = "empty answer"
	}
	return &Error{Status: status, Code: fmt.Sprintf("http_%d", status), Message: snippet}
}

// Download sends a GET of path and copies a 2xx answer's body to w (any
// size, unlike Do), returning how many bytes it copied. A non-2xx answer
// is an *Error. The client's HTTP timeout bounds the whole transfer.
func (c *Client) Download(ctx context.Context, path string, w io.Writer) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(c.Base, "/")+path, nil)
	if err != nil {
		return 0, fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, fmt.Errorf("cannot reach the admin API: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return 0, DecodeError(resp.StatusCode, raw)
	}
	n, err := io.Copy(w, resp.Body)
	if err != nil {
		return n, fmt.Errorf("download %s: %w", path, err)
	}
	return n, nil
}
