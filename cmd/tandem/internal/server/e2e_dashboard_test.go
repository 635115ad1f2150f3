package server_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/tandemhq/tandem/cmd/tandem/internal/server"

	"github.com/tandemhq/tandem/internal/browsertest"
	"github.com/tandemhq/tandem/internal/testenv"
)

// TestE2EDashboard drives the dashboard page, served by a real `tandem
// serve`, in headless Chromium: token entry, a redis -> shadow flip through
// the dialog, the kill switch with confirmation, checked on the page and
// through the admin API.
func TestE2EDashboard(t *testing.T) {
	testenv.RequireIntegration(t)
	cfg, _ := MustConfig(t)
	in := MustRunMain(t, cfg)
	podA, podB := cfg.Pods[0].Name, cfg.Pods[1].Name
	in.Checkout.must(http.MethodPut, inventoryPath(shopA, 1, 1), obj{"on_hand": 3}, http.StatusOK)
	in.Checkout.must(http.MethodPost, "/v1/reservations", cart("dash-1", shopA, line(1, 1, 1)), http.StatusCreated)

	b := browsertest.MustOpen(t, in.AdminURL+"/")
	field := func(pod, name string) string {
		return fmt.Sprintf(`document.querySelector('[data-pod=%q] [data-field=%q]')?.textContent`, pod, name)
	}

	steps := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"TokenShowsTheRealPods", func(t *testing.T) {
			b.Do(chromedp.WaitVisible(chromedp.CSS("#token-input")))
			b.Do(chromedp.SendKeys(chromedp.CSS("#actor-input"), "erin"),
				chromedp.SendKeys(chromedp.CSS("#token-input"), in.AdminToken), chromedp.Click(chromedp.CSS("#token-save")))
			b.WaitFor(field(podA, "mode") + ` === "shadow"`)
			b.WaitFor(field(podB, "mode") + ` === "redis"`)
			if got := b.Text(fmt.Sprintf(`[data-pod=%q] [data-field="kill_switch"]`, podB)); got != "off" {
				t.Errorf("got pod B kill switch %q, want off", got)
			}
			b.WaitFor(`document.querySelector("#error-banner").hidden`)
			b.WaitFor(fmt.Sprintf(`document.querySelector("#instances").textContent.includes(%q)`, in.Main.InstanceID))
			b.WaitFor(`document.querySelector("#token-role").dataset.role === "admin"`)
			if got := b.Text("#token-role"); got != "admin token" {
				t.Errorf("got token role %q, want admin token", got)
			}
		}},
		{"ModeDialogFlipsRedisToShadow", func(t *testing.T) {
			b.Do(chromedp.Click(chromedp.CSS(fmt.Sprintf(`[data-pod=%q] [data-action="mode"]`, podB))))
			b.WaitFor(`document.querySelector("#dryrun-result").dataset.state === "would-apply"`)
			if got := browsertest.Eval[string](b, `document.querySelector("#mode-target").value`); got != "shadow" {
				t.Errorf("got target mode %q offered for a redis pod, want shadow", got)
			}
			in.Admin.tb = t
			if got := podStatus(in.Admin, podB)["mode"]; got != "redis" {
				t.Fatalf("got pod B mode %v after the dry run, want redis", got)
			}
			b.Do(chromedp.SendKeys(chromedp.CSS("#confirm-reason"), "shadow B from the dashboard"), chromedp.Click(chromedp.CSS("#confirm-ok")))
			b.WaitFor(field(podB, "mode") + ` === "shadow"`)
			b.WaitFor(`!document.querySelector("#confirm-dialog").open`)
			st := podStatus(in.Admin, podB)
			if st["mode"] != "shadow" || st["shadow"] != "mysql" {
				t.Errorf("got pod B %v through the API, want shadow", st)
			}
			if !auditLogHas(in.Admin, "set_mode", podB, "shadow B from the dashboard") {
				t.Errorf("got no set_mode entry with the dashboard's reason")
			}
			b.WaitFor(`document.querySelector("#audit-log").textContent.includes("erin")`)
		}},
		{"RefusedPromotionShowsTheFailedGates", func(t *testing.T) {
			b.Do(chromedp.Click(chromedp.CSS(fmt.Sprintf(`[data-pod=%q] [data-action="mode"]`, podA))))
			b.WaitFor(`document.querySelector("#dryrun-result").dataset.state === "would-refuse"`)
			if got := b.Text("#dryrun-result"); !strings.Contains(got, "min_comparisons") {
				t.Errorf("got dry run %q, want the failed gate min_comparisons", got)
			}
			b.Do(chromedp.Click(chromedp.CSS("#confirm-cancel")))
			b.WaitFor(`!document.querySelector("#confirm-dialog").open`)
			in.Admin.tb = t
			if got := podStatus(in.Admin, podA)["mode"]; got != "shadow" {
				t.Errorf("got pod A mode %v, want shadow (nothing applied)", got)
			}
		}},
		{"KillSwitchEngagesAfterConfirmation", func(t *testing.T) {
			b.Do(chromedp.Click(chromedp.CSS("#killswitch-engage")))
			b.WaitFor(`document.querySelector("#confirm-dialog").open`)
			in.Admin.tb = t
			if ks := in.Admin.must(http.MethodGet, "/admin/killswitch", nil, http.StatusOK); ks["engaged"] != false {
				t.Fatalf("got the kill switch %v before confirmation, want off", ks)
			}
			b.Do(chromedp.SendKeys(chromedp.CSS("#confirm-reason"), "checkout errors"), chromedp.Click(chromedp.CSS("#confirm-ok")))
			b.WaitFor(`document.querySelector("#killswitch-state").dataset.engaged === "true"`)
			b.WaitFor(field(podA, "kill_switch") + ` === "engaged"`)
			b.WaitFor(field(podB, "kill_switch") + ` === "engaged"`)
			if got := b.Text("#killswitch-state"); !strings.Contains(got, "Engaged") || !strings.Contains(got, podA) || !strings.Contains(got, podB) {
				t.Errorf("got kill switch state %q, want engaged for both pods", got)
			}
			ks := in.Admin.must(http.MethodGet, "/admin/killswitch", nil, http.StatusOK)
			if ks["engaged"] != true || len(strs(ks["pods"])) != 2 || ks["reason"] != "checkout errors" {
				t.Errorf("got kill switch %v through the API, want engaged for both with the reason", ks)
			}
			// Each row says since when and why, from KILLSWITCH.engagements.
			b.WaitFor(field(podA, "kill_reason") + ` === "checkout errors (erin)"`)
			if got := b.Text(fmt.Sprintf(`[data-pod=%q] [data-field="kill_since"]`, podB)); !strings.HasPrefix(got, "since 20") {
				t.Errorf("got pod B since %q, want the engagement time", got)
			}
		}},
		{"RowUnkillAfterConfirmation", func(t *testing.T) {
			b.Do(chromedp.Click(chromedp.CSS(fmt.Sprintf(`[data-pod=%q] [data-action="unkill"]`, podB))))
			b.WaitFor(`document.querySelector("#confirm-dialog").open`)
			b.Do(chromedp.SendKeys(chromedp.CSS("#confirm-reason"), "pod B is fine"), chromedp.Click(chromedp.CSS("#confirm-ok")))
			b.WaitFor(field(podB, "kill_switch") + ` === "off"`)
			in.Admin.tb = t
			ks := in.Admin.must(http.MethodGet, "/admin/killswitch", nil, http.StatusOK)
			if got := strs(ks["pods"]); len(got) != 1 || got[0] != podA {
				t.Errorf("got engaged pods %v through the API, want pod A alone", got)
			}
		}},
		{"WatchDrawsTheRealReport", func(t *testing.T) {
			card := fmt.Sprintf(`[data-testid="watch-%s"]`, podA)
			b.WaitFor(`(document.querySelector('` + card + ` [data-chart="divergence"] polyline[data-series="outcome_mismatch"]')?.getAttribute("points") || "").trim().split(/\s+/).length >= 2`)
			// Pod A is killed: the gates are pod B's.
			if got := b.Text(fmt.Sprintf(`[data-testid="watch-%s"] [data-gate="min_comparisons"]`, podB)); !strings.Contains(got, " of ") {
				t.Errorf("got the comparisons gate %q, want its value of its threshold", got)
			}
		}},
		{"ViewsSayWhatIsTrue", func(t *testing.T) {
			in.Admin.tb = t
			// Pod A is killed: its gates do not apply.
			b.WaitFor(field(podA, "passing") + ` === "n/a (killed)"`)
			// Pod A in mysql, then killed: Redis answers its buyers, and the
			// plan card counts it so.
			in.Admin.must(http.MethodDelete, "/admin/killswitch", obj{"reason": "promote by hand", "pods": []string{podA}}, http.StatusOK)
			in.Admin.must(http.MethodPut, "/admin/pods/"+podA+"/mode", obj{"mode": "mysql", "reason": "views", "force": true}, http.StatusOK)
			b.WaitFor(`document.querySelector("#plan-modes").textContent.startsWith("Pods now: 1 of 2 on MySQL")`)
			in.Admin.must(http.MethodPost, "/admin/killswitch", obj{"reason": "mysql errors", "pods": []string{podA}}, http.StatusOK)
			b.WaitFor(`document.querySelector("#plan-modes").textContent.startsWith("Pods now: 0 of 2 on MySQL")`)
			if got := b.Text("#plan-modes"); !strings.Contains(got, "killed, served by Redis: "+podA) {
				t.Errorf("got plan modes %q, want pod A named as killed and served by Redis", got)
			}
			// Two pods killed for different reasons: each says its own.
			in.Admin.must(http.MethodPost, "/admin/killswitch", obj{"reason": "pod B p99", "pods": []string{podB}}, http.StatusOK)
			b.WaitFor(fmt.Sprintf(`(document.querySelector('#killswitch-pods [data-pod=%q]')?.textContent || "").endsWith(": pod B p99")`, podB))
			if got := b.Text(fmt.Sprintf(`#killswitch-pods [data-pod=%q]`, podA)); !strings.HasSuffix(got, ": mysql errors") {
				t.Errorf("got pod A's engagement %q, want its own reason", got)
			}
			if got := b.Text("#killswitch-state"); strings.Contains(got, "reason") || strings.Contains(got, "since") {
				t.Errorf("got kill switch state %q, want no since or reason that mixes the pods", got)
			}
			b.WaitFor(field(podB, "passing") + ` === "n/a (killed)"`)
		}},
		{"Screenshot", func(t *testing.T) {
			b.WaitFor(`document.querySelector("#audit-log").textContent.includes("killswitch_engage")`)
			png := browsertest.Run(b, chromedp.FullScreenshot(100))
			dir := filepath.Join("..", "..", "..", "..", "artifacts")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "dashboard-e2e.png")
			if err := os.WriteFile(path, png, 0o644); err != nil {
				t.Fatal(err)
			}
			abs, _ := filepath.Abs(path)
			t.Logf("dashboard screenshot: %s", abs)
		}},
	}
	for _, s := range steps {
		if !t.Run(s.name, func(t *testing.T) { b.T = t; s.run(t) }) {
			return // later steps build on this one
		}
	}
}

// TestE2EDashboardViewer: with the viewer token the page shows every view,
// says it holds the viewer token and shows no control that changes
// anything.
func TestE2EDashboardViewer(t *testing.T) {
	testenv.RequireIntegration(t)
	cfg, _ := MustConfig(t)
	in := MustRunMain(t, cfg, func(m *server.Main) { m.ViewerToken = e2eViewerToken })
	podA := cfg.Pods[0].Name

	b := browsertest.MustOpen(t, in.AdminURL+"/")
	b.Do(chromedp.WaitVisible(chromedp.CSS("#token-input")))
	b.Do(chromedp.SendKeys(chromedp.CSS("#token-input"), e2eViewerToken), chromedp.Click(chromedp.CSS("#token-save")))
	b.WaitFor(fmt.Sprintf(`document.querySelector('[data-pod=%q] [data-field="mode"]')?.textContent === "shadow"`, podA))
	b.WaitFor(`document.querySelector("#token-role").dataset.role === "viewer"`)
	b.WaitFor(`document.querySelector("#error-banner").hidden`)
	if got := b.Text("#token-role"); got != "viewer token (read-only)" {
		t.Errorf("got token role %q, want viewer token (read-only)", got)
	}
	b.WaitFor(fmt.Sprintf(`document.querySelector("#instances").textContent.includes(%q)`, in.Main.InstanceID))
	hidden := func(sel string) string {
		return fmt.Sprintf(`Array.from(document.querySelectorAll(%q)).every((e) => getComputedStyle(e).display === "none")`, sel)
	}
	for _, sel := range []string{"#killswitch-engage", "#killswitch-disengage", `[data-action="mode"]`, `[data-action="audit"]`, `[data-action="kill"]`, `[data-action="unkill"]`, `[data-field="select"]`, "#plan-start", "#plan-pause", "#plan-abort"} {
		if n := browsertest.Eval[int](b, fmt.Sprintf(`document.querySelectorAll(%q).length`, sel)); n == 0 {
			t.Errorf("got no %s on the page, want it there but hidden", sel)
		}
		if !browsertest.Eval[bool](b, hidden(sel)) {
			t.Errorf("got %s shown to a viewer, want it hidden", sel)
		}
	}
	if !browsertest.Eval[bool](b, `getComputedStyle(document.querySelector('[data-testid="viewer-note"]')).display !== "none"`) {
		t.Errorf("got no read-only note for the viewer")
	}
}
