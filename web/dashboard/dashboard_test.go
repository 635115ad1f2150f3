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
	t.Run("HoldsTheAssets", func(t *testing.T) {
		for _, name := range []string{"index.html", "app.js", "ui.js", "charts.js", "watch.js", "style.css"} {
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
		for _, name := range []string{"index.html", "app.js", "ui.js", "charts.js", "watch.js", "style.css"} {
			b, _ := fs.ReadFile(dashboard.FS, name)
			// The SVG namespace is a name, not an address anything is fetched from.
			b = bytes.ReplaceAll(b, []byte(`"http://www.w3.org/2000/svg"`), nil)
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
			b.WaitFor(`document.querySelectorAll("#divergences tbody tr[data-divergence]").length === 1`)
			if got := b.Text("#report"); !strings.Contains(got, "1.20 ms / ") {
				t.Errorf("got report %q, want redis latency p50 / p99", got)
			}
			if got := b.Text("#instances"); !strings.Contains(got, "i-1") || !strings.Contains(got, "stale") {
				t.Errorf("got instances %q, want i-1 and the stale one", got)
			}
			b.WaitFor(`document.querySelector("#plan-state").dataset.phase === "idle"`)
			if got, want := b.Text("#plan-state"), "idle: 0 of 3 pods promoted by the plan (order pod-a, pod-b, pod-c)"; got != want {
				t.Errorf("got plan line %q, want %q", got, want)
			}
			if got := browsertest.Eval[string](b, `sessionStorage.getItem("tandem.adminToken")`); got != adminToken {
				t.Errorf("got sessionStorage token %q, want %q", got, adminToken)
			}
			if got := browsertest.Eval[string](b, `document.cookie + location.href`); strings.Contains(got, adminToken) {
				t.Errorf("got the token in a cookie or the URL: %q", got)
			}
		}},
		{"PlanShowsRealModes", func(t *testing.T) {
			b.T = t
			// The plan promoted nothing, but pod-c is on mysql: the panel
			// says so rather than "0 of 3".
			b.WaitFor(`document.querySelector("#plan-modes").textContent.includes("1 of 3 on MySQL")`)
			if got := b.Text("#plan-modes"); !strings.Contains(got, "1 redis, 1 shadow, 1 mysql") {
				t.Errorf("got plan modes %q, want the count per mode", got)
			}
			if got := b.Text(`#plan-pods [data-pod="pod-c"] [data-field="mode"]`); got != "mysql" {
				t.Errorf("got pod-c's mode in the plan %q, want mysql", got)
			}
		}},
		{"NoDataSaysNotApplicable", func(t *testing.T) {
			b.T = t
			// pod-a has no comparison and no audit yet: no 0.000%, no "not clean".
			b.WaitFor(`document.querySelector('#report [data-pod="pod-a"] [data-field="divergence_rate"]')?.textContent === "n/a"`)
			for _, c := range []struct{ sel, want string }{
				{`#pods [data-pod="pod-a"] [data-field="divergence_rate"]`, "n/a"},
				{`#pods [data-pod="pod-a"] [data-field="last_audit_clean"]`, "no audit yet"},
				{`#pods [data-pod="pod-b"] [data-field="divergence_rate"]`, "0.240%"},
				{`#pods [data-pod="pod-b"] [data-field="last_audit_clean"]`, "clean"},
				{`#pods [data-pod="pod-c"] [data-field="last_audit_clean"]`, "not clean"},
			} {
				if got := b.Text(c.sel); got != c.want {
					t.Errorf("got %s %q, want %q", c.sel, got, c.want)
				}
			}
		}},
		{"LatencyNotApplicableForUnusedStore", func(t *testing.T) {
			b.T = t
			b.WaitFor(`document.querySelector('#report [data-pod="pod-a"] [data-field="latency_mysql"]')?.textContent === "n/a"`)
			if got := b.Text(`#report [data-pod="pod-a"] [data-field="latency_redis"]`); got != "n/a" {
				t.Errorf("got pod-a redis latency %q with no comparison, want n/a", got)
			}
			if got := b.Text(`#report [data-pod="pod-b"] [data-field="latency_redis"]`); !strings.HasPrefix(got, "1.20 ms / ") {
				t.Errorf("got pod-b redis latency %q, want its p50 / p99", got)
			}
			if got := b.Text(`[data-testid="watch-pod-a"] [data-chart="latency"] .legend [data-series="redis_p99"]`); got != "Redis p99 n/a" {
				t.Errorf("got pod-a's Redis p99 legend %q with no sample, want n/a", got)
			}
			if got := b.Text(`#report [data-pod="pod-b"] [data-field="latency_mysql"]`); !strings.HasPrefix(got, "2.50 ms / ") {
				t.Errorf("got pod-b mysql latency %q, want its p50 / p99 (shadow uses both stores)", got)
			}
			if got := b.Text(`[data-testid="watch-pod-a"] [data-chart="latency"] .legend [data-series="mysql_p50"]`); !strings.Contains(got, "n/a") {
				t.Errorf("got pod-a's MySQL p50 legend %q, want n/a", got)
			}
			if n := browsertest.Eval[int](b, `document.querySelectorAll('[data-testid="watch-pod-a"] polyline[data-series^="mysql"]').length`); n != 0 {
				t.Errorf("got %d MySQL latency lines for a redis pod, want none", n)
			}
		}},
		{"ChartsDrawSamples", func(t *testing.T) {
			b.T = t
			// Two polls of the report or more: each series is a line.
			for _, sel := range []string{
				`[data-testid="watch-pod-b"] [data-chart="divergence"] polyline[data-series="outcome_mismatch"]`,
				`[data-testid="watch-pod-b"] [data-chart="latency"] polyline[data-series="mysql_p99"]`,
				`[data-testid="watch-pod-b"] [data-chart="latency"] polyline[data-series="redis_p50"]`,
				`[data-testid="watch-pod-c"] [data-chart="latency"] polyline[data-series="mysql_p50"]`,
			} {
				b.WaitFor(`(document.querySelector(` + "`" + sel + "`" + `)?.getAttribute("points") || "").trim().split(/\s+/).length >= 2`)
			}
			pts := browsertest.Eval[string](b, `document.querySelector('[data-testid="watch-pod-b"] [data-chart="divergence"] polyline[data-series="outcome_mismatch"]').getAttribute("points")`)
			for _, p := range strings.Fields(pts) {
				var x, y float64
				if _, err := fmt.Sscanf(p, "%g,%g", &x, &y); err != nil || x < 0 || y < 0 {
					t.Errorf("got point %q in %q, want x,y inside the chart", p, pts)
				}
			}
			if n := browsertest.Eval[int](b, `document.querySelectorAll('[data-testid="watch-pod-b"] [data-chart="divergence"] line.threshold:not(.abort)').length`); n != 1 {
				t.Errorf("got %d threshold lines on pod-b's divergence chart, want the gate's", n)
			}
		}},
		{"GatesShowValueThresholdAndMissing", func(t *testing.T) {
			b.T = t
			row := `[data-testid="watch-pod-b"] [data-gate="min_comparisons"]`
			b.WaitFor(`document.querySelector('` + row + `') !== null`)
			if got := b.Text(row); !strings.Contains(got, "420 of 1,000") || !strings.Contains(got, "580 more comparisons in the 15m window") || !strings.Contains(got, "fail") {
				t.Errorf("got comparisons gate %q, want value, threshold and what is missing", got)
			}
			if got := b.Text(`[data-testid="watch-pod-b"] [data-gate="max_divergence_rate"]`); !strings.Contains(got, "0.240% > 0.100%") {
				t.Errorf("got divergence rate gate %q, want value against threshold", got)
			}
			if got := b.Text(`[data-testid="watch-pod-b"] [data-gate="audit_clean"]`); !strings.Contains(got, "pass") {
				t.Errorf("got audit gate %q, want pass", got)
			}
		}},
		{"ConvergenceAndBackfillWhenPresent", func(t *testing.T) {
			b.T = t
			b.WaitFor(`document.querySelector('[data-testid="watch-pod-c"] [data-field="transition"]') !== null`)
			if got := b.Text(`[data-testid="watch-pod-c"] [data-field="transition"]`); !strings.Contains(got, "41,000 of 60,000 (68%)") || !strings.Contains(got, "backfill") {
				t.Errorf("got transition %q, want the backfill progress", got)
			}
			if got := b.Text(`[data-testid="watch-pod-b"] [data-field="convergence"]`); !strings.Contains(got, "3 dirty carts") || !strings.Contains(got, "120 holds compared") {
				t.Errorf("got convergence %q, want dirty carts and the last sweep", got)
			}
			if n := browsertest.Eval[int](b, `document.querySelectorAll('[data-testid="watch-pod-a"] [data-field="convergence"], [data-testid="watch-pod-a"] [data-field="transition"], [data-testid="watch-pod-a"] [data-field="throttle"]').length`); n != 0 {
				t.Errorf("got %d convergence, transition or throttle views for pod-a, which has none, want none", n)
			}
			if got := b.Text(`[data-testid="watch-pod-c"] [data-field="throttle"]`); !strings.Contains(got, "throttled") || !strings.Contains(got, "buyer p99 41ms > 20ms") {
				t.Errorf("got throttle %q, want throttled and why", got)
			}
		}},
		{"DivergenceSideBySide", func(t *testing.T) {
			b.T = t
			row := `#divergences [data-divergence="17"] `
			if got := b.Text(row + `[data-aspect="status"] [data-side="primary"]`); got != "reserved" {
				t.Errorf("got SoT status %q, want reserved", got)
			}
			if got := b.Text(row + `[data-aspect="status"] [data-side="shadow"]`); got != "insufficient_inventory" {
				t.Errorf("got shadow status %q, want insufficient_inventory", got)
			}
			if !browsertest.Eval[bool](b, `document.querySelector('`+row+`[data-aspect="status"]').classList.contains("differs")`) {
				t.Errorf("got the status row unmarked, want it marked as differing")
			}
			if got := b.Text(row + `[data-aspect="lines"] [data-side="primary"]`); got != "item 100 × 2 → group 1" {
				t.Errorf("got SoT lines %q, want item 100 × 2 → group 1", got)
			}
			if got := b.Text(row + `[data-aspect="groups"]`); !strings.Contains(got, "1") {
				t.Errorf("got groups %q, want group 1", got)
			}
			if got := b.Text(row + `[data-aspect="latency"]`); !strings.Contains(got, "1.10 ms") || !strings.Contains(got, "3.40 ms") {
				t.Errorf("got latency %q, want both stores'", got)
			}
			if strings.Contains(b.Text("#divergences"), `"store"`) {
				t.Errorf("got raw JSON in the divergences, want the side-by-side view")
			}
		}},
		{"TriageGroupsTheWall", func(t *testing.T) {
			b.T = t
			b.WaitFor(`document.querySelectorAll("#divergence-groups tr.group").length === 3`)
			first := `#divergence-groups tr.group:first-child `
			if got := b.Text(first + `[data-field="count"]`); got != "61" {
				t.Errorf("got first group count %q, want the 61 drifts", got)
			}
			if got := b.Text(first + `[data-field="position"]`); got != "shop 4 · item 300 · group 1" {
				t.Errorf("got position %q, want shop 4 · item 300 · group 1", got)
			}
			if got := b.Text(first + `[data-field="explanation"]`); !strings.Contains(got, "ledger on_hand 15, redis available=0, mysql available=15") {
				t.Errorf("got explanation %q, want the ledger's and each store's figure", got)
			}
			if got := b.Text("#triage-status"); !strings.Contains(got, "65 divergences in 3 groups") {
				t.Errorf("got status %q, want 65 divergences in 3 groups", got)
			}
			if got := browsertest.Eval[bool](b, `document.querySelector("#divergences-latest").open`); got {
				t.Errorf("got the one-by-one list open, want it folded under the triage")
			}
		}},
		{"TriageOpensGroupThenRow", func(t *testing.T) {
			b.T = t
			b.Do(chromedp.Click(chromedp.CSS(`#divergence-groups tr.group:first-child button.toggle`)))
			b.WaitFor(`document.querySelectorAll("#divergence-groups tr.group-rows tr[data-divergence-row]").length === 61`)
			// A refresh redraws the groups and keeps the opened one open.
			b.WaitFor(`document.querySelector("#divergence-groups tr.group:first-child button.toggle").getAttribute("aria-expanded") === "true"`)
			b.Do(chromedp.Click(chromedp.CSS(`#divergence-groups tr[data-divergence-row="1000"] button`)))
			b.WaitFor(`!!document.querySelector('#divergence-groups tr[data-diff-of="1000"] table.diff')`)
			diff := `#divergence-groups tr[data-diff-of="1000"] `
			if got := b.Text(diff + `[data-aspect="status"] [data-side="primary"]`); got != "available=0" {
				t.Errorf("got SoT side %q, want redis's available=0", got)
			}
			if got := b.Text(diff + `[data-aspect="status"] [data-side="shadow"]`); got != "available=15" {
				t.Errorf("got shadow side %q, want mysql's available=15", got)
			}
		}},
		{"TriageFilters", func(t *testing.T) {
			b.T = t
			setSelect := func(sel, v string) {
				browsertest.Eval[bool](b, `(() => { const s = document.querySelector("`+sel+`"); s.value = "`+v+`"; s.dispatchEvent(new Event("change", {bubbles: true})); return true; })()`)
			}
			setSelect("#triage-kind", "shadow_timeout")
			b.WaitFor(`document.querySelectorAll("#divergence-groups tr.group").length === 1`)
			if got := b.Text(`#divergence-groups tr.group [data-field="pod"]`); got != "pod-a" {
				t.Errorf("got pod %q, want pod-a's timeouts", got)
			}
			setSelect("#triage-kind", "")
			setSelect("#triage-op", "audit")
			b.WaitFor(`document.querySelectorAll("#divergence-groups tr.group").length === 1`)
			setSelect("#triage-op", "")
			b.WaitFor(`document.querySelectorAll("#divergence-groups tr.group").length === 3`)
			setSelect("#triage-pod", "pod-a")
			b.WaitFor(`document.querySelectorAll("#divergence-groups tr.group").length === 1`)
			b.WaitFor(`document.querySelector('#divergence-groups tr.group [data-field="pod"]').textContent === "pod-a"`)
			if !slices.ContainsFunc(api.requestsTo(http.MethodGet, "/admin/divergences/summary"), func(r request) bool { return strings.Contains(r.rawQuery, "pod=pod-a") }) {
				t.Errorf("got no summary asked for pod-a, want the pod filter sent to the server")
			}
			// Export asks for the filtered rows as CSV, with the token in a header.
			b.Do(chromedp.Click(chromedp.CSS("#triage-export-csv")))
			b.WaitFor(`performance.getEntriesByType("resource").some((e) => e.name.includes("format=csv"))`)
			if !slices.ContainsFunc(api.requestsTo(http.MethodGet, "/admin/divergences"), func(r request) bool {
				return strings.Contains(r.rawQuery, "format=csv") && strings.Contains(r.rawQuery, "pod=pod-a")
			}) {
				t.Errorf("got no CSV export of pod-a's divergences with the token, want one")
			}
			setSelect("#triage-pod", "")
			b.WaitFor(`document.querySelectorAll("#divergence-groups tr.group").length === 3`)
		}},
		{"ChartsShowHistoryAndThresholds", func(t *testing.T) {
			b.T = t
			card := `[data-testid="watch-pod-b"] [data-chart="divergence"]`
			// pod-b is in shadow: the abort (5%) is above its rates and does
			// not stretch the axis away from the gate (0.1%); its label shows.
			b.WaitFor(`!!document.querySelector('` + card + ` text.threshold-label.abort.offscale')`)
			if got := b.Text(card + ` text.threshold-label.abort`); got != "↑ abort 5.000% (on mysql)" {
				t.Errorf("got abort label %q, want ↑ abort 5.000%% (on mysql)", got)
			}
			// pod-c is on mysql: the abort is its line.
			podC := `[data-testid="watch-pod-c"] [data-chart="divergence"]`
			if n := browsertest.Eval[int](b, `document.querySelectorAll('`+podC+` line.threshold.abort').length`); n != 1 {
				t.Errorf("got %d abort lines on pod-c (mysql), want 1", n)
			}
			if n := browsertest.Eval[int](b, `document.querySelectorAll('`+card+` line.threshold:not(.abort)').length`); n != 1 {
				t.Errorf("got %d gate lines, want 1", n)
			}
			saveArtifact(t, "dashboard-watch.png", browsertest.Run(b, chromedp.Screenshot(chromedp.CSS("#watch-pods"))))
			// The server's hour of samples comes before the tab's own.
			if n := browsertest.Eval[int](b, `TandemCharts.samples("pod-b").length`); n < 720 {
				t.Errorf("got %d samples of pod-b, want the server's 720 and the tab's", n)
			}
			if got := b.Text(card + " text.axis"); got == "" {
				t.Errorf("got no axis labels")
			}
		}},
		{"TriageLayout", func(t *testing.T) {
			b.T = t
			for _, width := range []int{1400, 900} {
				b.Do(chromedp.EmulateViewport(int64(width), 1000))
				b.WaitFor(fmt.Sprintf(`window.innerWidth === %d`, width))
				b.Do(chromedp.ScrollIntoView(chromedp.CSS("#triage")))
				if w := browsertest.Eval[int](b, `document.documentElement.scrollWidth`); w > width {
					t.Errorf("at %d px: got a page %d px wide, want no sideways scrolling", width, w)
				}
				box := browsertest.Eval[[]float64](b, `(() => { const r = document.querySelector("#divergence-groups").getBoundingClientRect(); return [r.left, r.right, r.height]; })()`)
				if len(box) != 3 || box[0] < 0 || box[1] > float64(width) || box[2] < 100 {
					t.Errorf("at %d px: got the group table at %v, want it visible inside the window", width, box)
				}
				// The explanation wraps in its cell rather than widening the table.
				if cw := browsertest.Eval[bool](b, `(() => { const s = document.querySelector("#divergence-groups").parentElement; return s.scrollWidth <= s.clientWidth; })()`); !cw {
					t.Errorf("at %d px: got the group table wider than its section, want the explanations wrapped: %s", width,
						browsertest.Eval[string](b, `(() => { const s = document.querySelector("#divergence-groups"); return s.scrollWidth + " in " + s.parentElement.clientWidth + ": " + Array.from(s.querySelectorAll("thead th")).map((th) => Math.round(th.getBoundingClientRect().width)).join(","); })()`))
				}
				if width == 900 {
					// Open the big group and a row's diff: still no sideways scrolling.
					b.Do(chromedp.Click(chromedp.CSS(`#divergence-groups tr.group:first-child button.toggle`)))
					b.WaitFor(`document.querySelectorAll("#divergence-groups tr.group-rows tr[data-divergence-row]").length === 61`)
					b.Do(chromedp.Click(chromedp.CSS(`#divergence-groups tr[data-divergence-row="999"] button`)))
					b.WaitFor(`!!document.querySelector('#divergence-groups tr[data-diff-of="999"] table.diff')`)
					if w := browsertest.Eval[int](b, `document.documentElement.scrollWidth`); w > width {
						t.Errorf("at %d px with a group and a diff open: got a page %d px wide, want no sideways scrolling", width, w)
					}
				}
				png := browsertest.Run(b, chromedp.Screenshot(chromedp.CSS("#triage")))
				saveArtifact(t, fmt.Sprintf("dashboard-triage-%d.png", width), png)
			}
			b.Do(chromedp.EmulateViewport(1400, 1000))
			b.WaitFor(`window.innerWidth === 1400`)
		}},
		{"Screenshot", func(t *testing.T) {
			b.T = t
			screenshot(t, b, "dashboard.png")
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
		{"DialogOpenedRightAfterCancelSubmits", func(t *testing.T) {
			b.T = t
			// A cancelled dialog's close event arrives after close()
			// returned; a busy browser handles the next click first. Both
			// in one task here: the event must not end the new dialog's
			// action, or its OK does nothing and the dialog stays open.
			n := len(api.requestsTo(http.MethodPost, "/admin/pods/pod-a/audit"))
			b.Do(chromedp.Evaluate[chromedp.Void](`(() => {
				const audit = document.querySelector('[data-pod="pod-a"] [data-action="audit"]');
				audit.click();
				document.querySelector("#confirm-cancel").click();
				audit.click();
			})()`))
			b.WaitFor(`document.querySelector("#confirm-dialog").open`)
			b.Do(chromedp.Click(chromedp.CSS("#confirm-ok")))
			b.WaitFor(`!document.querySelector("#confirm-dialog").open`)
			if got := len(api.requestsTo(http.MethodPost, "/admin/pods/pod-a/audit")); got != n+1 {
				t.Errorf("got %d audits of pod-a, want %d (one, from the dialog opened after the cancel)", got, n+1)
			}
		}},
		{"RowKillShowsSinceAndReason", func(t *testing.T) {
			b.T = t
			podB := `[data-pod="pod-b"]`
			b.Do(chromedp.Click(chromedp.CSS(podB + ` [data-action="kill"]`)))
			b.WaitFor(`document.querySelector("#confirm-dialog").open`)
			if got := b.Text("#confirm-body"); !strings.Contains(got, "pod-b") || strings.Contains(got, "pod-a") {
				t.Errorf("got dialog %q, want pod-b alone", got)
			}
			if api.killSwitch().Engaged {
				t.Fatalf("got the kill switch engaged before confirmation, want it off")
			}
			b.Do(chromedp.SendKeys(chromedp.CSS("#confirm-reason"), "pod-b p99 up"), chromedp.Click(chromedp.CSS("#confirm-ok")))
			b.WaitFor(`document.querySelector('[data-pod="pod-b"] [data-field="kill_switch"]').textContent === "engaged"`)
			b.WaitFor(`document.querySelector('[data-pod="pod-b"] [data-field="kill_reason"]')?.textContent === "pod-b p99 up (carol)"`)
			if got := b.Text(podB + ` [data-field="kill_since"]`); !strings.HasPrefix(got, "since 20") {
				t.Errorf("got pod-b since %q, want the engagement time", got)
			}
			if got := b.Text(podB + ` [data-field="abort"]`); got != "an unkill would be undone: 6.000% ≥ 1.000% in the last 1m" {
				t.Errorf("got pod-b abort %q, want the recent rate against the threshold", got)
			}
			if got := b.Text(`[data-pod="pod-a"] [data-field="kill_switch"]`); got != "off" {
				t.Errorf("got pod-a kill switch %q, want off", got)
			}
			posts := api.requestsTo(http.MethodPost, "/admin/killswitch")
			if len(posts) != 1 {
				t.Fatalf("got %d POSTs of the kill switch, want 1", len(posts))
			}
			if got := fmt.Sprint(posts[0].body["pods"]); got != "[pod-b]" {
				t.Errorf("got pods %s, want [pod-b]", got)
			}
			if !browsertest.Eval[bool](b, `document.querySelector('[data-pod="pod-b"] [data-action="kill"]').hidden && !document.querySelector('[data-pod="pod-b"] [data-action="unkill"]').hidden`) {
				t.Errorf("got Kill shown or Unkill hidden for an engaged pod, want Unkill alone")
			}
		}},
		{"KilledPodGatesNotApplicable", func(t *testing.T) {
			b.T = t
			// Redis serves a killed pod: its gates to mysql say nothing.
			b.WaitFor(`document.querySelector('#pods [data-pod="pod-b"] [data-field="passing"]')?.textContent === "n/a (killed)"`)
			b.WaitFor(`(document.querySelector('[data-testid="watch-pod-b"] [data-field="gates"]')?.textContent || "").includes("n/a while the kill switch is engaged")`)
			if n := browsertest.Eval[int](b, `document.querySelectorAll('[data-testid="watch-pod-b"] [data-gate]').length`); n != 0 {
				t.Errorf("got %d gate rows on killed pod-b's card, want none", n)
			}
			if got := b.Text(`#pods [data-pod="pod-a"] [data-field="passing"]`); !strings.HasPrefix(got, "failing") {
				t.Errorf("got pod-a gates %q, want failing (not killed)", got)
			}
		}},
		{"KillSwitchGateCannotBeForced", func(t *testing.T) {
			b.T = t
			b.Do(chromedp.Click(chromedp.CSS(`[data-pod="pod-b"] [data-action="mode"]`)))
			b.WaitFor(`document.querySelector("#dryrun-result").dataset.state === "would-refuse"`)
			got := b.Text("#dryrun-result")
			if !strings.Contains(got, "kill_switch") || !strings.Contains(got, "Force cannot override kill_switch") {
				t.Errorf("got dry run %q, want kill_switch that force cannot override", got)
			}
			if strings.Contains(got, "Tick Force") {
				t.Errorf("got dry run %q, want no advice to tick Force", got)
			}
			b.Do(chromedp.Click(chromedp.CSS("#confirm-force")))
			b.WaitFor(`document.querySelector("#dryrun-result").dataset.state === "would-refuse" && document.querySelector("#confirm-force").checked`)
			if !browsertest.Eval[bool](b, `document.querySelector("#confirm-ok").disabled`) {
				t.Errorf("got Apply enabled with force against the kill switch, want disabled")
			}
			b.Do(chromedp.Click(chromedp.CSS("#confirm-cancel")))
			b.WaitFor(`!document.querySelector("#confirm-dialog").open`)
		}},
		{"RowUnkillAfterConfirmation", func(t *testing.T) {
			b.T = t
			b.Do(chromedp.Click(chromedp.CSS(`[data-pod="pod-b"] [data-action="unkill"]`)))
			b.WaitFor(`document.querySelector("#confirm-dialog").open`)
			if n := len(api.requestsTo(http.MethodDelete, "/admin/killswitch")); n != 0 {
				t.Fatalf("got %d DELETEs before confirmation, want none", n)
			}
			b.Do(chromedp.SendKeys(chromedp.CSS("#confirm-reason"), "p99 back"), chromedp.Click(chromedp.CSS("#confirm-ok")))
			b.WaitFor(`document.querySelector('[data-pod="pod-b"] [data-field="kill_switch"]').textContent === "off"`)
			dels := api.requestsTo(http.MethodDelete, "/admin/killswitch")
			if len(dels) != 1 || fmt.Sprint(dels[0].body["pods"]) != "[pod-b]" || dels[0].body["reason"] != "p99 back" {
				t.Fatalf("got DELETEs %+v, want one for pod-b with the reason", dels)
			}
		}},
		{"PlanStartPauseAbort", func(t *testing.T) {
			b.T = t
			for _, step := range []struct{ action, phase string }{{"start", "running"}, {"pause", "paused"}, {"abort", "aborted"}} {
				b.WaitFor(`!document.querySelector("#plan-` + step.action + `").disabled`)
				b.Do(chromedp.Click(chromedp.CSS("#plan-" + step.action)))
				b.WaitFor(`document.querySelector("#confirm-dialog").open`)
				if n := len(api.requestsTo(http.MethodPost, "/admin/plan/"+step.action)); n != 0 {
					t.Fatalf("got %d POSTs of %s before confirmation, want none", n, step.action)
				}
				b.Do(chromedp.SendKeys(chromedp.CSS("#confirm-reason"), step.action+" from the dashboard"), chromedp.Click(chromedp.CSS("#confirm-ok")))
				b.WaitFor(`document.querySelector("#plan-state").dataset.phase === "` + step.phase + `"`)
				b.WaitFor(`!document.querySelector("#confirm-dialog").open`)
				posts := api.requestsTo(http.MethodPost, "/admin/plan/"+step.action)
				if len(posts) != 1 || posts[0].body["reason"] != step.action+" from the dashboard" {
					t.Errorf("got %s POSTs %+v, want one with the reason", step.action, posts)
				}
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
			if len(posts) != 2 {
				t.Fatalf("got %d POSTs of the kill switch, want 2 (pod-b's row, then all)", len(posts))
			}
			if got := posts[1].body; got["reason"] != "checkout errors" || got["pods"] != nil {
				t.Errorf("got kill switch body %v, want the reason and no pods (all pods)", got)
			}
		}},
		{"PlanCountsKilledPodsOnRedis", func(t *testing.T) {
			b.T = t
			// pod-c is in mysql but killed: Redis answers its buyers.
			b.WaitFor(`document.querySelector("#plan-modes").textContent.includes("0 of 3 on MySQL")`)
			if got := b.Text("#plan-modes"); !strings.Contains(got, "killed, served by Redis: pod-c") || !strings.Contains(got, "1 mysql") {
				t.Errorf("got plan modes %q, want pod-c counted on Redis and still in mysql", got)
			}
			if got := b.Text(`#plan-pods [data-pod="pod-c"] [data-field="source_of_truth"]`); got != "redis (killed)" {
				t.Errorf("got pod-c's source of truth in the plan %q, want redis (killed)", got)
			}
		}},
		{"KillSwitchSaysEachPodsOwn", func(t *testing.T) {
			b.T = t
			// pod-a killed earlier for another reason, by another person:
			// the switch-wide since is pod-a's and the reason the latest.
			api.mu.Lock()
			early := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
			api.engaged["pod-a"] = tandem.KillSwitchEngagement{Pod: "pod-a", Since: early, Actor: "dave", Reason: "pod-a errors"}
			api.ks.Engagements = nil
			for _, p := range api.pods {
				api.ks.Engagements = append(api.ks.Engagements, api.engaged[p.Pod])
			}
			api.ks.Since = &early
			api.mu.Unlock()
			b.WaitFor(`(document.querySelector('#killswitch-pods [data-pod="pod-a"]')?.textContent || "").includes("by dave: pod-a errors")`)
			if got := b.Text(`#killswitch-pods [data-pod="pod-b"]`); !strings.Contains(got, "by carol: checkout errors") {
				t.Errorf("got pod-b's engagement %q, want its own actor and reason", got)
			}
			if got := b.Text("#killswitch-state"); strings.Contains(got, "reason") || strings.Contains(got, "since") {
				t.Errorf("got kill switch state %q, want no switch-wide since or reason (they mix pods)", got)
			}
			if got := b.Text(`#pods [data-pod="pod-a"] [data-field="kill_reason"]`); got != "pod-a errors (dave)" {
				t.Errorf("got pod-a's row reason %q, want its own", got)
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
		{"NarrowWindowKeepsActionsInView", func(t *testing.T) {
			b.T = t
			b.Do(chromedp.EmulateViewport(900, 1000))
			b.WaitFor(`window.innerWidth === 900`)
			rows := browsertest.Eval[int](b, `document.querySelectorAll("#pods tbody tr").length`)
			for i := 1; i <= rows; i++ {
				cell := fmt.Sprintf(`document.querySelector("#pods tbody tr:nth-child(%d) td.row-actions")`, i)
				for _, btn := range []string{"mode", "audit"} {
					r := browsertest.Eval[[]float64](b, `(() => { const r = `+cell+`.querySelector('[data-action="`+btn+`"]').getBoundingClientRect(); return [r.left, r.right]; })()`)
					if len(r) != 2 || r[0] < 0 || r[1] > 900 {
						t.Errorf("row %d: got %s button at %v, want it inside the 900 px window", i, btn, r)
					}
				}
			}
			if w := browsertest.Eval[int](b, `document.documentElement.scrollWidth`); w > 900 {
				t.Errorf("got a page %d px wide, want no sideways scrolling at 900 px", w)
			}
			screenshot(t, b, "dashboard-900.png")
		}},
	}
	for _, s := range steps {
		if !t.Run(s.name, s.run) {
			return // later steps build on this one
		}
	}
}

// screenshot saves the page to artifacts/name at the repository root.
func screenshot(t *testing.T, b *browsertest.Page, name string) {
	t.Helper()
	saveArtifact(t, name, browsertest.Run(b, chromedp.FullScreenshot(100)))
}

// saveArtifact writes png to artifacts/name at the repository root.
func saveArtifact(t *testing.T, name string, png []byte) {
	t.Helper()
	dir := filepath.Join("..", "..", "artifacts")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs(path)
	t.Logf("dashboard screenshot: %s", abs)
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

	mu          sync.Mutex
	pods        []*tandem.PodStatus
	transitions map[string]map[string]any // POD.transition by pod
	engaged     map[string]tandem.KillSwitchEngagement
	ks          tandem.KillSwitchState
	log         []tandem.AuditLogEntry
	requests    []request
	reports     int    // GET /admin/report answered so far
	planPhase   string // idle, running, paused, aborted
}

// podJSON is POD with the fields PodStatus leaves to others (transition).
type podJSON struct {
	*tandem.PodStatus
	Transition map[string]any `json:"transition,omitempty"`
}

// reportJSON is REPORT with the shadow's convergence.
type reportJSON struct {
	tandem.Report
	Convergence map[string]any `json:"convergence,omitempty"`
}

type request struct {
	method, path, rawQuery, auth, actor string
	body                                map[string]any
}

func newFakeAdmin(token string) *fakeAdmin {
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	lastAudit := now.Add(-time.Minute)
	return &fakeAdmin{
		token:     token,
		planPhase: "idle",
		engaged:   map[string]tandem.KillSwitchEngagement{},
		pods: []*tandem.PodStatus{
			{Pod: "pod-a", Mode: tandem.ModeRedis, SourceOfTruth: "redis", Shops: "1-3", UpdatedAt: now,
				Gates: tandem.Gates{FailedGates: []string{"min_comparisons", "audit_clean"}}},
			{Pod: "pod-b", Mode: tandem.ModeShadow, SourceOfTruth: "redis", Shadow: "mysql", Shops: "4-9", UpdatedAt: now,
				Abort: &tandem.AbortWatch{Window: "1m", Comparisons: 400, MinComparisons: 200, DivergenceRate: 0.06, Threshold: 0.01, WouldTrip: true},
				Gates: tandem.Gates{Comparisons: 420, DivergenceRate: 0.0024, LastAuditClean: true, LastAuditAt: &lastAudit, FailedGates: []string{"min_comparisons"},
					Checks: []tandem.GateCheck{
						{Gate: tandem.GateComparisons, Value: 420, Threshold: 1000, Missing: "580 more comparisons in the 15m window"},
						{Gate: tandem.GateDivergenceRate, Value: 0.0024, Threshold: 0.001, Missing: "a divergence rate at most 0.1%"},
						{Gate: tandem.GateAudit, Value: 1, Threshold: 1, Passing: true},
					}}},
			{Pod: "pod-c", Mode: tandem.ModeMySQL, SourceOfTruth: "mysql", Shadow: "redis", Shops: "10-99", UpdatedAt: now,
				Gates:    tandem.Gates{Comparisons: 5000, LastAuditAt: &lastAudit, FailedGates: []string{"audit_clean"}},
				Throttle: &tandem.ThrottleState{Throttled: true, Signal: tandem.SignalBuyerP99, Reason: "buyer p99 41ms > 20ms", Since: &lastAudit}},
		},
		transitions: map[string]map[string]any{
			"pod-c": {"to": "shadow", "phase": "backfill", "copied": 41000, "total": 60000, "started_at": now},
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
		out := make([]podJSON, len(f.pods))
		for i, p := range f.pods {
			out[i] = podJSON{PodStatus: p, Transition: f.transitions[p.Pod]}
		}
		writeJSON(w, 200, map[string]any{"pods": out})
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
		if p.KillSwitch && (body.Mode == tandem.ModeMySQL || body.Mode == tandem.ModeMySQLOnly) {
			failed = []string{"kill_switch"} // force does not override it
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
					if engage && !p.KillSwitch {
						f.engaged[p.Pod] = tandem.KillSwitchEngagement{Pod: p.Pod, Since: time.Now(), Actor: r.Header.Get("X-Actor"), Reason: body.Reason}
					}
					if !engage {
						delete(f.engaged, p.Pod)
					}
					p.KillSwitch = engage
					f.derive(p)
				}
			}
			f.ks = tandem.KillSwitchState{Reason: body.Reason, Pods: []string{}}
			for _, p := range f.pods {
				if e, ok := f.engaged[p.Pod]; ok {
					f.ks.Pods = append(f.ks.Pods, p.Pod)
					f.ks.Engagements = append(f.ks.Engagements, e)
					if f.ks.Since == nil || e.Since.Before(*f.ks.Since) {
						f.ks.Since = &e.Since
					}
				}
			}
			f.ks.Engaged = len(f.ks.Pods) > 0
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
		// The latest list (no kind) holds divergence 17; the triage's
		// group rows ask for a pod and kind.
		if r.URL.Query().Get("kind") == "" {
			writeJSON(w, 200, map[string]any{"divergences": []tandem.Divergence{divergence17()}})
			return
		}
		writeJSON(w, 200, map[string]any{"divergences": explained(filterDivergences(triageDivergences(), r))})
	})
	mux.HandleFunc("GET /admin/divergences/summary", func(w http.ResponseWriter, r *http.Request) {
		all := append(triageDivergences(), divergence17())
		writeJSON(w, 200, map[string]any{"groups": tandem.GroupDivergences(filterDivergences(all, r)), "sampled": len(all), "truncated": false})
	})
	mux.HandleFunc("GET /admin/config", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, map[string]any{"rollout": map[string]any{"gate_max_divergence_rate": 0.001, "abort_divergence_rate": 0.05}})
	})
	mux.HandleFunc("GET /admin/history", func(w http.ResponseWriter, r *http.Request) {
		// An hour of pod-b's reports every 5 s, before the tab opened.
		var out []tandem.ReportSample
		now := time.Now()
		for i := 720; i > 0; i-- {
			out = append(out, tandem.ReportSample{At: now.Add(-time.Duration(i) * 5 * time.Second), Report: tandem.Report{
				Pod: "pod-b", Mode: tandem.ModeShadow, Window: "15m", Comparisons: 1000, Matches: 990, DivergenceRate: 0.01,
				Divergences: map[tandem.DivergenceKind]int64{tandem.KindStateDrift: int64(i % 20)}, LatencyMS: map[string]tandem.LatencyStats{}}})
		}
		writeJSON(w, 200, map[string]any{"samples": out})
	})
	mux.HandleFunc("GET /admin/report", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		// The numbers move from one answer to the next, as a live pod's do,
		// so that the charts draw lines rather than points.
		f.reports++
		n := int64(f.reports % 4)
		var out []reportJSON
		for _, p := range f.pods {
			// A store the mode does not use reads 0 ms, and so does every
			// store of a pod with no comparison: the page must say n/a.
			lat := map[string]tandem.LatencyStats{"redis": {}, "mysql": {}}
			for _, store := range []string{p.SourceOfTruth, p.Shadow} {
				if p.Gates.Comparisons == 0 {
					break
				}
				switch store {
				case "redis":
					lat[store] = tandem.LatencyStats{P50: 1.2, P99: 4.5 + float64(n)}
				case "mysql":
					lat[store] = tandem.LatencyStats{P50: 2.5, P99: 9.75 + float64(n)}
				}
			}
			rep := reportJSON{Report: tandem.Report{Pod: p.Pod, Mode: p.Mode, Window: "15m", Comparisons: p.Gates.Comparisons,
				Matches: max(0, p.Gates.Comparisons-1), DivergenceRate: p.Gates.DivergenceRate,
				Divergences: map[tandem.DivergenceKind]int64{tandem.KindOutcomeMismatch: 1 + n, tandem.KindShadowTimeout: n},
				LatencyMS:   lat}}
			if p.Pod == "pod-b" {
				rep.Convergence = map[string]any{"dirty_carts": 3, "results": map[string]int64{"repaired": 7},
					"last_sweep": map[string]any{"at": time.Now(), "holds_compared": 120, "carts_differing": 2, "carts_converged": 2, "left": 0}}
			}
			out = append(out, rep)
		}
		writeJSON(w, 200, map[string]any{"pods": out})
	})
	mux.HandleFunc("GET /admin/audit-log", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		writeJSON(w, 200, map[string]any{"entries": append([]tandem.AuditLogEntry{}, f.log...)})
	})
	plan := func() map[string]any {
		st := map[string]any{"phase": f.planPhase, "order": []string{"pod-a", "pod-b", "pod-c"}, "promoted": []string{}}
		if f.planPhase == "running" {
			st["waiting"] = "soaking pod-b"
		}
		return st
	}
	mux.HandleFunc("GET /admin/plan", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		writeJSON(w, 200, plan())
	})
	planChange := func(to string, from ...string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			var body struct {
				Reason string `json:"reason"`
			}
			if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Reason == "" {
				writeError(w, 400, "invalid_request", "want a reason", nil)
				return
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if !slices.Contains(from, f.planPhase) {
				writeError(w, 409, "conflict", "the plan is "+f.planPhase, map[string]any{"phase": f.planPhase})
				return
			}
			f.planPhase = to
			writeJSON(w, 200, plan())
		}
	}
	mux.HandleFunc("POST /admin/plan/start", planChange("running", "idle", "paused", "aborted", "done"))
	mux.HandleFunc("POST /admin/plan/pause", planChange("paused", "running"))
	mux.HandleFunc("POST /admin/plan/abort", planChange("aborted", "running", "paused"))
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

func divergence17() tandem.Divergence {
	return tandem.Divergence{
		ID: 17, At: time.Now(), Pod: "pod-b", Op: tandem.OpReserve, Kind: tandem.KindOutcomeMismatch,
		CartToken: "c-9", ShopID: 4, SourceOfTruth: "redis",
		Primary: tandem.Outcome{Store: "redis", Status: "reserved", Lines: []tandem.Line{{ItemID: 100, Quantity: 2, GroupID: 1}}, LatencyMS: 1.1},
		Shadow:  tandem.Outcome{Store: "mysql", Status: "insufficient_inventory", Message: "item 100 has 1 sellable unit, 2 requested", LatencyMS: 3.4},
	}
}

// triageDivergences are 61 drifts of one position of pod-b, the wall the
// triage folds into one group, and 3 shadow timeouts of pod-a.
func triageDivergences() []tandem.Divergence {
	var out []tandem.Divergence
	now := time.Now()
	zero, fifteen := int64(0), int64(15)
	for i := range 61 {
		d := tandem.Drift{ShopID: 4, ItemID: 300, GroupID: 1, LedgerOnHand: 15, RedisAvailable: &zero, MySQLAvailable: &fifteen,
			Cause: "redis's counter lost 15 units"}
		r, m := tandem.DriftOutcomes(d)
		out = append(out, tandem.Divergence{ID: int64(1000 - i), At: now.Add(-time.Duration(i) * time.Minute), Pod: "pod-b",
			Op: tandem.OpAudit, Kind: tandem.KindStateDrift, ShopID: 4, SourceOfTruth: "ledger", Primary: r, Shadow: m, Position: &d})
	}
	for i := range 3 {
		out = append(out, tandem.Divergence{ID: int64(500 - i), At: now.Add(-time.Duration(i) * time.Minute), Pod: "pod-a",
			Op: tandem.OpReserve, Kind: tandem.KindShadowTimeout, CartToken: fmt.Sprintf("c-t%d", i), ShopID: 1, SourceOfTruth: "redis",
			Primary: tandem.Outcome{Store: "redis", Status: "reserved", Lines: []tandem.Line{{ItemID: 100, Quantity: 1, GroupID: 1}}},
			Shadow:  tandem.Outcome{Store: "mysql", Status: tandem.OutcomeTimeout}})
	}
	return out
}

func filterDivergences(ds []tandem.Divergence, r *http.Request) []tandem.Divergence {
	q := r.URL.Query()
	var out []tandem.Divergence
	for _, d := range ds {
		if (q.Get("pod") == "" || d.Pod == q.Get("pod")) && (q.Get("kind") == "" || string(d.Kind) == q.Get("kind")) {
			out = append(out, d)
		}
	}
	return out
}

func explained(ds []tandem.Divergence) []tandem.ExplainedDivergence {
	out := make([]tandem.ExplainedDivergence, len(ds))
	for i, d := range ds {
		out[i] = tandem.Explain(d)
	}
	return out
}
