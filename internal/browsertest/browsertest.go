// Package browsertest drives Debian's headless Chromium with chromedp for
// the dashboard's browser tests.
package browsertest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
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
	console := &consoleLog{}
	if err := chromedp.Listen(ctx, console.add); err != nil {
		t.Fatalf("listen to the page's console: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("page console and uncaught exceptions:\n%s", console.String())
		}
	})
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
		p.T.Fatalf("waiting for %s: %v (form state: %s) (page text: %s)", expr, err, p.FormState(), p.PageText())
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

// FormState describes, for failure messages, what a person would see of the
// page's forms: the focused element, the open dialogs, and each input's value
// and each button's state.
func (p *Page) FormState() string {
	ctx, cancel := context.WithTimeout(p.Ctx, 5*time.Second)
	defer cancel()
	s, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`JSON.stringify({
		focused: document.activeElement ? (document.activeElement.id || document.activeElement.tagName) : null,
		dialogs: Array.from(document.querySelectorAll("dialog[open]")).map((d) => d.id),
		inputs: Array.from(document.querySelectorAll("input, select")).filter((e) => e.value || e.checked).map((e) => e.id + "=" + (e.type === "checkbox" ? e.checked : e.value)),
		disabled: Array.from(document.querySelectorAll("button:disabled")).map((e) => e.id || e.textContent.trim()),
	})`))
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

// consoleLog keeps what the page wrote to its console and the exceptions
// nothing caught, for the log of a failed test.
type consoleLog struct {
	mu    sync.Mutex
	lines []string
}

func (c *consoleLog) add(ev any) {
	var line string
	switch ev := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		args := make([]string, 0, len(ev.Args))
		for _, a := range ev.Args {
			if len(a.Value) > 0 {
				args = append(args, string(a.Value))
			} else {
				args = append(args, a.Description)
			}
		}
		line = fmt.Sprintf("%s console.%s: %s", stamp(ev.Timestamp), ev.Type, strings.Join(args, " "))
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		line = fmt.Sprintf("%s uncaught: %s", stamp(ev.Timestamp), d.Text)
		if d.Exception != nil {
			line += " " + d.Exception.Description
		}
	default:
		return
	}
	c.mu.Lock()
	c.lines = append(c.lines, line)
	c.mu.Unlock()
}

func (c *consoleLog) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.lines) == 0 {
		return "(nothing)"
	}
	return strings.Join(c.lines, "\n")
}

// stamp formats a console timestamp (milliseconds since the epoch).
func stamp(ts runtime.Timestamp) string {
	return time.UnixMilli(int64(ts)).UTC().Format("15:04:05.000")
}
