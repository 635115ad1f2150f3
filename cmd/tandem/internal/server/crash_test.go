package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tandemhq/tandem/internal/testenv"
)

// crashAdminToken is the admin token of the crash test's tandem serve.
const crashAdminToken = "crash-admin-token-0123456789"

// The crash test's positions: every shop of both pods sells items 1 and 2
// from group 1, with crashStock units each (plenty: the test is about
// holds and claims surviving the kill, not about selling out).
const (
	crashStock   = 500
	crashItems   = 2
	crashWorkers = 6
)

// crashShops are the shops of pod A (shadow, then mysql) and pod B (mysql,
// kill switch engaged: Redis answers).
var crashShops = [2][]int64{{1, 2, 3}, {11, 12, 13}}

// crashServer is one `tandem serve` process.
type crashServer struct {
	cmd  *exec.Cmd
	done chan struct{}
	log  *os.File
}

// crashHTTP is a client of both APIs of the server under test.
type crashHTTP struct {
	checkout, admin string
	client          *http.Client
}

// crashAnswer is one HTTP answer; status 0 means no answer arrived (the
// request may or may not have been applied).
type crashAnswer struct {
	status int
	body   map[string]any
}

func (c *crashHTTP) do(method, url string, body any, admin bool) crashAnswer {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			panic(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		panic(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if admin {
		req.Header.Set("Authorization", "Bearer "+crashAdminToken)
		req.Header.Set("X-Actor", "crash-test")
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return crashAnswer{}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return crashAnswer{}
	}
	a := crashAnswer{status: resp.StatusCode}
	_ = json.Unmarshal(data, &a.body)
	return a
}

func (c *crashHTTP) api(method, path string, body any) crashAnswer {
	return c.do(method, c.checkout+path, body, false)
}

func (c *crashHTTP) adm(method, path string, body any) crashAnswer {
	return c.do(method, c.admin+path, body, true)
}

// mustAdm calls the admin API and fails the test on another status.
func (c *crashHTTP) mustAdm(t *testing.T, method, path string, body any, want int) map[string]any {
	t.Helper()
	a := c.adm(method, path, body)
	if a.status != want {
		t.Fatalf("%s %s: got status %d %v, want %d", method, path, a.status, a.body, want)
	}
	return a.body
}

// freeAddr returns a loopback address no one listens on right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// mustBuildTandem builds the tandem binary into a temporary directory.
func mustBuildTandem(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "tandem")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/tandem")
	cmd.Dir = filepath.Join("..", "..", "..", "..")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/tandem: %v\n%s", err, out)
	}
	return bin
}

// mustStartServe starts `tandem serve --config path`, waits until it is
// ready, and kills it when the test ends if it still runs.
func mustStartServe(t *testing.T, bin, path string, c *crashHTTP, logName string) *crashServer {
	t.Helper()
	logf, err := os.Create(filepath.Join(t.TempDir(), logName))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", "--config", path)
	cmd.Env = append(os.Environ(), "TANDEM_ADMIN_TOKEN="+crashAdminToken)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &crashServer{cmd: cmd, done: make(chan struct{}), log: logf}
	go func() {
		_ = cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(func() {
		s.kill()
		logf.Close()
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-s.done:
			t.Fatalf("tandem serve exited before it was ready:\n%s", s.output())
		default:
		}
		if a := c.do(http.MethodGet, c.admin+"/readyz", nil, false); a.status == http.StatusOK {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("tandem serve not ready within 30s:\n%s", s.output())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// kill sends SIGKILL (no shutdown of any kind) and waits for the process
// to be gone. Safe to call twice.
func (s *crashServer) kill() {
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.done
}

func (s *crashServer) output() string {
	b, _ := os.ReadFile(s.log.Name())
	if len(b) > 8000 {
		b = b[len(b)-8000:]
	}
	return string(b)
}

// crashCart is what the buyers were told about one cart.
type crashCart struct {
	token string
	shop  int64
	lines map[int64]int64 // item -> quantity
	// reserve, claim and release are the statuses the last such call
	// answered: 0 never called, -1 called but no answer arrived.
	reserve, claim, release int
}

// TestCrashRestart runs the real binary, drives checkout traffic across two
// pods (one on MySQL, one killed back to Redis), SIGKILLs it mid-traffic,
// restarts it on the same config and checks that nothing the buyers were
// told was lost: holds still claim (once), claims and releases stand, the
// ledger reads stock less claims, modes and kill switch persist, and the
// audit shows whatever drift the kill left.
func TestCrashRestart(t *testing.T) {
	testenv.RequireIntegration(t)
	bin := mustBuildTandem(t)
	_, prefix := testenv.MustRedis(t)
	control := testenv.MustCreateDatabase(t)
	podA, podB := testenv.RandomName("crash-a-"), testenv.RandomName("crash-b-")
	dsnA, dsnB := testenv.MustCreateDatabase(t), testenv.MustCreateDatabase(t)
	c := &crashHTTP{
		checkout: "http://" + freeAddr(t), admin: "http://" + freeAddr(t),
		client: &http.Client{Timeout: 10 * time.Second},
	}
	config := fmt.Sprintf(`listen: %s
admin_listen: %s
control:
  mysql_dsn: %q
  redis_addr: %s
  redis_prefix: %q
reservation:
  default_ttl: 10m
  reaper_interval: 200ms
rollout:
  audit_interval: 0s
shadow:
  timeout: 1s
pods:
  - name: %s
    shops: ["1-3"]
    mode: redis
    mysql_dsn: %q
    redis_addr: %s
    redis_prefix: %q
  - name: %s
    shops: ["11-13"]
    mode: mysql
    mysql_dsn: %q
    redis_addr: %s
    redis_prefix: %q
`, strings.TrimPrefix(c.checkout, "http://"), strings.TrimPrefix(c.admin, "http://"),
		control, testenv.RedisAddr(), prefix+"control:",
		podA, dsnA, testenv.RedisAddr(), prefix+podA+":",
		podB, dsnB, testenv.RedisAddr(), prefix+podB+":")
	path := filepath.Join(t.TempDir(), "tandem.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}

	first := mustStartServe(t, bin, path, c, "serve-1.log")

	// Stock, then the control-plane changes the restart must keep: pod A
	// walks redis -> shadow -> mysql (forced past the gates), pod B's kill
	// switch is engaged (Redis answers for it while its mode stays mysql).
	for _, shops := range crashShops {
		for _, shop := range shops {
			for item := int64(1); item <= crashItems; item++ {
				a := c.api(http.MethodPut, fmt.Sprintf("/v1/inventory/%d/%d/1", shop, item), map[string]any{"on_hand": crashStock})
				if a.status != http.StatusOK {
					t.Fatalf("stock %d/%d/1: got status %d %v, want 200", shop, item, a.status, a.body)
				}
			}
		}
	}
	// Entering shadow answers 202 when the backfill outlasts the
	// controller's wait (a loaded machine): wait for the mode to apply.
	if a := c.adm(http.MethodPut, "/admin/pods/"+podA+"/mode", map[string]any{"mode": "shadow", "reason": "crash test"}); a.status == http.StatusAccepted {
		for deadline := time.Now().Add(30 * time.Second); !strings.HasPrefix(crashPods(t, c)[podA], "shadow/"); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("pod A did not enter shadow: %v", crashPods(t, c))
			}
		}
	} else if a.status != http.StatusOK {
		t.Fatalf("PUT mode shadow: got status %d %v, want 200 or 202", a.status, a.body)
	}
	c.mustAdm(t, http.MethodPut, "/admin/pods/"+podA+"/mode", map[string]any{"mode": "mysql", "reason": "crash test", "force": true}, http.StatusOK)
	c.mustAdm(t, http.MethodPost, "/admin/killswitch", map[string]any{"reason": "crash test", "pods": []string{podB}}, http.StatusOK)
	before := crashPods(t, c)
	if got := before[podA]; got != "mysql/false" {
		t.Fatalf("pod A before the kill: got mode/kill %s, want mysql/false", got)
	}
	if got := before[podB]; got != "mysql/true" {
		t.Fatalf("pod B before the kill: got mode/kill %s, want mysql/true", got)
	}

	// Checkout traffic from several buyers; SIGKILL in the middle of it.
	var (
		mu    sync.Mutex
		carts []*crashCart
		stop  atomic.Bool
		wg    sync.WaitGroup
	)
	for w := range crashWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 42))
			for n := 0; !stop.Load(); n++ {
				pod := rng.IntN(2)
				cc := &crashCart{
					token: fmt.Sprintf("crash-w%d-%d", w, n),
					shop:  crashShops[pod][rng.IntN(len(crashShops[pod]))],
					lines: map[int64]int64{},
				}
				var lines []map[string]any
				for item := int64(1); item <= crashItems; item++ {
					if item == 1 || rng.IntN(2) == 0 {
						q := int64(1 + rng.IntN(3))
						cc.lines[item] = q
						lines = append(lines, map[string]any{"inventory_item_id": item, "quantity": q, "group_ids": []int64{1}})
					}
				}
				mu.Lock()
				carts = append(carts, cc)
				mu.Unlock()
				cc.reserve = -1
				a := c.api(http.MethodPost, "/v1/reservations", map[string]any{"cart_token": cc.token, "shop_id": cc.shop, "lines": lines})
				cc.reserve = answerStatus(a)
				if a.status != http.StatusCreated {
					if a.status == 0 {
						return // the server is gone
					}
					continue
				}
				switch x := rng.IntN(10); {
				case x < 5:
					cc.claim = -1
					cc.claim = answerStatus(c.api(http.MethodPost, resPath(cc, "/claim"), nil))
				case x < 7:
					cc.release = -1
					cc.release = answerStatus(c.api(http.MethodDelete, resPath(cc, ""), nil))
				}
				if cc.claim == -1 || cc.release == -1 {
					return
				}
			}
		}()
	}
	time.Sleep(2 * time.Second)
	first.kill()
	stop.Store(true)
	wg.Wait()
	t.Logf("SIGKILL after %d carts were started", len(carts))

	second := mustStartServe(t, bin, path, c, "serve-2.log")
	defer second.kill()

	// Modes and kill switch as they were.
	after := crashPods(t, c)
	for _, pod := range []string{podA, podB} {
		if after[pod] != before[pod] {
			t.Errorf("pod %s after the restart: got mode/kill %s, want %s", pod, after[pod], before[pod])
		}
	}

	// Resolve what the kill left unknown by the carts' status, then claim
	// every hold still open: each must claim, once.
	counts := map[string]int{}
	claimed := map[[2]int64]int64{} // (shop, item) -> claimed quantity
	for _, cc := range carts {
		st := crashStatus(c, cc)
		switch {
		case cc.reserve == -1 && (st == "not_found" || st == "reserved" || st == "claimed"):
			counts["reserve answer lost: "+st]++
		case cc.claim == -1:
			counts["claim answer lost: "+st]++
		case cc.release == -1:
			counts["release answer lost: "+st]++
		case cc.reserve == -1:
			t.Errorf("cart %s: reserve answer lost, status %q after the restart", cc.token, st)
		}
		switch {
		case cc.reserve == http.StatusCreated && cc.claim == http.StatusOK && st != "claimed":
			t.Errorf("cart %s answered claimed before the kill; status %q after it, want claimed", cc.token, st)
		case cc.reserve == http.StatusCreated && cc.release == http.StatusOK && st != "released":
			t.Errorf("cart %s answered released before the kill; status %q after it, want released", cc.token, st)
		case cc.reserve == http.StatusCreated && cc.claim == 0 && cc.release == 0 && st != "reserved":
			t.Errorf("cart %s held before the kill; status %q after it, want reserved (a lost hold)", cc.token, st)
		}
		if st == "reserved" {
			a := c.api(http.MethodPost, resPath(cc, "/claim"), nil)
			if a.status != http.StatusOK || a.body["status"] != "claimed" {
				t.Errorf("claim of surviving hold %s: got %d %v, want 200 claimed", cc.token, a.status, a.body)
				continue
			}
			counts["holds claimed after the restart"]++
			st = "claimed"
		}
		if st == "claimed" {
			a := c.api(http.MethodPost, resPath(cc, "/claim"), nil)
			if a.status != http.StatusOK || a.body["status"] != "claimed" {
				t.Errorf("repeated claim of %s: got %d %v, want 200 claimed", cc.token, a.status, a.body)
			}
			for item, q := range cc.lines {
				claimed[[2]int64{cc.shop, item}] += q
			}
		}
		counts["final "+st]++
	}
	t.Logf("carts by what the kill did to them:%s", formatCounts(counts))

	// No double claim: every ledger reads its stock less the claimed carts.
	for _, shops := range crashShops {
		for _, shop := range shops {
			for item := int64(1); item <= crashItems; item++ {
				a := c.api(http.MethodGet, fmt.Sprintf("/v1/inventory/%d/%d/1", shop, item), nil)
				if a.status != http.StatusOK {
					t.Fatalf("inventory %d/%d/1: got status %d %v", shop, item, a.status, a.body)
				}
				want := crashStock - claimed[[2]int64{shop, item}]
				if got := int64(a.body["on_hand"].(float64)); got != want {
					t.Errorf("inventory %d/%d/1: got on_hand %d, want %d (stock %d less claimed)", shop, item, got, want, crashStock)
				}
				if got := a.body["reserved"].(float64); got != 0 {
					t.Errorf("inventory %d/%d/1: got reserved %v after every hold was claimed, want 0", shop, item, got)
				}
			}
		}
	}

	// The audit: clean, or showing the drift the kill left, never silently
	// wrong. What it shows is the shadow's in-flight work the SIGKILL threw
	// away (a shadow reserve, claim or release that never ran), and on the
	// Redis side the legacy claim's two-step window. For pod A (MySQL
	// answers) a resync from MySQL must make it clean.
	for _, pod := range []string{podA, podB} {
		a := c.mustAdm(t, http.MethodPost, "/admin/pods/"+pod+"/audit", map[string]any{"reason": "after the crash"}, http.StatusOK)
		if a["clean"] == true {
			t.Logf("pod %s audit after the restart: clean, %v positions checked", pod, a["checked"])
			continue
		}
		t.Logf("pod %s audit after the restart: drift shown: %v", pod, a["drifted"])
		for _, d := range a["drifted"].([]any) {
			d := d.(map[string]any)
			ledger := d["ledger_on_hand"]
			if d["redis_available"] == ledger && d["mysql_available"] == ledger {
				t.Errorf("pod %s: audit reports drift %v where both stores agree with the ledger", pod, d)
			}
		}
		if pod != podA {
			continue
		}
		r := c.mustAdm(t, http.MethodPost, "/admin/pods/"+pod+"/resync", map[string]any{"reason": "after the crash", "from": "mysql"}, http.StatusOK)
		a = c.mustAdm(t, http.MethodPost, "/admin/pods/"+pod+"/audit", map[string]any{"reason": "after the resync"}, http.StatusOK)
		if a["clean"] != true {
			t.Errorf("pod %s after resync (%v keys rewritten): audit %v, want clean", pod, r["keys_rewritten"], a)
		}
	}
}

func answerStatus(a crashAnswer) int {
	if a.status == 0 {
		return -1
	}
	return a.status
}

func resPath(cc *crashCart, suffix string) string {
	return fmt.Sprintf("/v1/reservations/%s%s?shop_id=%d", cc.token, suffix, cc.shop)
}

// crashStatus returns the cart's status, or the error code.
func crashStatus(c *crashHTTP, cc *crashCart) string {
	a := c.api(http.MethodGet, resPath(cc, ""), nil)
	if a.status == http.StatusOK {
		s, _ := a.body["status"].(string)
		return s
	}
	if e, ok := a.body["error"].(map[string]any); ok {
		s, _ := e["code"].(string)
		return s
	}
	return fmt.Sprintf("status %d", a.status)
}

// crashPods returns every pod's "mode/kill_switch".
func crashPods(t *testing.T, c *crashHTTP) map[string]string {
	t.Helper()
	body := c.mustAdm(t, http.MethodGet, "/admin/pods", nil, http.StatusOK)
	out := map[string]string{}
	for _, p := range body["pods"].([]any) {
		p := p.(map[string]any)
		out[p["pod"].(string)] = fmt.Sprintf("%v/%v", p["mode"], p["kill_switch"])
	}
	return out
}

func formatCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "\n  %-40s %d", k, m[k])
	}
	return b.String()
}
