package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/tandemhq/tandem/cmd/tandem/internal/server"
	"github.com/tandemhq/tandem/internal/testenv"
)

// e2eAdminToken is the admin token of every Main these tests run.
const e2eAdminToken = "e2e-admin-token-0123456789"

// Shops of the two pods of MustConfig: pod A (shadow) holds 1-9, pod B
// (redis) holds 10-19; shop 999 is in no pod.
const (
	shopA       = 1
	shopB       = 10
	unknownShop = 999
)

// MustConfig returns a validated config on fresh databases (one for the
// control plane, one per pod) and fresh Redis key prefixes: pod A in shadow
// mode and pod B in redis mode, with unique pod names, so that tests never
// see each other's state. It also returns a client of that Redis.
func MustConfig(tb testing.TB) (server.Config, *redis.Client) {
	tb.Helper()
	rdb, prefix := testenv.MustRedis(tb)
	cfg := server.DefaultConfig()
	cfg.Listen, cfg.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Control.MySQLDSN = testenv.MustCreateDatabase(tb)
	cfg.Control.RedisAddr = testenv.RedisAddr()
	cfg.Control.RedisPrefix = prefix + "control:"
	cfg.Reservation.ReaperInterval = 100 * time.Millisecond
	cfg.Rollout.AuditInterval = 0
	for _, p := range []struct{ mode, shops string }{{"shadow", "1-9"}, {"redis", "10-19"}} {
		name := testenv.RandomName("p" + p.mode[:1] + "-")
		cfg.Pods = append(cfg.Pods, server.PodConfig{
			Name: name, Shops: []string{p.shops}, Mode: p.mode,
			MySQLDSN: testenv.MustCreateDatabase(tb), RedisAddr: testenv.RedisAddr(),
			RedisPrefix: prefix + name + ":", MySQLMaxOpenConns: 16,
		})
	}
	if err := cfg.Validate(); err != nil {
		tb.Fatalf("validate the test config: %v", err)
	}
	return cfg, rdb
}

// Instance is one running `tandem serve` with clients of both its APIs.
type Instance struct {
	Main *server.Main
	// CheckoutURL and AdminURL are the base URLs, e.g. http://127.0.0.1:41234.
	CheckoutURL string
	AdminURL    string
	AdminToken  string
	Checkout    *apiClient
	Admin       *apiClient
}

// MustRunMain runs a Main on cfg (see MustConfig), with the admin token
// e2eAdminToken and any changes of opts, and closes it when tb ends.
func MustRunMain(tb testing.TB, cfg server.Config, opts ...func(*server.Main)) *Instance {
	tb.Helper()
	m := server.NewMain()
	m.Config = cfg
	m.AdminToken = e2eAdminToken
	m.InstanceID = testenv.RandomName("e2e-")
	m.Logger = zaptest.NewLogger(tb, zaptest.Level(zap.WarnLevel))
	m.Stdout, m.Stderr = io.Discard, io.Discard
	for _, o := range opts {
		o(m)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := m.Run(ctx); err != nil {
		tb.Fatalf("run tandem serve: %v", err)
	}
	tb.Cleanup(func() { m.Close() })
	in := &Instance{
		Main: m, CheckoutURL: "http://" + m.CheckoutAddr, AdminURL: "http://" + m.AdminAddr, AdminToken: m.AdminToken,
	}
	in.Checkout = &apiClient{tb: tb, base: in.CheckoutURL, token: m.APIToken}
	in.Admin = &apiClient{tb: tb, base: in.AdminURL, token: m.AdminToken, actor: "e2e-tester"}
	return in
}

// apiClient calls one of the HTTP APIs and fails tb on transport errors.
type apiClient struct {
	tb    testing.TB
	base  string
	token string
	actor string
}

// httpClient checks every exchange against web/openapi.yaml (see
// openAPITransport).
var httpClient = &http.Client{Timeout: 30 * time.Second, Transport: openAPITransport{next: http.DefaultTransport}}

// obj is a decoded JSON object.
type obj = map[string]any

// raw sends body as is with the content type (none when empty) and returns
// the status and the decoded JSON answer (nil when it is not JSON).
func (c *apiClient) raw(method, path, contentType string, body []byte) (int, obj) {
	c.tb.Helper()
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, c.base+path, r)
	if err != nil {
		c.tb.Fatalf("%s %s: %v", method, path, err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if c.actor != "" {
		req.Header.Set("X-Actor", c.actor)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		c.tb.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.tb.Fatalf("%s %s: read answer: %v", method, path, err)
	}
	var v obj
	if json.Unmarshal(b, &v) != nil {
		v = nil
	}
	return resp.StatusCode, v
}

// call sends body as JSON (no body when nil).
func (c *apiClient) call(method, path string, body any) (int, obj) {
	c.tb.Helper()
	if body == nil {
		return c.raw(method, path, "", nil)
	}
	b, err := json.Marshal(body)
	if err != nil {
		c.tb.Fatal(err)
	}
	return c.raw(method, path, "application/json", b)
}

// must calls and fails tb unless the status is want.
func (c *apiClient) must(method, path string, body any, want int) obj {
	c.tb.Helper()
	got, v := c.call(method, path, body)
	if got != want {
		c.tb.Fatalf("%s %s: got status %d (%v), want %d", method, path, got, v, want)
	}
	return v
}

// mustErr calls and fails tb unless the answer is the error code with the
// status; it returns the error object.
func (c *apiClient) mustErr(method, path string, body any, status int, code string) obj {
	c.tb.Helper()
	got, v := c.call(method, path, body)
	return checkErr(c.tb, method+" "+path, got, v, status, code)
}

func checkErr(tb testing.TB, what string, gotStatus int, v obj, status int, code string) obj {
	tb.Helper()
	e, _ := v["error"].(obj)
	if gotStatus != status || e == nil || e["code"] != code {
		tb.Fatalf("%s: got %d %v, want %d with error code %s", what, gotStatus, v, status, code)
	}
	if msg, _ := e["message"].(string); msg == "" {
		tb.Errorf("%s: got an empty error message, want one", what)
	}
	return e
}

// getText GETs path with the admin token and returns status and body.
func (c *apiClient) getText(path string) (int, string) {
	c.tb.Helper()
	req, err := http.NewRequest(http.MethodGet, c.base+path, nil)
	if err != nil {
		c.tb.Fatal(err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		c.tb.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// eventually polls cond every 10 ms until it holds or a generous deadline
// passes; it measures nothing.
func eventually(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	poll(tb, what, 10*time.Millisecond, cond)
}

// poll checks cond every interval until it holds or a generous deadline
// passes.
func poll(tb testing.TB, what string, every time.Duration, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(every)
	}
}

func num(v any) int64 {
	f, _ := v.(float64)
	return int64(f)
}

func strs(v any) []string {
	var out []string
	for _, x := range asSlice(v) {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

// sameBody compares two answers, leaving out the "replayed" extension field
// that tells a repeat from the first answer.
func sameBody(a, b obj) bool {
	strip := func(v obj) obj {
		out := obj{}
		for k, x := range v {
			if k != "replayed" {
				out[k] = x
			}
		}
		return out
	}
	return reflect.DeepEqual(strip(a), strip(b))
}

func inventoryPath(shop, item, group int64) string {
	return fmt.Sprintf("/v1/inventory/%d/%d/%d", shop, item, group)
}

func cart(token string, shop int64, lines ...obj) obj {
	return obj{"cart_token": token, "shop_id": shop, "lines": lines}
}

func line(item, qty int64, groups ...int64) obj {
	return obj{"inventory_item_id": item, "quantity": qty, "group_ids": groups}
}

func resPath(token string, shop int64, suffix string) string {
	return fmt.Sprintf("/v1/reservations/%s%s?shop_id=%d", token, suffix, shop)
}

func TestE2ECheckout(t *testing.T) {
	cfg, _ := MustConfig(t)
	in := MustRunMain(t, cfg)
	api := in.Checkout
	podA, podB := cfg.Pods[0].Name, cfg.Pods[1].Name

	t.Run("PutInventoryReachesBothStoresInShadow", func(t *testing.T) {
		api.tb = t
		got := api.must(http.MethodPut, inventoryPath(shopA, 100, 1), obj{"on_hand": 5}, http.StatusOK)
		if num(got["on_hand"]) != 5 {
			t.Errorf("got on_hand %v, want 5", got["on_hand"])
		}
		inv := api.must(http.MethodGet, inventoryPath(shopA, 100, 1), nil, http.StatusOK)
		if inv["pod"] != podA || inv["source_of_truth"] != "redis" || num(inv["available"]) != 5 {
			t.Errorf("got %v, want pod %s, source of truth redis, available 5", inv, podA)
		}
		stores, _ := inv["stores"].(obj)
		for _, s := range []string{"redis", "mysql"} {
			st, _ := stores[s].(obj)
			if st == nil || num(st["available"]) != 5 || num(st["reserved"]) != 0 {
				t.Errorf("got stores.%s %v, want available 5 reserved 0", s, stores[s])
			}
		}
	})

	t.Run("ReserveCreatesThenReplays", func(t *testing.T) {
		api.tb = t
		body := cart("c-1", shopA, line(100, 2, 1))
		first := api.must(http.MethodPost, "/v1/reservations", body, http.StatusCreated)
		if first["status"] != "reserved" || first["pod"] != podA || first["source_of_truth"] != "redis" {
			t.Errorf("got %v, want reserved on %s with source of truth redis", first, podA)
		}
		lines := asSlice(first["lines"])
		if len(lines) != 1 || num(lines[0].(obj)["group_id"]) != 1 || num(lines[0].(obj)["quantity"]) != 2 {
			t.Errorf("got lines %v, want 2 of item 100 from group 1", first["lines"])
		}
		if _, err := time.Parse(time.RFC3339, fmt.Sprint(first["expires_at"])); err != nil {
			t.Errorf("got expires_at %v, want RFC 3339", first["expires_at"])
		}
		again := api.must(http.MethodPost, "/v1/reservations", body, http.StatusOK)
		if again["replayed"] != true {
			t.Errorf("got replayed %v on the retry, want true", again["replayed"])
		}
		if !sameBody(again, first) {
			t.Errorf("got retry answer %v, want the same body %v", again, first)
		}
		inv := api.must(http.MethodGet, inventoryPath(shopA, 100, 1), nil, http.StatusOK)
		if num(inv["reserved"]) != 2 || num(inv["available"]) != 3 {
			t.Errorf("got reserved %v available %v after a reserve and its retry, want 2 and 3", inv["reserved"], inv["available"])
		}
		stores, _ := inv["stores"].(obj)
		for _, s := range []string{"redis", "mysql"} {
			eventually(t, "the shadow to hold the cart", func() bool {
				inv = api.must(http.MethodGet, inventoryPath(shopA, 100, 1), nil, http.StatusOK)
				stores, _ = inv["stores"].(obj)
				st, _ := stores[s].(obj)
				return st != nil && num(st["available"]) == 3 && num(st["reserved"]) == 2
			})
		}
	})

	t.Run("ReserveOfTheSameTokenWithAnotherRequestConflicts", func(t *testing.T) {
		api.tb = t
		api.mustErr(http.MethodPost, "/v1/reservations", cart("c-1", shopA, line(100, 1, 1)), http.StatusConflict, "conflict")
	})

	t.Run("ReserveBeyondStockIsInsufficient", func(t *testing.T) {
		api.tb = t
		e := api.mustErr(http.MethodPost, "/v1/reservations", cart("c-2", shopA, line(100, 4, 1)), http.StatusConflict, "insufficient_inventory")
		details, _ := e["details"].(obj)
		if num(details["inventory_item_id"]) != 100 {
			t.Errorf("got details %v, want inventory_item_id 100", e["details"])
		}
		api.mustErr(http.MethodGet, resPath("c-2", shopA, ""), nil, http.StatusNotFound, "not_found")
	})

	t.Run("StockCountBelowHeldConflicts", func(t *testing.T) {
		api.tb = t
		api.mustErr(http.MethodPut, inventoryPath(shopA, 100, 1), obj{"on_hand": 1}, http.StatusConflict, "conflict")
		inv := api.must(http.MethodGet, inventoryPath(shopA, 100, 1), nil, http.StatusOK)
		if num(inv["on_hand"]) != 5 {
			t.Errorf("got on_hand %v after a refused stock count, want 5", inv["on_hand"])
		}
	})

	t.Run("ClaimDeductsOnceAndRepeats", func(t *testing.T) {
		api.tb = t
		first := api.must(http.MethodPost, resPath("c-1", shopA, "/claim"), nil, http.StatusOK)
		if first["status"] != "claimed" || first["cart_token"] != "c-1" || num(first["shop_id"]) != shopA {
			t.Errorf("got %v, want c-1 claimed", first)
		}
		again := api.must(http.MethodPost, resPath("c-1", shopA, "/claim"), nil, http.StatusOK)
		if !sameBody(again, first) {
			t.Errorf("got repeated claim %v, want the same body %v", again, first)
		}
		if got := api.must(http.MethodGet, resPath("c-1", shopA, ""), nil, http.StatusOK); got["status"] != "claimed" {
			t.Errorf("got status %v, want claimed", got["status"])
		}
		inv := api.must(http.MethodGet, inventoryPath(shopA, 100, 1), nil, http.StatusOK)
		if num(inv["on_hand"]) != 3 || num(inv["reserved"]) != 0 || num(inv["available"]) != 3 {
			t.Errorf("got on_hand %v reserved %v available %v, want 3 0 3 (deducted once)", inv["on_hand"], inv["reserved"], inv["available"])
		}
		api.mustErr(http.MethodDelete, resPath("c-1", shopA, ""), nil, http.StatusConflict, "already_claimed")
		api.mustErr(http.MethodPost, "/v1/reservations", cart("c-1", shopA, line(100, 2, 1)), http.StatusConflict, "conflict")
	})

	t.Run("UnknownCartIsNotFound", func(t *testing.T) {
		api.tb = t
		api.mustErr(http.MethodPost, resPath("never", shopA, "/claim"), nil, http.StatusNotFound, "not_found")
		api.mustErr(http.MethodDelete, resPath("never", shopA, ""), nil, http.StatusNotFound, "not_found")
		api.mustErr(http.MethodGet, resPath("never", shopA, ""), nil, http.StatusNotFound, "not_found")
	})

	t.Run("ReleaseIsIdempotentThenGone", func(t *testing.T) {
		api.tb = t
		body := cart("c-3", shopA, line(100, 1, 2, 1))
		res := api.must(http.MethodPost, "/v1/reservations", body, http.StatusCreated)
		if l := asSlice(res["lines"]); len(l) != 1 || num(l[0].(obj)["group_id"]) != 1 {
			t.Errorf("got lines %v, want group 1 (group 2 has no stock)", res["lines"])
		}
		for i := 0; i < 2; i++ {
			if got := api.must(http.MethodDelete, resPath("c-3", shopA, ""), nil, http.StatusOK); got["status"] != "released" {
				t.Errorf("got release #%d status %v, want released", i+1, got["status"])
			}
		}
		api.mustErr(http.MethodPost, resPath("c-3", shopA, "/claim"), nil, http.StatusGone, "gone")
		api.mustErr(http.MethodPost, "/v1/reservations", body, http.StatusConflict, "conflict")
		if got := api.must(http.MethodGet, resPath("c-3", shopA, ""), nil, http.StatusOK); got["status"] != "released" {
			t.Errorf("got status %v, want released", got["status"])
		}
		inv := api.must(http.MethodGet, inventoryPath(shopA, 100, 1), nil, http.StatusOK)
		if num(inv["available"]) != 3 {
			t.Errorf("got available %v after the release, want 3", inv["available"])
		}
	})

	t.Run("ExpiredHoldIsGoneAndReturnsToStock", func(t *testing.T) {
		api.tb = t
		body := cart("c-4", shopA, line(100, 1, 1))
		body["ttl_seconds"] = 1
		api.must(http.MethodPost, "/v1/reservations", body, http.StatusCreated)
		eventually(t, "c-4 to expire", func() bool {
			return api.must(http.MethodGet, resPath("c-4", shopA, ""), nil, http.StatusOK)["status"] == "expired"
		})
		api.mustErr(http.MethodPost, resPath("c-4", shopA, "/claim"), nil, http.StatusGone, "gone")
		api.mustErr(http.MethodDelete, resPath("c-4", shopA, ""), nil, http.StatusGone, "gone")
		eventually(t, "the reaper to return c-4's unit in both stores", func() bool {
			inv := api.must(http.MethodGet, inventoryPath(shopA, 100, 1), nil, http.StatusOK)
			stores, _ := inv["stores"].(obj)
			r, _ := stores["redis"].(obj)
			m, _ := stores["mysql"].(obj)
			return num(inv["available"]) == 3 && r != nil && m != nil && num(r["available"]) == 3 && num(m["available"]) == 3
		})
	})

	t.Run("UnknownShopIsNotFound", func(t *testing.T) {
		api.tb = t
		api.mustErr(http.MethodPost, "/v1/reservations", cart("c-5", unknownShop, line(100, 1, 1)), http.StatusNotFound, "unknown_shop")
		api.mustErr(http.MethodGet, inventoryPath(unknownShop, 100, 1), nil, http.StatusNotFound, "unknown_shop")
		api.mustErr(http.MethodPut, inventoryPath(unknownShop, 100, 1), obj{"on_hand": 3}, http.StatusNotFound, "unknown_shop")
	})

	t.Run("RedisPodShowsOnlyRedis", func(t *testing.T) {
		api.tb = t
		api.must(http.MethodPut, inventoryPath(shopB, 7, 1), obj{"on_hand": 4}, http.StatusOK)
		res := api.must(http.MethodPost, "/v1/reservations", cart("c-b", shopB, line(7, 1, 1)), http.StatusCreated)
		if res["pod"] != podB || res["source_of_truth"] != "redis" {
			t.Errorf("got pod %v source of truth %v, want %s and redis", res["pod"], res["source_of_truth"], podB)
		}
		inv := api.must(http.MethodGet, inventoryPath(shopB, 7, 1), nil, http.StatusOK)
		stores, _ := inv["stores"].(obj)
		if _, ok := stores["mysql"]; ok || stores["redis"] == nil {
			t.Errorf("got stores %v for a redis pod, want redis only", stores)
		}
	})

	t.Run("BadInputChangesNothing", func(t *testing.T) {
		api.tb = t
		before := api.must(http.MethodGet, inventoryPath(shopA, 100, 1), nil, http.StatusOK)
		big := `{"cart_token":"c-big","shop_id":1,"lines":[{"inventory_item_id":100,"quantity":1,"group_ids":[1]}],"pad":"` +
			strings.Repeat("x", 70<<10) + `"}`
		tests := []struct {
			name, method, path, contentType, body string
			status                                int
			code                                  string
		}{
			{"MalformedJSON", "POST", "/v1/reservations", "application/json", `{"cart_token":`, 400, "invalid_request"},
			{"UnknownField", "POST", "/v1/reservations", "application/json",
				`{"cart_token":"c-x","shop_id":1,"lines":[{"inventory_item_id":100,"quantity":1,"group_ids":[1]}],"coupon":1}`, 400, "invalid_request"},
			{"ZeroQuantity", "POST", "/v1/reservations", "application/json",
				`{"cart_token":"c-x","shop_id":1,"lines":[{"inventory_item_id":100,"quantity":0,"group_ids":[1]}]}`, 400, "invalid_request"},
			{"QuantityOverLimit", "POST", "/v1/reservations", "application/json",
				`{"cart_token":"c-x","shop_id":1,"lines":[{"inventory_item_id":100,"quantity":1001,"group_ids":[1]}]}`, 400, "invalid_request"},
			{"SameItemTwice", "POST", "/v1/reservations", "application/json",
				`{"cart_token":"c-x","shop_id":1,"lines":[{"inventory_item_id":100,"quantity":1,"group_ids":[1]},{"inventory_item_id":100,"quantity":1,"group_ids":[1]}]}`, 400, "invalid_request"},
			{"DuplicateGroups", "POST", "/v1/reservations", "application/json",
				`{"cart_token":"c-x","shop_id":1,"lines":[{"inventory_item_id":100,"quantity":1,"group_ids":[1,1]}]}`, 400, "invalid_request"},
			{"BadCartToken", "POST", "/v1/reservations", "application/json",
				`{"cart_token":"c x/","shop_id":1,"lines":[{"inventory_item_id":100,"quantity":1,"group_ids":[1]}]}`, 400, "invalid_request"},
			{"TTLOverAnHour", "POST", "/v1/reservations", "application/json",
				`{"cart_token":"c-x","shop_id":1,"ttl_seconds":3601,"lines":[{"inventory_item_id":100,"quantity":1,"group_ids":[1]}]}`, 400, "invalid_request"},
			{"NoContentType", "POST", "/v1/reservations", "",
				`{"cart_token":"c-x","shop_id":1,"lines":[{"inventory_item_id":100,"quantity":1,"group_ids":[1]}]}`, 415, "unsupported_media_type"},
			{"BodyTooLarge", "POST", "/v1/reservations", "application/json", big, 413, "payload_too_large"},
			{"NegativeOnHand", "PUT", inventoryPath(shopA, 100, 1), "application/json", `{"on_hand":-1}`, 400, "invalid_request"},
			{"OnHandOverLimit", "PUT", inventoryPath(shopA, 100, 1), "application/json", `{"on_hand":10000001}`, 400, "invalid_request"},
			{"NonNumericID", "PUT", "/v1/inventory/1/abc/1", "application/json", `{"on_hand":9}`, 400, "invalid_request"},
			{"ZeroShopQuery", "POST", "/v1/reservations/c-x/claim?shop_id=0", "", "", 400, "invalid_request"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				api.tb = t
				status, v := api.raw(tt.method, tt.path, tt.contentType, []byte(tt.body))
				checkErr(t, tt.name, status, v, tt.status, tt.code)
			})
		}
		api.tb = t
		after := api.must(http.MethodGet, inventoryPath(shopA, 100, 1), nil, http.StatusOK)
		if !reflect.DeepEqual(after, before) {
			t.Errorf("got inventory %v after bad requests, want it unchanged %v", after, before)
		}
		api.mustErr(http.MethodGet, resPath("c-x", shopA, ""), nil, http.StatusNotFound, "not_found")
		api.mustErr(http.MethodGet, resPath("c-big", shopA, ""), nil, http.StatusNotFound, "not_found")
	})

	t.Run("APITokenIsEnforcedWhenSet", func(t *testing.T) {
		guarded := MustRunMain(t, cfg, func(m *server.Main) { m.APIToken = "e2e-api-token" })
		anon := &apiClient{tb: t, base: guarded.CheckoutURL}
		anon.mustErr(http.MethodGet, inventoryPath(shopA, 100, 1), nil, http.StatusUnauthorized, "unauthorized")
		wrong := &apiClient{tb: t, base: guarded.CheckoutURL, token: "e2e-api-tokeN"}
		wrong.mustErr(http.MethodPost, "/v1/reservations", cart("c-6", shopA, line(100, 1, 1)), http.StatusUnauthorized, "unauthorized")
		guarded.Checkout.tb = t
		inv := guarded.Checkout.must(http.MethodGet, inventoryPath(shopA, 100, 1), nil, http.StatusOK)
		if num(inv["on_hand"]) != 3 {
			t.Errorf("got on_hand %v through the guarded instance, want 3", inv["on_hand"])
		}
		api.tb = t
		api.mustErr(http.MethodGet, resPath("c-6", shopA, ""), nil, http.StatusNotFound, "not_found")
	})
}

// podStatus GETs /admin/pods/{pod}.
func podStatus(c *apiClient, pod string) obj {
	c.tb.Helper()
	return c.must(http.MethodGet, "/admin/pods/"+pod, nil, http.StatusOK)
}

// enterShadow moves pod from redis to shadow and returns its status once
// the mode applies: the answer is 200 when the backfill finished within
// the controller's wait, else 202 with the copy running in the background
// (a loaded machine), after which the pod is polled until it is in shadow.
func enterShadow(c *apiClient, pod, reason string) obj {
	c.tb.Helper()
	got, v := c.call(http.MethodPut, "/admin/pods/"+pod+"/mode", obj{"mode": "shadow", "reason": reason})
	switch got {
	case http.StatusOK:
		return v
	case http.StatusAccepted:
		eventually(c.tb, "pod "+pod+" to finish its backfill and enter shadow", func() bool {
			v = podStatus(c, pod)
			return v["mode"] == "shadow" && v["transition"] == nil
		})
		return v
	}
	c.tb.Fatalf("PUT /admin/pods/%s/mode shadow: got status %d (%v), want 200 or 202", pod, got, v)
	return nil
}

// auditLogHas reports whether the audit log holds an entry of the action on
// pod whose reason starts with reason.
func auditLogHas(c *apiClient, action, pod, reason string) bool {
	c.tb.Helper()
	log := c.must(http.MethodGet, "/admin/audit-log?limit=100", nil, http.StatusOK)
	for _, e := range asSlice(log["entries"]) {
		e := e.(obj)
		// A forced change appends the gates it overrode to the reason.
		if r, _ := e["reason"].(string); e["action"] == action && e["pod"] == pod && strings.HasPrefix(r, reason) {
			return true
		}
	}
	return false
}

func TestE2EAdmin(t *testing.T) {
	cfg, rdb := MustConfig(t)
	in := MustRunMain(t, cfg)
	adm, api := in.Admin, in.Checkout
	podA, podB := cfg.Pods[0].Name, cfg.Pods[1].Name

	t.Run("TokenIsRequired", func(t *testing.T) {
		for _, tok := range []string{"", "not-the-token"} {
			c := &apiClient{tb: t, base: in.AdminURL, token: tok}
			for _, p := range []string{"/admin/pods", "/admin/killswitch", "/admin/report", "/admin/audit-log", "/admin/instances", "/metrics"} {
				c.mustErr(http.MethodGet, p, nil, http.StatusUnauthorized, "unauthorized")
			}
			c.mustErr(http.MethodPost, "/admin/killswitch", obj{"reason": "x"}, http.StatusUnauthorized, "unauthorized")
		}
		st := podStatus(adm, podA)
		if st["kill_switch"] != false {
			t.Errorf("got kill_switch %v after unauthorized POSTs, want false", st["kill_switch"])
		}
	})

	t.Run("HealthAndReadinessNeedNoToken", func(t *testing.T) {
		anon := &apiClient{tb: t, base: in.AdminURL}
		for _, p := range []string{"/healthz", "/readyz"} {
			status, body := anon.getText(p)
			if status != http.StatusOK {
				t.Errorf("got %s status %d (%s), want 200", p, status, body)
			}
			if strings.Contains(body, e2eAdminToken) || strings.Contains(body, "tcp(") {
				t.Errorf("got %s body %q, want no secret or DSN", p, body)
			}
		}
		_, body := anon.getText("/readyz")
		if !strings.Contains(body, "control_mysql") || !strings.Contains(body, podA) {
			t.Errorf("got /readyz %q, want per-dependency status", body)
		}
	})

	t.Run("PodsListsBoth", func(t *testing.T) {
		adm.tb = t
		got := adm.must(http.MethodGet, "/admin/pods", nil, http.StatusOK)
		pods := asSlice(got["pods"])
		if len(pods) != 2 {
			t.Fatalf("got %d pods, want 2", len(pods))
		}
		a := podStatus(adm, podA)
		if a["mode"] != "shadow" || a["source_of_truth"] != "redis" || a["shadow"] != "mysql" || a["shops"] != "1-9" {
			t.Errorf("got pod A %v, want shadow, source of truth redis, shadow mysql, shops 1-9", a)
		}
		if _, ok := a["gates"].(obj); !ok {
			t.Errorf("got pod A without gates: %v", a)
		}
		b := podStatus(adm, podB)
		if b["mode"] != "redis" || b["source_of_truth"] != "redis" || b["kill_switch"] != false {
			t.Errorf("got pod B %v, want redis mode and source of truth, kill switch off", b)
		}
		adm.mustErr(http.MethodGet, "/admin/pods/no-such-pod", nil, http.StatusNotFound, "unknown_pod")
	})

	t.Run("ModeChangeRedisToShadowBackfills", func(t *testing.T) {
		adm.tb, api.tb = t, t
		api.must(http.MethodPut, inventoryPath(shopB, 1, 1), obj{"on_hand": 10}, http.StatusOK)
		api.must(http.MethodPost, "/v1/reservations", cart("held-before-shadow", shopB, line(1, 3, 1)), http.StatusCreated)

		adm.mustErr(http.MethodPut, "/admin/pods/"+podB+"/mode", obj{"mode": "bogus", "reason": "x"}, http.StatusBadRequest, "invalid_request")
		adm.mustErr(http.MethodPut, "/admin/pods/"+podB+"/mode", obj{"mode": "shadow"}, http.StatusBadRequest, "invalid_request")
		adm.mustErr(http.MethodPut, "/admin/pods/nope/mode", obj{"mode": "shadow", "reason": "x"}, http.StatusNotFound, "unknown_pod")
		adm.mustErr(http.MethodPut, "/admin/pods/"+podB+"/mode", obj{"mode": "mysql", "reason": "skip a step", "force": true},
			http.StatusConflict, "transition_refused")

		got := enterShadow(adm, podB, "start shadowing B")
		if got["mode"] != "shadow" || got["source_of_truth"] != "redis" || got["shadow"] != "mysql" {
			t.Errorf("got %v, want shadow with source of truth redis", got)
		}
		inv := api.must(http.MethodGet, inventoryPath(shopB, 1, 1), nil, http.StatusOK)
		stores, _ := inv["stores"].(obj)
		m, _ := stores["mysql"].(obj)
		if m == nil || num(m["available"]) != 7 || num(m["reserved"]) != 3 {
			t.Errorf("got stores %v after backfill, want mysql available 7 reserved 3 like redis", stores)
		}
		a := adm.must(http.MethodPost, "/admin/pods/"+podB+"/audit", obj{"reason": "after backfill"}, http.StatusOK)
		if a["clean"] != true || a["pod"] != podB {
			t.Errorf("got audit %v after backfill, want clean", a)
		}
		if !auditLogHas(adm, "set_mode", podB, "start shadowing B") {
			t.Errorf("got no set_mode entry for %s in the audit log", podB)
		}
		// The hold taken before shadow began is claimable, once.
		api.must(http.MethodPost, resPath("held-before-shadow", shopB, "/claim"), nil, http.StatusOK)
		inv = api.must(http.MethodGet, inventoryPath(shopB, 1, 1), nil, http.StatusOK)
		if num(inv["on_hand"]) != 7 {
			t.Errorf("got on_hand %v after the claim, want 7", inv["on_hand"])
		}
	})

	t.Run("TrafficAuditsClean", func(t *testing.T) {
		adm.tb, api.tb = t, t
		api.must(http.MethodPut, inventoryPath(shopA, 200, 1), obj{"on_hand": 20}, http.StatusOK)
		for i := 0; i < 6; i++ {
			tok := fmt.Sprintf("t-%d", i)
			api.must(http.MethodPost, "/v1/reservations", cart(tok, shopA, line(200, 2, 1)), http.StatusCreated)
			switch i % 3 {
			case 0:
				api.must(http.MethodPost, resPath(tok, shopA, "/claim"), nil, http.StatusOK)
			case 1:
				api.must(http.MethodDelete, resPath(tok, shopA, ""), nil, http.StatusOK)
			}
		}
		var a obj
		eventually(t, "a clean audit of pod A after traffic", func() bool {
			a = adm.must(http.MethodPost, "/admin/pods/"+podA+"/audit", obj{"reason": "after traffic"}, http.StatusOK)
			return a["clean"] == true
		})
		if num(a["checked"]) < 1 {
			t.Errorf("got checked %v, want at least 1", a["checked"])
		}
		rep := adm.must(http.MethodGet, "/admin/report", nil, http.StatusOK)
		var found bool
		for _, r := range asSlice(rep["pods"]) {
			r := r.(obj)
			if r["pod"] != podA {
				continue
			}
			found = true
			if num(r["comparisons"]) < 1 || num(r["matches"]) < 1 || r["window"] == nil {
				t.Errorf("got report %v, want comparisons and matches after traffic", r)
			}
			divs, _ := r["divergences"].(obj)
			for _, k := range []string{"outcome_mismatch", "location_mismatch", "shadow_error", "shadow_timeout", "shadow_dropped", "state_drift"} {
				if _, ok := divs[k]; !ok {
					t.Errorf("got report divergences %v, want kind %s", divs, k)
				}
			}
			lat, _ := r["latency_ms"].(obj)
			if lat["redis"] == nil || lat["mysql"] == nil {
				t.Errorf("got latency_ms %v, want redis and mysql", lat)
			}
		}
		if !found {
			t.Errorf("got report %v, want pod %s", rep, podA)
		}
	})

	t.Run("ShadowToMySQLIsGated", func(t *testing.T) {
		adm.tb = t
		path := "/admin/pods/" + podA + "/mode"
		dry := adm.must(http.MethodPut, path, obj{"mode": "mysql", "reason": "try", "dry_run": true}, http.StatusOK)
		if dry["would_apply"] != false || !slices.Contains(strs(dry["failed_gates"]), "min_comparisons") {
			t.Errorf("got dry run %v, want would_apply false with min_comparisons failing", dry)
		}
		e := adm.mustErr(http.MethodPut, path, obj{"mode": "mysql", "reason": "promote"}, http.StatusConflict, "transition_refused")
		details, _ := e["details"].(obj)
		if !slices.Contains(strs(details["failed_gates"]), "min_comparisons") {
			t.Errorf("got details %v, want failed_gates with min_comparisons", e["details"])
		}
		if got := podStatus(adm, podA)["mode"]; got != "shadow" {
			t.Fatalf("got mode %v after a dry run and a refusal, want shadow", got)
		}
		dry = adm.must(http.MethodPut, path, obj{"mode": "mysql", "reason": "try forced", "dry_run": true, "force": true}, http.StatusOK)
		if dry["would_apply"] != true {
			t.Errorf("got forced dry run %v, want would_apply true", dry)
		}
		got := adm.must(http.MethodPut, path, obj{"mode": "mysql", "reason": "forced promotion", "force": true}, http.StatusOK)
		if got["mode"] != "mysql" || got["source_of_truth"] != "mysql" || got["shadow"] != "redis" {
			t.Errorf("got %v, want mysql with source of truth mysql and shadow redis", got)
		}
		if !auditLogHas(adm, "set_mode_forced", podA, "forced promotion") {
			t.Errorf("got no set_mode_forced entry for %s in the audit log", podA)
		}
		res := api.must(http.MethodPost, "/v1/reservations", cart("on-mysql", shopA, line(200, 1, 1)), http.StatusCreated)
		if res["source_of_truth"] != "mysql" {
			t.Errorf("got source of truth %v after promotion, want mysql", res["source_of_truth"])
		}
	})

	t.Run("KillSwitchFallsBackToRedis", func(t *testing.T) {
		adm.tb, api.tb = t, t
		adm.mustErr(http.MethodPost, "/admin/killswitch", obj{}, http.StatusBadRequest, "invalid_request")
		adm.mustErr(http.MethodPost, "/admin/killswitch", obj{"reason": "x", "pods": []string{"nope"}}, http.StatusNotFound, "unknown_pod")
		ks := adm.must(http.MethodPost, "/admin/killswitch", obj{"reason": "mysql p99 spike", "pods": []string{podA}}, http.StatusOK)
		if ks["engaged"] != true || !reflect.DeepEqual(strs(ks["pods"]), []string{podA}) || ks["reason"] != "mysql p99 spike" {
			t.Errorf("got %v, want engaged for %s only with the reason", ks, podA)
		}
		st := podStatus(adm, podA)
		if st["kill_switch"] != true || st["source_of_truth"] != "redis" || st["mode"] != "mysql" {
			t.Errorf("got %v, want kill switch on, source of truth redis, mode still mysql", st)
		}
		if podStatus(adm, podB)["kill_switch"] != false {
			t.Errorf("got pod B killed, want only pod A")
		}
		res := api.must(http.MethodPost, "/v1/reservations", cart("while-killed", shopA, line(200, 1, 1)), http.StatusCreated)
		if res["source_of_truth"] != "redis" {
			t.Errorf("got source of truth %v while killed, want redis", res["source_of_truth"])
		}
		// The hold taken on MySQL before the kill switch is still claimable.
		api.must(http.MethodPost, resPath("on-mysql", shopA, "/claim"), nil, http.StatusOK)

		ks = adm.must(http.MethodPost, "/admin/killswitch", obj{"reason": "fleet-wide"}, http.StatusOK)
		if got := strs(ks["pods"]); !slices.Contains(got, podA) || !slices.Contains(got, podB) {
			t.Errorf("got engaged pods %v, want both", got)
		}
		adm.mustErr(http.MethodPut, "/admin/pods/"+podB+"/mode", obj{"mode": "mysql", "reason": "x", "force": true},
			http.StatusConflict, "transition_refused")
		got := adm.must(http.MethodGet, "/admin/killswitch", nil, http.StatusOK)
		if got["engaged"] != true || len(strs(got["pods"])) != 2 || got["since"] == nil {
			t.Errorf("got GET killswitch %v, want engaged for both with since", got)
		}
		off := adm.must(http.MethodDelete, "/admin/killswitch", obj{"reason": "recovered"}, http.StatusOK)
		if off["engaged"] != false || len(strs(off["pods"])) != 0 {
			t.Errorf("got %v after DELETE, want disengaged", off)
		}
		if st := podStatus(adm, podA); st["kill_switch"] != false || st["source_of_truth"] != "mysql" {
			t.Errorf("got %v after DELETE, want kill switch off and source of truth mysql", st)
		}
		// The kill switch writes the audit log after the change, best effort.
		eventually(t, "killswitch_engage in the audit log", func() bool { return auditLogHas(adm, "killswitch_engage", podA, "mysql p99 spike") })
		eventually(t, "killswitch_disengage in the audit log", func() bool { return auditLogHas(adm, "killswitch_disengage", podA, "recovered") })
	})

	t.Run("DriftIsFoundConvergedThenResyncedFromMySQL", func(t *testing.T) {
		adm.tb, api.tb = t, t
		// Make Redis lie about one position of pod A, behind tandem's back:
		// the audit finds it and recounts the position from the ledger.
		key := fmt.Sprintf("%s{%d}:item:200:1", cfg.Pods[0].RedisPrefix, shopA)
		if err := rdb.HIncrBy(context.Background(), key, "available", -1).Err(); err != nil {
			t.Fatal(err)
		}
		a := adm.must(http.MethodPost, "/admin/pods/"+podA+"/audit", obj{"reason": "look for drift"}, http.StatusOK)
		if len(asSlice(a["found"])) != 1 || a["clean"] != true || num(a["recounted_positions"]) != 1 {
			t.Fatalf("got audit %v, want one position found, recounted, then clean", a)
		}
		d := asSlice(a["found"])[0].(obj)
		if num(d["inventory_item_id"]) != 200 || num(d["redis_available"])+1 != num(d["mysql_available"]) {
			t.Errorf("got found %v, want item 200 with redis one below mysql", d)
		}
		// A disaster the sweep does not fix (a counter gone) stays for
		// resync: the audit reports it.
		if err := rdb.Del(context.Background(), key).Err(); err != nil {
			t.Fatal(err)
		}
		a = adm.must(http.MethodPost, "/admin/pods/"+podA+"/audit", obj{"reason": "look for drift"}, http.StatusOK)
		if a["clean"] != false || len(asSlice(a["drifted"])) != 1 {
			t.Fatalf("got audit %v with a Redis counter gone, want one drifted position", a)
		}
		adm.mustErr(http.MethodPost, "/admin/pods/"+podA+"/resync", obj{"reason": "x", "from": "redis"}, http.StatusBadRequest, "invalid_request")
		adm.mustErr(http.MethodPost, "/admin/pods/"+podB+"/resync", obj{"reason": "x", "from": "mysql"}, http.StatusConflict, "transition_refused")
		rs := adm.must(http.MethodPost, "/admin/pods/"+podA+"/resync", obj{"reason": "fix drift", "from": "mysql"}, http.StatusOK)
		if rs["pod"] != podA || num(rs["keys_rewritten"]) < 1 {
			t.Errorf("got resync %v, want keys rewritten for %s", rs, podA)
		}
		a = adm.must(http.MethodPost, "/admin/pods/"+podA+"/audit", obj{"reason": "after resync"}, http.StatusOK)
		if a["clean"] != true {
			t.Errorf("got audit %v after resync, want clean", a)
		}
		if !auditLogHas(adm, "resync", podA, "fix drift") {
			t.Errorf("got no resync entry in the audit log")
		}
	})

	t.Run("DivergencesListsNewestFirst", func(t *testing.T) {
		adm.tb = t
		got := adm.must(http.MethodGet, "/admin/divergences?pod="+podA+"&limit=100", nil, http.StatusOK)
		divs := asSlice(got["divergences"])
		if divs == nil {
			t.Fatalf("got %v, want a divergences list", got)
		}
		for i, d := range divs {
			d := d.(obj)
			if d["pod"] != podA {
				t.Errorf("got divergence of pod %v with ?pod=%s", d["pod"], podA)
			}
			if i > 0 && num(d["id"]) > num(divs[i-1].(obj)["id"]) {
				t.Errorf("got ids out of order (%v after %v), want newest first", d["id"], divs[i-1].(obj)["id"])
			}
		}
		adm.mustErr(http.MethodGet, "/admin/divergences?limit=0", nil, http.StatusBadRequest, "invalid_request")
		adm.mustErr(http.MethodGet, "/admin/divergences?kind=bogus", nil, http.StatusBadRequest, "invalid_request")
	})

	t.Run("AuditLogNamesActors", func(t *testing.T) {
		adm.tb = t
		log := adm.must(http.MethodGet, "/admin/audit-log?limit=3", nil, http.StatusOK)
		es := asSlice(log["entries"])
		if len(es) != 3 {
			t.Fatalf("got %d entries with limit=3, want 3", len(es))
		}
		for _, e := range es {
			e := e.(obj)
			if e["actor"] != "e2e-tester" || e["at"] == nil || e["action"] == "" {
				t.Errorf("got entry %v, want actor e2e-tester (X-Actor), at and action", e)
			}
		}
		body := obj{"reason": "explicit actor", "actor": "dana"}
		adm.must(http.MethodPost, "/admin/pods/"+podB+"/audit", body, http.StatusOK)
		first := asSlice(adm.must(http.MethodGet, "/admin/audit-log?limit=1", nil, http.StatusOK)["entries"])[0].(obj)
		if first["actor"] != "dana" || first["reason"] != "explicit actor" {
			t.Errorf("got newest entry %v, want actor dana", first)
		}
	})

	t.Run("InstancesShowsThisOne", func(t *testing.T) {
		adm.tb = t
		got := adm.must(http.MethodGet, "/admin/instances", nil, http.StatusOK)
		var found bool
		for _, i := range asSlice(got["instances"]) {
			i := i.(obj)
			if i["id"] == in.Main.InstanceID {
				found = true
				if i["stale"] != false || num(i["control_version"]) < 1 || i["started_at"] == nil || i["last_seen"] == nil {
					t.Errorf("got instance %v, want fresh with a control version", i)
				}
			}
		}
		if !found {
			t.Errorf("got instances %v, want %s", got, in.Main.InstanceID)
		}
	})

	t.Run("MetricsNeedTheToken", func(t *testing.T) {
		adm.tb = t
		status, body := adm.getText("/metrics")
		if status != http.StatusOK || !strings.Contains(body, "tandem_pod_mode{") {
			t.Errorf("got /metrics %d with %d bytes, want 200 with tandem_pod_mode", status, len(body))
		}
	})
}

// TestConfigRedisPrefixes covers the keys these tests rely on for
// isolation: control.redis_prefix and pods[].redis_prefix.
func TestConfigRedisPrefixes(t *testing.T) {
	const base = "control:\n  mysql_dsn: \"root@tcp(127.0.0.1:3306)/c\"\n  redis_addr: 127.0.0.1:6379\n%s" +
		"pods:\n  - name: pod-a\n    shops: [1]\n    mysql_dsn: \"root@tcp(127.0.0.1:3306)/a\"\n    redis_addr: 127.0.0.1:6379\n%s"
	t.Run("DefaultsKeepTheKeysOfBefore", func(t *testing.T) {
		cfg, err := server.ParseConfig(strings.NewReader(fmt.Sprintf(base, "", "")))
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Control.RedisPrefix != "tandem:control:" || cfg.Pods[0].RedisPrefix != "tandem:pod-a:" {
			t.Errorf("got prefixes %q and %q, want tandem:control: and tandem:pod-a:", cfg.Control.RedisPrefix, cfg.Pods[0].RedisPrefix)
		}
	})
	t.Run("SetPrefixesAreKept", func(t *testing.T) {
		cfg, err := server.ParseConfig(strings.NewReader(fmt.Sprintf(base, "  redis_prefix: \"fleet2:ctl:\"\n", "    redis_prefix: \"fleet2:a:\"\n")))
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Control.RedisPrefix != "fleet2:ctl:" || cfg.Pods[0].RedisPrefix != "fleet2:a:" {
			t.Errorf("got prefixes %q and %q, want fleet2:ctl: and fleet2:a:", cfg.Control.RedisPrefix, cfg.Pods[0].RedisPrefix)
		}
	})
	t.Run("PrefixWithoutColonIsRefused", func(t *testing.T) {
		for _, in := range []string{fmt.Sprintf(base, "  redis_prefix: \"x\"\n", ""), fmt.Sprintf(base, "", "    redis_prefix: \"x\"\n")} {
			if _, err := server.ParseConfig(strings.NewReader(in)); err == nil || !strings.Contains(err.Error(), "redis_prefix") {
				t.Errorf("got %v, want an error naming redis_prefix", err)
			}
		}
	})
}
