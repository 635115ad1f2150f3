package dashboard_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/internal/browsertest"
	"github.com/tandemhq/tandem/internal/testenv"
	"github.com/tandemhq/tandem/web/dashboard"
)

const (
	adminToken = "s3cret-admin-token"
)

func TestFS(t *testing.T) {
	t.Run("HoldsTheThreeAssets", func(t *testing.T) {
		for _, name := range []string{"index.html", "app.js", "style.css"} {
			b, err := fs.ReadFile(dashboard.FS, name)
			if err != nil {
				t.Fatalf("read %s: %v", name, err)
			}
			if len(b) == 0 {
				t.Errorf("got empty %s, want content", name)
			}
		}
	})
	t.Run("LoadsNothingFromElsewhere", func(t *testing.T) {
		for _, name := range []string{"index.html", "app.js", "style.css"} {
			b, _ := fs.ReadFile(dashboard.FS, name)
			for _, bad := range []string{"http://", "https://", "//cdn", "document.cookie", "localStorage"} {
				if strings.Contains(string(b), bad) {
					t.Errorf("got %q in %s, want none (no CDN, token only in sessionStorage)", bad, name)
				}
			}
		}
	})
}

// TestDashboard drives the page in headless Chromium against a fake admin
// API: token entry, a mode change through its dry run, and the kill switch.
func TestDashboard(t *testing.T) {
	testenv.RequireIntegration(t)

	api := newFakeAdmin(adminToken)
	srv := newServer(t, api)

	b := browsertest.MustOpen(t, srv.URL+"/")
	podA := `[data-pod="pod-a"]`

	steps := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"WrongTokenShowsErrorBanner", func(t *testing.T) {
			b.T = t
			b.Do(chromedp.WaitVisible(chromedp.CSS("#token-input")))
			b.Do(chromedp.SendKeys(chromedp.CSS("#token-input"), "wrong-token"), chromedp.Click(chromedp.CSS("#token-save")))
			b.WaitFor(`!document.querySelector("#error-banner").hidden`)
			if got := b.Text("#error-banner"); !strings.Contains(got, "unauthorized") || !strings.Contains(got, "bad admin token") {
				t.Errorf("got error banner %q, want the code unauthorized and the message", got)
			}
		}},
		{"TokenShowsPods", func(t *testing.T) {
			b.T = t
			b.Do(chromedp.SendKeys(chromedp.CSS("#actor-input"), "carol"),
				chromedp.SendKeys(chromedp.CSS("#token-input"), adminToken), chromedp.Click(chromedp.CSS("#token-save")))
			b.WaitFor(`document.querySelector('[data-pod="pod-a"] [data-field="mode"]')?.textContent === "redis"`)
			if got := b.Text(podA + ` [data-field="kill_switch"]`); got != "off" {
				t.Errorf("got pod-a kill switch %q, want off", got)
			}
			if got := b.Text(`[data-pod="pod-b"] [data-field="mode"]`); got != "shadow" {
				t.Errorf("got pod-b mode %q, want shadow", got)
			}
			b.WaitFor(`document.querySelector("#error-banner").hidden`)
			b.WaitFor(`document.querySelectorAll("#divergences tbody tr").length === 1`)
			if got := b.Text("#divergences"); !strings.Contains(got, "insufficient_inventory") || !strings.Contains(got, `"store": "mysql"`) {
				t.Errorf("got divergences %q, want both outcomes as JSON", got)
			}
			if got := b.Text("#report"); !strings.Contains(got, "1.20 ms / 4.50 ms") {
				t.Errorf("got report %q, want redis latency p50 / p99", got)
			}
			if got := b.Text("#instances"); !strings.Contains(got, "i-1") || !strings.Contains(got, "stale") {
				t.Errorf("got instances %q, want i-1 and the stale one", got)
			}
			b.WaitFor(`document.querySelector("#plan-state").dataset.phase === "running"`)
			if got, want := b.Text("#plan-state"), "running: 1 of 2 pods promoted (order pod-b, pod-a); soaking pod-b"; got != want {
				t.Errorf("got plan line %q, want %q", got, want)
			}
			if got := browsertest.Eval[string](b, `sessionStorage.getItem("tandem.adminToken")`); got != adminToken {
				t.Errorf("got sessionStorage token %q, want %q", got, adminToken)
			}
			if got := browsertest.Eval[string](b, `document.cookie + location.href`); strings.Contains(got, adminToken) {
				t.Errorf("got the token in a cookie or the URL: %q", got)
			}
		}},
		{"ModeChangeRunsDryRunThenApplies", func(t *testing.T) {
			b.T = t
			b.Do(chromedp.Click(chromedp.CSS(podA + ` [data-action="mode"]`)))
			b.WaitFor(`document.querySelector("#dryrun-result").dataset.state === "would-apply"`)
			if got := b.Text("#dryrun-result"); !strings.Contains(got, "would apply") || !strings.Contains(got, "Failed gates: none") {
				t.Errorf("got dry run %q, want would apply with no failed gates", got)
			}
			if got := api.podMode("pod-a"); got != tandem.ModeRedis {
				t.Fatalf("got pod-a mode %q after the dry run, want redis (a dry run changes nothing)", got)
			}
			b.Do(chromedp.SendKeys(chromedp.CSS("#confirm-reason"), "start shadowing pod-a"), chromedp.Click(chromedp.CSS("#confirm-ok")))
			b.WaitFor(`document.querySelector('[data-pod="pod-a"] [data-field="mode"]')?.textContent === "shadow"`)
			b.WaitFor(`!document.querySelector("#confirm-dialog").open`)

			puts := api.requestsTo(http.MethodPut, "/admin/pods/pod-a/mode")
			if len(puts) < 2 {
				t.Fatalf("got %d PUTs of pod-a's mode, want a dry run then the change", len(puts))
			}
			if first := puts[0].body; first["dry_run"] != true || first["mode"] != "shadow" {
				t.Errorf("got first PUT %v, want a dry run to shadow", first)
			}
			last := puts[len(puts)-1].body
			if last["dry_run"] == true || last["mode"] != "shadow" || last["reason"] != "start shadowing pod-a" {
				t.Errorf("got last PUT %v, want mode shadow with the reason and no dry run", last)
			}
			if got := puts[len(puts)-1].actor; got != "carol" {
				t.Errorf("got X-Actor %q, want carol (the name entered)", got)
			}
			b.WaitFor(`document.querySelector("#audit-log").textContent.includes("carol")`)
		}},
		{"RefusedModeChangeShowsFailedGates", func(t *testing.T) {
			b.T = t
			b.Do(chromedp.Click(chromedp.CSS(`[data-pod="pod-b"] [data-action="mode"]`)))
			b.WaitFor(`document.querySelector("#dryrun-result").dataset.state === "would-refuse"`)
			if got := b.Text("#dryrun-result"); !strings.Contains(got, "min_comparisons") {
				t.Errorf("got dry run %q, want the failed gate min_comparisons", got)
			}
			if got := browsertest.Eval[bool](b, `document.querySelector("#confirm-ok").disabled`); !got {
				t.Errorf("got Apply enabled for a refused dry run without force, want disabled")
			}
			b.Do(chromedp.Click(chromedp.CSS("#confirm-cancel")))
			b.WaitFor(`!document.querySelector("#confirm-dialog").open`)
			if got := api.podMode("pod-b"); got != tandem.ModeShadow {
				t.Errorf("got pod-b mode %q, want shadow (nothing applied)", got)
			}
		}},
		{"KillSwitchEngagesAfterConfirmation", func(t *testing.T) {
			b.T = t
			b.Do(chromedp.Click(chromedp.CSS("#killswitch-engage")))
			b.WaitFor(`document.querySelector("#confirm-dialog").open`)
			if api.killSwitch().Engaged {
				t.Fatalf("got the kill switch engaged before confirmation, want it off")
			}
			b.Do(chromedp.SendKeys(chromedp.CSS("#confirm-reason"), "checkout errors"), chromedp.Click(chromedp.CSS("#confirm-ok")))
			b.WaitFor(`document.querySelector("#killswitch-state").dataset.engaged === "true"`)
			if got := b.Text("#killswitch-state"); !strings.Contains(got, "Engaged") || !strings.Contains(got, "pod-a") {
				t.Errorf("got kill switch state %q, want engaged for pod-a", got)
			}
			b.WaitFor(`document.querySelector('[data-pod="pod-a"] [data-field="kill_switch"]').textContent === "engaged"`)
			posts := api.requestsTo(http.MethodPost, "/admin/killswitch")
			if len(posts) != 1 {
				t.Fatalf("got %d POSTs of the kill switch, want 1", len(posts))
			}
			if got := posts[0].body; got["reason"] != "checkout errors" || got["pods"] != nil {
				t.Errorf("got kill switch body %v, want the reason and no pods (all pods)", got)
			}
		}},
		{"EveryAPICallCarriesTheToken", func(t *testing.T) {
			b.T = t
			reqs := api.allRequests()
			if len(reqs) == 0 {
				t.Fatal("got no admin API request, want some")
			}
			for _, r := range reqs {
				if strings.Contains(r.rawQuery, adminToken) {
					t.Errorf("got the token in the query of %s %s", r.method, r.path)
				}
				if r.auth != "Bearer "+adminToken && r.auth != "Bearer wrong-token" {
					t.Errorf("got Authorization %q on %s %s, want the bearer token", r.auth, r.method, r.path)
				}
			}
		}},
		{"Screenshot", func(t *testing.T) {
			b.T = t
			png := browsertest.Run(b, chromedp.FullScreenshot(100))
			dir := filepath.Join("..", "..", "artifacts")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "dashboard.png")
			if err := os.WriteFile(path, png, 0o644); err != nil {
				t.Fatal(err)
			}
			abs, _ := filepath.Abs(path)
			t.Logf("dashboard screenshot: %s", abs)
		}},
	}
	for _, s := range steps {
		if !t.Run(s.name, s.run) {
			return // later steps build on this one
		}
	}
}

// newServer serves the embedded dashboard at / and the fake admin API under
// /admin/ on 127.0.0.1.
func newServer(t *testing.T, api *fakeAdmin) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("/admin/", api.handler())
	mux.Handle("/", http.FileServerFS(dashboard.FS))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: mux}}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// fakeAdmin is an in-memory admin API with the endpoints the page calls.
type fakeAdmin struct {
	token string

	mu       sync.Mutex
	pods     []*tandem.PodStatus
	ks       tandem.KillSwitchState
	log      []tandem.AuditLogEntry
	requests []request
}

type request struct {
	method, path, rawQuery, auth, actor string
	body                                map[string]any
}

func newFakeAdmin(token string) *fakeAdmin {
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	return &fakeAdmin{
		token: token,
		pods: []*tandem.PodStatus{
			{Pod: "pod-a", Mode: tandem.ModeRedis, SourceOfTruth: "redis", Shops: "1-3", UpdatedAt: now,
				Gates: tandem.Gates{FailedGates: []string{"min_comparisons", "audit_clean"}}},
			{Pod: "pod-b", Mode: tandem.ModeShadow, SourceOfTruth: "redis", Shadow: "mysql", Shops: "4-9", UpdatedAt: now,
				Gates: tandem.Gates{Comparisons: 420, DivergenceRate: 0.0024, LastAuditClean: true, FailedGates: []string{"min_comparisons"}}},
		},
	}
}

func (f *fakeAdmin) podMode(name string) tandem.Mode {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.pods {
		if p.Pod == name {
			return p.Mode
		}
	}
	return ""
}

func (f *fakeAdmin) killSwitch() tandem.KillSwitchState {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ks
}

func (f *fakeAdmin) allRequests() []request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.requests)
}

func (f *fakeAdmin) requestsTo(method, path string) []request {
	var out []request
	for _, r := range f.allRequests() {
		if r.method == method && r.path == path && r.auth == "Bearer "+f.token {
			out = append(out, r)
		}
	}
	return out
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string, details map[string]any) {
	if details == nil {
		details = map[string]any{}
	}
	writeJSON(w, status, map[string]any{"error": map[string]any{"code": code, "message": msg, "details": details}})
}

func (f *fakeAdmin) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /admin/pods", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		writeJSON(w, 200, map[string]any{"pods": f.pods})
	})
	mux.HandleFunc("PUT /admin/pods/{pod}/mode", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Mode   tandem.Mode `json:"mode"`
			Reason string      `json:"reason"`
			Force  bool        `json:"force"`
			DryRun bool        `json:"dry_run"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Reason == "" || !body.Mode.Valid() {
			writeError(w, 400, "invalid_request", "want a valid mode and a reason", nil)
			return
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		p := f.pod(r.PathValue("pod"))
		if p == nil {
			writeError(w, 404, "unknown_pod", "no pod "+r.PathValue("pod"), nil)
			return
		}
		var failed []string
		if body.Mode == tandem.ModeMySQL && !body.Force {
			failed = p.Gates.FailedGates
		}
		if !tandem.CanTransition(p.Mode, body.Mode) {
			writeError(w, 409, "transition_refused", fmt.Sprintf("%s -> %s is not a transition", p.Mode, body.Mode), map[string]any{"failed_gates": []string{}})
			return
		}
		if body.DryRun {
			writeJSON(w, 200, tandem.DryRun{WouldApply: len(failed) == 0, FailedGates: append([]string{}, failed...)})
			return
		}
		if len(failed) > 0 {
			writeError(w, 409, "transition_refused", "gates failed", map[string]any{"failed_gates": failed})
			return
		}
		f.log = append([]tandem.AuditLogEntry{{At: time.Now(), Actor: r.Header.Get("X-Actor"), Action: "set_mode", Pod: p.Pod,
			Reason: body.Reason, Before: string(p.Mode), After: string(body.Mode)}}, f.log...)
		p.Mode = body.Mode
		f.derive(p)
		writeJSON(w, 200, p)
	})
	mux.HandleFunc("POST /admin/pods/{pod}/audit", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, tandem.Audit{Pod: r.PathValue("pod"), At: time.Now(), Checked: 12, Clean: true, Drifted: []tandem.Drift{}})
	})
	killSwitch := func(engage bool) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			var body struct {
				Reason string   `json:"reason"`
				Pods   []string `json:"pods"`
			}
			if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Reason == "" {
				writeError(w, 400, "invalid_request", "want a reason", nil)
				return
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			for _, p := range f.pods {
				if len(body.Pods) == 0 || slices.Contains(body.Pods, p.Pod) {
					p.KillSwitch = engage
					f.derive(p)
				}
			}
			f.ks = tandem.KillSwitchState{Reason: body.Reason, Pods: []string{}}
			for _, p := range f.pods {
				if p.KillSwitch {
					f.ks.Pods = append(f.ks.Pods, p.Pod)
				}
			}
			f.ks.Engaged = len(f.ks.Pods) > 0
			if f.ks.Engaged {
				now := time.Now()
				f.ks.Since = &now
			}
			writeJSON(w, 200, f.ks)
		}
	}
	mux.HandleFunc("POST /admin/killswitch", killSwitch(true))
	mux.HandleFunc("DELETE /admin/killswitch", killSwitch(false))
	mux.HandleFunc("GET /admin/killswitch", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		writeJSON(w, 200, f.ks)
	})
	mux.HandleFunc("GET /admin/divergences", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, map[string]any{"divergences": []tandem.Divergence{{
			ID: 17, At: time.Now(), Pod: "pod-b", Op: tandem.OpReserve, Kind: tandem.KindOutcomeMismatch,
			CartToken: "c-9", ShopID: 4, SourceOfTruth: "redis",
			Primary: tandem.Outcome{Store: "redis", Status: "reserved", Lines: []tandem.Line{{ItemID: 100, Quantity: 2, GroupID: 1}}, LatencyMS: 1.1},
			Shadow:  tandem.Outcome{Store: "mysql", Status: "insufficient_inventory", Message: "item 100 has 1 sellable unit, 2 requested", LatencyMS: 3.4},
		}}})
	})
	mux.HandleFunc("GET /admin/report", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		var out []tandem.Report
		for _, p := range f.pods {
			out = append(out, tandem.Report{Pod: p.Pod, Mode: p.Mode, Window: "15m", Comparisons: p.Gates.Comparisons,
				Matches: max(0, p.Gates.Comparisons-1), DivergenceRate: p.Gates.DivergenceRate,
				Divergences: map[string]int64{tandem.KindOutcomeMismatch: 1},
				LatencyMS:   map[string]tandem.LatencyStats{"redis": {P50: 1.2, P99: 4.5}, "mysql": {P50: 2.5, P99: 9.75}}})
		}
		writeJSON(w, 200, map[string]any{"pods": out})
	})
	mux.HandleFunc("GET /admin/audit-log", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		writeJSON(w, 200, map[string]any{"entries": append([]tandem.AuditLogEntry{}, f.log...)})
	})
	mux.HandleFunc("GET /admin/plan", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, map[string]any{"phase": "running", "order": []string{"pod-b", "pod-a"},
			"promoted": []string{"pod-b"}, "waiting": "soaking pod-b"})
	})
	mux.HandleFunc("GET /admin/instances", func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		writeJSON(w, 200, map[string]any{"instances": []tandem.Instance{
			{ID: "i-1", Addr: "127.0.0.1:8081", StartedAt: now.Add(-time.Hour), LastSeen: now, ControlVersion: 7},
			{ID: "i-2", Addr: "127.0.0.1:9081", StartedAt: now.Add(-2 * time.Hour), LastSeen: now.Add(-time.Minute), ControlVersion: 5, Stale: true},
		}})
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := request{method: r.Method, path: r.URL.Path, rawQuery: r.URL.RawQuery, auth: r.Header.Get("Authorization"), actor: r.Header.Get("X-Actor")}
		if r.Body != nil && r.ContentLength != 0 {
			var raw []byte
			raw, r.Body = readBody(r)
			json.Unmarshal(raw, &rec.body)
		}
		f.mu.Lock()
		f.requests = append(f.requests, rec)
		f.mu.Unlock()
		if rec.auth != "Bearer "+f.token {
			writeError(w, 401, "unauthorized", "bad admin token", nil)
			return
		}
		if r.ContentLength != 0 && r.Header.Get("Content-Type") != "application/json" {
			writeError(w, 415, "unsupported_media_type", "want application/json", nil)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

func (f *fakeAdmin) pod(name string) *tandem.PodStatus {
	for _, p := range f.pods {
		if p.Pod == name {
			return p
		}
	}
	return nil
}

// derive sets the source of truth and shadow from the mode and kill switch.
func (f *fakeAdmin) derive(p *tandem.PodStatus) {
	eff := p.Mode.Effective(p.KillSwitch)
	p.SourceOfTruth, p.Shadow = eff.SourceOfTruth(), eff.Shadow()
	p.UpdatedAt = time.Now()
}

// readBody reads a request body and returns a fresh reader of it, so the
// recorder and the handler both see it.
func readBody(r *http.Request) ([]byte, io.ReadCloser) {
	raw, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	r.Body.Close()
	return raw, io.NopCloser(bytes.NewReader(raw))
}
