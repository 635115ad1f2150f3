package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/tandemhq/tandem"
)

// checkoutClient calls the checkout API the way a checkout service does:
// over HTTP, with the API token when one is set.
type checkoutClient struct {
	base, token string
	http        *http.Client
}

// newCheckoutClient returns a client of the checkout API at addr
// (host:port) with keep-alive connections for a flash sale's buyers.
func newCheckoutClient(addr, token string) *checkoutClient {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        128,
		MaxIdleConnsPerHost: 128,
		IdleConnTimeout:     90 * time.Second,
	}
	return &checkoutClient{base: "http://" + addr, token: token, http: &http.Client{Transport: tr, Timeout: 10 * time.Second}}
}

// reserveRequest is the body of POST /v1/reservations.
type reserveRequest struct {
	CartToken  string               `json:"cart_token"`
	ShopID     int64                `json:"shop_id"`
	TTLSeconds int64                `json:"ttl_seconds"`
	Lines      []tandem.LineRequest `json:"lines"`
}

func (c *checkoutClient) reserve(ctx context.Context, r reserveRequest) error {
	return c.call(ctx, http.MethodPost, "/v1/reservations", r, nil)
}

func (c *checkoutClient) claim(ctx context.Context, shop int64, token string) error {
	return c.call(ctx, http.MethodPost, fmt.Sprintf("/v1/reservations/%s/claim?shop_id=%d", url.PathEscape(token), shop), nil, nil)
}

func (c *checkoutClient) release(ctx context.Context, shop int64, token string) error {
	return c.call(ctx, http.MethodDelete, fmt.Sprintf("/v1/reservations/%s?shop_id=%d", url.PathEscape(token), shop), nil, nil)
}

func inventoryPath(k tandem.Key) string {
	return fmt.Sprintf("/v1/inventory/%d/%d/%d", k.ShopID, k.ItemID, k.GroupID)
}

func (c *checkoutClient) setOnHand(ctx context.Context, k tandem.Key, onHand int64) error {
	return c.call(ctx, http.MethodPut, inventoryPath(k), map[string]int64{"on_hand": onHand}, nil)
}

func (c *checkoutClient) inventory(ctx context.Context, k tandem.Key) (tandem.Counters, error) {
	var inv tandem.Counters
	err := c.call(ctx, http.MethodGet, inventoryPath(k), nil, &inv)
	return inv, err
}

// call sends body as JSON (when not nil) and decodes a 2xx answer into out
// (when not nil); any other answer is an error with its status and body.
func (c *checkoutClient) call(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, bytes.TrimSpace(raw))
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(raw, out)
}

// close drops the client's idle connections.
func (c *checkoutClient) close() { c.http.CloseIdleConnections() }
