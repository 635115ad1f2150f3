// Package browsertest drives Debian's headless Chromium with chromedp for
// the dashboard's browser tests.
package browsertest

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tandemhq/tandem/internal/testenv"
)

// ChromiumPath is where Debian's chromium package installs the browser.
const ChromiumPath = "/usr/bin/chromium"

// Page is one browser tab. T is the (sub)test that actions fail; set it to
// the running subtest.
type Page struct {
	T   *testing.T
	Ctx context.Context
}

// MustOpen starts headless Chromium with the flags this machine needs (no
// sandbox as root, no background networking on a closed network, a fresh
// profile), opens url and closes the browser when t ends. It skips under
// -short and fails, naming the package, when Chromium is missing.
func MustOpen(t *testing.T, url string) *Page {
	t.Helper()
	testenv.RequireIntegration(t)
	if _, err := os.Stat(ChromiumPath); err != nil {
		t.Fatalf("headless Chromium is required at %s: install the Debian package with `apt-get install -y chromium` (%v)", ChromiumPath, err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(ChromiumPath),
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
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx, chromedp.Navigate(url)); err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	return &Page{T: t, Ctx: ctx}
}

// Do runs chromedp actions and fails the current test on error.
func (p *Page) Do(actions ...chromedp.Action[chromedp.Void]) {
	p.T.Helper()
	ctx, cancel := context.WithTimeout(p.Ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		p.T.Fatalf("browser: %v", err)
	}
}

// WaitFor waits until the JavaScript expression is truthy on the page.
func (p *Page) WaitFor(expr string) {
	p.T.Helper()
	ctx, cancel := context.WithTimeout(p.Ctx, 20*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
		p.T.Fatalf("waiting for %s: %v (page text: %s)", expr, err, p.PageText())
	}
}

// Text returns the trimmed text of the first element matching sel.
func (p *Page) Text(sel string) string {
	p.T.Helper()
	return Eval[string](p, `document.querySelector(`+jsString(sel)+`)?.textContent?.trim() ?? ""`)
}

// PageText returns the page's visible text, for failure messages.
func (p *Page) PageText() string {
	ctx, cancel := context.WithTimeout(p.Ctx, 5*time.Second)
	defer cancel()
	s, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
	return s
}

// Eval evaluates a JavaScript expression on the page.
func Eval[T any](p *Page, expr string) T {
	p.T.Helper()
	return Run(p, chromedp.Evaluate[T](expr))
}

// Run runs one chromedp action with a result.
func Run[T any](p *Page, a chromedp.Action[T]) T {
	p.T.Helper()
	ctx, cancel := context.WithTimeout(p.Ctx, 20*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		p.T.Fatalf("browser: %v", err)
	}
	return v
}

func jsString(s string) string {
	b := []byte{'"'}
	for _, c := range []byte(s) {
		if c == '"' || c == '\\' {
			b = append(b, '\\')
		}
		b = append(b, c)
	}
	return string(append(b, '"'))
}
