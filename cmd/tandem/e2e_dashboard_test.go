package main_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tandemhq/tandem/internal/testenv"
)

const chromiumPath = "/usr/bin/chromium"

// TestE2EDashboard drives the dashboard page, served by a real `tandem
// serve`, in headless Chromium: token entry, a redis -> shadow flip through
// the dialog, the kill switch with confirmation, checked on the page and
// through the admin API.
func TestE2EDashboard(t *testing.T) {
	testenv.RequireIntegration(t)
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Fatalf("headless Chromium is required at %s: install the Debian package with `apt-get install -y chromium` (%v)", chromiumPath, err)
	}
	cfg, _ := MustConfig(t)
	in := MustRunMain(t, cfg)
	podA, podB := cfg.Pods[0].Name, cfg.Pods[1].Name
	in.Checkout.must(http.MethodPut, inventoryPath(shopA, 1, 1), obj{"on_hand": 3}, http.StatusOK)
	in.Checkout.must(http.MethodPost, "/v1/reservations", cart("dash-1", shopA, line(1, 1, 1)), http.StatusCreated)

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1400, 1100),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(in.AdminURL+"/")); err != nil {
		t.Fatalf("open the dashboard: %v", err)
	}
	b := &page{t: t, ctx: ctx}
	field := func(pod, name string) string {
		return fmt.Sprintf(`document.querySelector('[data-pod=%q] [data-field=%q]')?.textContent`, pod, name)
	}

	steps := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"TokenShowsTheRealPods", func(t *testing.T) {
			b.do(chromedp.WaitVisible(chromedp.CSS("#token-input")))
			b.do(chromedp.SendKeys(chromedp.CSS("#actor-input"), "erin"),
				chromedp.SendKeys(chromedp.CSS("#token-input"), in.AdminToken), chromedp.Click(chromedp.CSS("#token-save")))
			b.waitFor(field(podA, "mode") + ` === "shadow"`)
			b.waitFor(field(podB, "mode") + ` === "redis"`)
			if got := b.text(fmt.Sprintf(`[data-pod=%q] [data-field="kill_switch"]`, podB)); got != "off" {
				t.Errorf("got pod B kill switch %q, want off", got)
			}
			b.waitFor(`document.querySelector("#error-banner").hidden`)
			b.waitFor(fmt.Sprintf(`document.querySelector("#instances").textContent.includes(%q)`, in.Main.InstanceID))
		}},
		{"ModeDialogFlipsRedisToShadow", func(t *testing.T) {
			b.do(chromedp.Click(chromedp.CSS(fmt.Sprintf(`[data-pod=%q] [data-action="mode"]`, podB))))
			b.waitFor(`document.querySelector("#dryrun-result").dataset.state === "would-apply"`)
			if got := eval[string](b, `document.querySelector("#mode-target").value`); got != "shadow" {
				t.Errorf("got target mode %q offered for a redis pod, want shadow", got)
			}
			in.Admin.tb = t
			if got := podStatus(in.Admin, podB)["mode"]; got != "redis" {
				t.Fatalf("got pod B mode %v after the dry run, want redis", got)
			}
			b.do(chromedp.SendKeys(chromedp.CSS("#confirm-reason"), "shadow B from the dashboard"), chromedp.Click(chromedp.CSS("#confirm-ok")))
			b.waitFor(field(podB, "mode") + ` === "shadow"`)
			b.waitFor(`!document.querySelector("#confirm-dialog").open`)
			st := podStatus(in.Admin, podB)
			if st["mode"] != "shadow" || st["shadow"] != "mysql" {
				t.Errorf("got pod B %v through the API, want shadow", st)
			}
			if !auditLogHas(in.Admin, "set_mode", podB, "shadow B from the dashboard") {
				t.Errorf("got no set_mode entry with the dashboard's reason")
			}
			b.waitFor(`document.querySelector("#audit-log").textContent.includes("erin")`)
		}},
		{"RefusedPromotionShowsTheFailedGates", func(t *testing.T) {
			b.do(chromedp.Click(chromedp.CSS(fmt.Sprintf(`[data-pod=%q] [data-action="mode"]`, podA))))
			b.waitFor(`document.querySelector("#dryrun-result").dataset.state === "would-refuse"`)
			if got := b.text("#dryrun-result"); !strings.Contains(got, "min_comparisons") {
				t.Errorf("got dry run %q, want the failed gate min_comparisons", got)
			}
			b.do(chromedp.Click(chromedp.CSS("#confirm-cancel")))
			b.waitFor(`!document.querySelector("#confirm-dialog").open`)
			in.Admin.tb = t
			if got := podStatus(in.Admin, podA)["mode"]; got != "shadow" {
				t.Errorf("got pod A mode %v, want shadow (nothing applied)", got)
			}
		}},
		{"KillSwitchEngagesAfterConfirmation", func(t *testing.T) {
			b.do(chromedp.Click(chromedp.CSS("#killswitch-engage")))
			b.waitFor(`document.querySelector("#confirm-dialog").open`)
			in.Admin.tb = t
			if ks := in.Admin.must(http.MethodGet, "/admin/killswitch", nil, http.StatusOK); ks["engaged"] != false {
				t.Fatalf("got the kill switch %v before confirmation, want off", ks)
			}
			b.do(chromedp.SendKeys(chromedp.CSS("#confirm-reason"), "checkout errors"), chromedp.Click(chromedp.CSS("#confirm-ok")))
			b.waitFor(`document.querySelector("#killswitch-state").dataset.engaged === "true"`)
			b.waitFor(field(podA, "kill_switch") + ` === "engaged"`)
			b.waitFor(field(podB, "kill_switch") + ` === "engaged"`)
			if got := b.text("#killswitch-state"); !strings.Contains(got, "Engaged") || !strings.Contains(got, podA) || !strings.Contains(got, podB) {
				t.Errorf("got kill switch state %q, want engaged for both pods", got)
			}
			ks := in.Admin.must(http.MethodGet, "/admin/killswitch", nil, http.StatusOK)
			if ks["engaged"] != true || len(strs(ks["pods"])) != 2 || ks["reason"] != "checkout errors" {
				t.Errorf("got kill switch %v through the API, want engaged for both with the reason", ks)
			}
		}},
		{"Screenshot", func(t *testing.T) {
			b.waitFor(`document.querySelector("#audit-log").textContent.includes("killswitch_engage")`)
			png := eval2(b, chromedp.FullScreenshot(100))
			dir := filepath.Join("..", "..", "artifacts")
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
		if !t.Run(s.name, func(t *testing.T) { b.t = t; s.run(t) }) {
			return // later steps build on this one
		}
	}
}

// page runs chromedp actions and fails the current (sub)test on error.
type page struct {
	t   *testing.T
	ctx context.Context
}

func (b *page) do(actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("browser: %v", err)
	}
}

// waitFor waits until the JavaScript expression is truthy on the page.
func (b *page) waitFor(expr string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
		b.t.Fatalf("waiting for %s: %v (page text: %s)", expr, err, b.pageText())
	}
}

func (b *page) text(sel string) string {
	b.t.Helper()
	return eval[string](b, fmt.Sprintf(`document.querySelector(%q)?.textContent?.trim() ?? ""`, sel))
}

func (b *page) pageText() string {
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	s, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
	return s
}

func eval[T any](b *page, expr string) T {
	b.t.Helper()
	return eval2(b, chromedp.Evaluate[T](expr))
}

func eval2[T any](b *page, a chromedp.Action[T]) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		b.t.Fatalf("browser: %v", err)
	}
	return v
}
