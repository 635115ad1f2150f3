package web_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/web"
)

// at is the fixed time the fakes answer with.
var at = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)

// calls records the calls of a fake service.
type calls struct {
	mu   sync.Mutex
	list []string
	args []any
}

func (c *calls) record(name string, arg any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.list = append(c.list, name)
	c.args = append(c.args, arg)
}

// Names returns the methods called so far, in order.
func (c *calls) Names() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.list...)
}

// Last returns the argument of the last call.
func (c *calls) Last() any {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.args) == 0 {
		return nil
	}
	return c.args[len(c.args)-1]
}

// cartCall is the argument of Claim, Release and Get.
type cartCall struct {
	ShopID    int64
	CartToken string
}

// onHandCall is the argument of SetOnHand.
type onHandCall struct {
	Key    tandem.Key
	OnHand int64
}

// fakeCheckout is a CheckoutService that records its calls and answers
// Err when set, else a plausible result.
type fakeCheckout struct {
	calls
	Err      error
	Replayed bool
	// Block, when set, makes Reserve wait until it is closed; Entered
	// receives once per Reserve that started.
	Block   chan struct{}
	Entered chan struct{}
	// Panic makes every method panic.
	Panic bool
}

var _ tandem.CheckoutService = (*fakeCheckout)(nil)

func (f *fakeCheckout) res(shopID int64, token string, status tandem.Status, lines []tandem.Line) *tandem.Reservation {
	return &tandem.Reservation{
		CartToken: token, ShopID: shopID, Status: status, ExpiresAt: at.Add(10 * time.Minute),
		Lines: lines, Replayed: f.Replayed, Pod: "pod-a", SourceOfTruth: tandem.StoreRedis,
	}
}

var fakeLines = []tandem.Line{{ItemID: 100, Quantity: 2, GroupID: 1}}

func (f *fakeCheckout) Reserve(ctx context.Context, req tandem.ReserveRequest) (*tandem.Reservation, error) {
	f.record("Reserve", req)
	if f.Entered != nil {
		f.Entered <- struct{}{}
	}
	if f.Block != nil {
		<-f.Block
	}
	if f.Panic {
		panic("fake reserve panics")
	}
	if f.Err != nil {
		return nil, f.Err
	}
	lines := make([]tandem.Line, len(req.Lines))
	for i, l := range req.Lines {
		lines[i] = tandem.Line{ItemID: l.ItemID, Quantity: l.Quantity, GroupID: l.GroupIDs[0]}
	}
	return f.res(req.ShopID, req.CartToken, tandem.StatusReserved, lines), nil
}

func (f *fakeCheckout) cart(name string, status tandem.Status, shopID int64, token string) (*tandem.Reservation, error) {
	f.record(name, cartCall{ShopID: shopID, CartToken: token})
	if f.Panic {
		panic("fake " + name + " panics")
	}
	if f.Err != nil {
		return nil, f.Err
	}
	return f.res(shopID, token, status, fakeLines), nil
}

func (f *fakeCheckout) Claim(ctx context.Context, shopID int64, token string) (*tandem.Reservation, error) {
	return f.cart("Claim", tandem.StatusClaimed, shopID, token)
}

func (f *fakeCheckout) Release(ctx context.Context, shopID int64, token string) (*tandem.Reservation, error) {
	return f.cart("Release", tandem.StatusReleased, shopID, token)
}

func (f *fakeCheckout) Get(ctx context.Context, shopID int64, token string) (*tandem.Reservation, error) {
	return f.cart("Get", tandem.StatusReserved, shopID, token)
}

func fakeInventory(k tandem.Key, onHand int64) *tandem.Inventory {
	return &tandem.Inventory{
		ShopID: k.ShopID, ItemID: k.ItemID, GroupID: k.GroupID, OnHand: onHand, Reserved: 2,
		Available: onHand - 2, Pod: "pod-a", SourceOfTruth: tandem.StoreRedis,
		Stores: map[string]tandem.StoreCounters{
			tandem.StoreRedis: {Available: onHand - 2, Reserved: 2},
			tandem.StoreMySQL: {Available: onHand - 2, Reserved: 2},
		},
	}
}

func (f *fakeCheckout) SetOnHand(ctx context.Context, k tandem.Key, onHand int64) (*tandem.Inventory, error) {
	f.record("SetOnHand", onHandCall{Key: k, OnHand: onHand})
	if f.Err != nil {
		return nil, f.Err
	}
	return fakeInventory(k, onHand), nil
}

func (f *fakeCheckout) Inventory(ctx context.Context, k tandem.Key) (*tandem.Inventory, error) {
	f.record("Inventory", k)
	if f.Err != nil {
		return nil, f.Err
	}
	return fakeInventory(k, 50), nil
}

// podCall is the argument of the per-pod admin changes.
type podCall struct {
	Pod    string
	Change any
}

// fakeAdmin is an AdminService that records its calls and answers Err
// when set, else a plausible result.
type fakeAdmin struct {
	calls
	Err error
	// Divs, when set, is what Divergences answers.
	Divs []tandem.Divergence
}

var _ tandem.AdminService = (*fakeAdmin)(nil)

func fakePod(name string, mode tandem.Mode) tandem.PodStatus {
	return tandem.PodStatus{
		Pod: name, Mode: mode, SourceOfTruth: mode.SourceOfTruth(), Shadow: mode.Shadow(),
		Shops: "1-3", UpdatedAt: at,
		Gates: tandem.Gates{Comparisons: 1200, LastAuditClean: true, Passing: true},
	}
}

func (f *fakeAdmin) Pods(ctx context.Context) ([]tandem.PodStatus, error) {
	f.record("Pods", nil)
	if f.Err != nil {
		return nil, f.Err
	}
	return []tandem.PodStatus{fakePod("pod-a", tandem.ModeShadow), fakePod("pod-b", tandem.ModeRedis)}, nil
}

func (f *fakeAdmin) Pod(ctx context.Context, pod string) (*tandem.PodStatus, error) {
	f.record("Pod", pod)
	if f.Err != nil {
		return nil, f.Err
	}
	p := fakePod(pod, tandem.ModeShadow)
	return &p, nil
}

func (f *fakeAdmin) SetMode(ctx context.Context, pod string, ch tandem.ModeChange) (*tandem.PodStatus, *tandem.DryRun, error) {
	f.record("SetMode", podCall{Pod: pod, Change: ch})
	if f.Err != nil {
		return nil, nil, f.Err
	}
	if ch.DryRun {
		return nil, &tandem.DryRun{WouldApply: false, FailedGates: []string{"min_comparisons"}}, nil
	}
	p := fakePod(pod, ch.Mode)
	return &p, nil, nil
}

func (f *fakeAdmin) killSwitch(name string, pods []string, ch tandem.Change, engaged bool) (*tandem.KillSwitchState, error) {
	f.record(name, podCall{Pod: strings.Join(pods, ","), Change: ch})
	if f.Err != nil {
		return nil, f.Err
	}
	st := &tandem.KillSwitchState{Engaged: engaged, Reason: ch.Reason}
	if engaged {
		since := at
		st.Since, st.Pods = &since, []string{"pod-a"}
		st.Refused = []tandem.Refusal{{Pod: "pod-c", Reason: "mysql_only cannot fall back"}}
	}
	return st, nil
}

func (f *fakeAdmin) EngageKillSwitch(ctx context.Context, pods []string, ch tandem.Change) (*tandem.KillSwitchState, error) {
	return f.killSwitch("EngageKillSwitch", pods, ch, true)
}

func (f *fakeAdmin) DisengageKillSwitch(ctx context.Context, pods []string, ch tandem.Change) (*tandem.KillSwitchState, error) {
	return f.killSwitch("DisengageKillSwitch", pods, ch, false)
}

func (f *fakeAdmin) KillSwitch(ctx context.Context) (*tandem.KillSwitchState, error) {
	f.record("KillSwitch", nil)
	if f.Err != nil {
		return nil, f.Err
	}
	return &tandem.KillSwitchState{}, nil
}

func (f *fakeAdmin) Divergences(ctx context.Context, flt tandem.DivergenceFilter) ([]tandem.Divergence, error) {
	f.record("Divergences", flt)
	if f.Err != nil {
		return nil, f.Err
	}
	if f.Divs != nil {
		return f.Divs, nil
	}
	return []tandem.Divergence{{
		ID: 17, At: at, Pod: "pod-a", Op: tandem.OpReserve, Kind: tandem.KindOutcomeMismatch,
		CartToken: "c-9", ShopID: 1, SourceOfTruth: tandem.StoreRedis,
		Primary: tandem.Outcome{Store: tandem.StoreRedis, Status: "reserved"},
		Shadow:  tandem.Outcome{Store: tandem.StoreMySQL, Status: tandem.EINSUFFICIENT},
	}}, nil
}

func (f *fakeAdmin) Report(ctx context.Context) ([]tandem.Report, error) {
	f.record("Report", nil)
	if f.Err != nil {
		return nil, f.Err
	}
	return []tandem.Report{{Pod: "pod-a", Mode: tandem.ModeShadow, Window: "15m", Comparisons: 10, Matches: 10,
		Divergences: map[tandem.DivergenceKind]int64{tandem.KindOutcomeMismatch: 0}}}, nil
}

func (f *fakeAdmin) Audit(ctx context.Context, pod string, ch tandem.Change) (*tandem.Audit, error) {
	f.record("Audit", podCall{Pod: pod, Change: ch})
	if f.Err != nil {
		return nil, f.Err
	}
	return &tandem.Audit{Pod: pod, At: at, Checked: 120, Clean: true}, nil
}

func (f *fakeAdmin) Resync(ctx context.Context, pod, from string, ch tandem.Change) (int, error) {
	f.record("Resync", podCall{Pod: pod + " from " + from, Change: ch})
	if f.Err != nil {
		return 0, f.Err
	}
	return 42, nil
}

func (f *fakeAdmin) AuditLog(ctx context.Context, limit int) ([]tandem.AuditLogEntry, error) {
	f.record("AuditLog", limit)
	if f.Err != nil {
		return nil, f.Err
	}
	return []tandem.AuditLogEntry{{At: at, Actor: "ops", Action: "set_mode", Pod: "pod-a",
		Reason: "rollout", Before: "redis", After: "shadow"}}, nil
}

func (f *fakeAdmin) Instances(ctx context.Context) ([]tandem.Instance, error) {
	f.record("Instances", nil)
	if f.Err != nil {
		return nil, f.Err
	}
	return []tandem.Instance{{ID: "i-1", Addr: "127.0.0.1:8080", StartedAt: at, LastSeen: at, ControlVersion: 7}}, nil
}

// Test tokens.
const (
	adminToken = "s3cret-admin-token"
	apiToken   = "s3cret-api-token"
)

// testDashboard is a tiny stand-in for the embedded dashboard.
var testDashboard = fstest.MapFS{
	"index.html": {Data: []byte("<!doctype html><title>tandem</title><script src=\"app.js\"></script>")},
	"app.js":     {Data: []byte("console.log('tandem')")},
}

// newCheckout returns a checkout handler over a fresh fake.
func newCheckout(tb testing.TB, configure ...func(*web.Server)) (http.Handler, *fakeCheckout) {
	tb.Helper()
	f := &fakeCheckout{}
	s := &web.Server{Checkout: f}
	for _, c := range configure {
		c(s)
	}
	return s.Handler(), f
}

// newAdmin returns an admin handler over a fresh fake.
func newAdmin(tb testing.TB, configure ...func(*web.AdminServer)) (http.Handler, *fakeAdmin) {
	tb.Helper()
	f := &fakeAdmin{}
	s := &web.AdminServer{Admin: f, Token: adminToken, Dashboard: testDashboard}
	for _, c := range configure {
		c(s)
	}
	return s.Handler(), f
}

// req is one test request.
type req struct {
	method, target, body string
	// contentType defaults to application/json when there is a body.
	contentType string
	// token, when set, is sent as a bearer token.
	token  string
	header map[string]string
	// anyStatus: the fake answers with a status the route's document need
	// not list; the answer is still checked to be the error JSON.
	anyStatus bool
}

// do serves rq with h.
func do(tb testing.TB, h http.Handler, rq req) *httptest.ResponseRecorder {
	tb.Helper()
	var body io.Reader
	if rq.body != "" {
		body = strings.NewReader(rq.body)
	}
	r := httptest.NewRequest(rq.method, rq.target, body)
	if rq.body != "" {
		ct := rq.contentType
		if ct == "" {
			ct = "application/json"
		}
		r.Header.Set("Content-Type", ct)
	} else if rq.contentType != "" {
		r.Header.Set("Content-Type", rq.contentType)
	}
	if rq.token != "" {
		r.Header.Set("Authorization", "Bearer "+rq.token)
	}
	for k, v := range rq.header {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	checkOpenAPI(tb, r, rq, w)
	return w
}

// errorJSON is the error answer of both APIs.
type errorJSON struct {
	Error struct {
		Code    string         `json:"code"`
		Message string         `json:"message"`
		Details map[string]any `json:"details"`
	} `json:"error"`
}

// mustError decodes an error answer and checks its status and code.
func mustError(tb testing.TB, w *httptest.ResponseRecorder, status int, code string) errorJSON {
	tb.Helper()
	var e errorJSON
	if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil {
		tb.Fatalf("error body %q: %v", w.Body.String(), err)
	}
	if w.Code != status || e.Error.Code != code {
		tb.Fatalf("got %d %q, want %d %q (body %s)", w.Code, e.Error.Code, status, code, w.Body.String())
	}
	if e.Error.Message == "" {
		tb.Fatalf("got an empty error message, want one (body %s)", w.Body.String())
	}
	if e.Error.Details == nil {
		tb.Fatalf("got no details object, want {} at least (body %s)", w.Body.String())
	}
	if ct := w.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		tb.Fatalf("got Content-Type %q, want application/json", ct)
	}
	return e
}

// mustJSON checks the status and decodes a 2xx answer into a map.
func mustJSON(tb testing.TB, w *httptest.ResponseRecorder, status int) map[string]any {
	tb.Helper()
	if w.Code != status {
		tb.Fatalf("got status %d, want %d (body %s)", w.Code, status, w.Body.String())
	}
	var m map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &m); err != nil {
		tb.Fatalf("body %q: %v", w.Body.String(), err)
	}
	return m
}

// defaultActor is the actor of a change that names none, sent with the
// admin token from httptest's client address.
const defaultActor = "admin-token@192.0.2.1"
