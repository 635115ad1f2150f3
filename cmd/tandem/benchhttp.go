package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"runtime/pprof"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/zap/zapcore"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/internal/loadgen"
)

// httpBench is `tandem bench http`: the engine bench's reserve load sent
// through `tandem serve` over HTTP, one cell per mode.
//
// Without --config it runs its own server in-process on scratch databases
// and a scratch Redis prefix, and restarts it before every cell (the
// persisted mode survives, as in production) so that the comparator's
// window, hence the report's shadow latency, holds that cell's traffic
// only. With --config it drives the running server the file describes;
// the report's latencies then cover the server's whole gate window, and
// the pod is left in the last mode measured. Each cell stocks fresh items
// of --shop (ids drawn at random above 1,000,000) to tandem.MaxOnHand.
type httpBench struct {
	configPath  string
	modes       []tandem.Mode
	concurrency int
	rate        float64
	duration    time.Duration
	warmup      time.Duration
	items       int
	cartSize    int
	shop        int64
	pod         string
	mysqlDSN    string
	redis       benchRedis
	cpuProfile  string
	json        bool
}

// httpResult is a BenchResult whose fields that the http suite always
// reports are never left out of the JSON, zero or not.
type httpResult struct {
	BenchResult
	Rate           float64 `json:"rate"`
	ShadowP99MS    float64 `json:"shadow_p99_ms"`
	ShadowDrops    int64   `json:"shadow_drops"`
	ShadowTimeouts int64   `json:"shadow_timeouts"`
	// KillSwitch is true when the pod's kill switch was engaged at the end
	// of the cell (the automatic abort trips it when the divergence rate
	// crosses its threshold): the cell was then served by Redis in part.
	KillSwitch bool `json:"kill_switch"`
}

func runBenchHTTP(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("tandem bench http")
	cfgPath := fs.String("config", "", "drive the running server of this config `FILE` (admin token from TANDEM_ADMIN_TOKEN); none runs one in-process on scratch databases")
	modes := fs.String("modes", "redis,shadow,mysql", "pod modes to measure, in order (redis, shadow, mysql, mysql_only)")
	conc := fs.Int("concurrency", 32, "closed loop: concurrent buyers; open loop (--rate): the most requests in flight, arrivals beyond it count as errors")
	rate := fs.Float64("rate", 0, "offered reserves per second, open loop (0: closed loop)")
	dur := fs.Duration("duration", 8*time.Second, "measured duration of each cell")
	warmup := fs.Duration("warmup", -1, "unmeasured load before each cell (default: a quarter of --duration, at most 1s)")
	items := fs.Int("items", 1, "items the load is spread over (1: one hot item)")
	cartSize := fs.Int("cart-size", 1, "units per cart, as lines of distinct items (at most --items lines)")
	shop := fs.Int64("shop", 1, "shop the carts belong to")
	pod := fs.String("pod", "", "pod whose mode is set per cell (default: the pod that lists --shop)")
	dsn := fs.String("mysql-dsn", "root@tcp(127.0.0.1:3306)/", "in-process: MySQL server (scratch databases are created and dropped)")
	raddr := fs.String("redis-addr", "127.0.0.1:6379", "in-process: Redis server (a scratch key prefix is used and deleted)")
	rcluster := fs.String("redis-cluster", "", "in-process: a Redis Cluster's seed nodes (host:port,...) for the pod and the control plane, instead of --redis-addr")
	cpu := fs.String("cpuprofile", "", "write a CPU profile of the measured cells (client and in-process server) to this `FILE`")
	kill := fs.Int("killswitch", 0, "instead of the load, time N kill switch changes between two in-process instances")
	js := fs.Bool("json", false, "print JSON")
	if err := parseArgs(fs, args, benchHTTPSynopsis, benchHTTPSummary, stdout); err != nil {
		return err
	}
	if *kill < 0 {
		fmt.Fprintln(stderr, "--killswitch must be >= 0")
		return errUsage
	}
	if *kill > 0 {
		return runBenchKillSwitch(ctx, *dsn, newBenchRedis(*raddr, *rcluster), *kill, *js, stdout, stderr)
	}
	b := httpBench{configPath: *cfgPath, concurrency: *conc, rate: *rate, duration: *dur, warmup: *warmup,
		items: *items, cartSize: *cartSize, shop: *shop, pod: *pod, mysqlDSN: *dsn, redis: newBenchRedis(*raddr, *rcluster),
		cpuProfile: *cpu, json: *js}
	for _, m := range strings.Split(*modes, ",") {
		md := tandem.Mode(strings.TrimSpace(m))
		if !md.Valid() {
			fmt.Fprintf(stderr, "--modes: unknown mode %q (want redis, shadow, mysql, mysql_only)\n", m)
			return errUsage
		}
		b.modes = append(b.modes, md)
	}
	if b.concurrency < 1 || b.items < 1 || b.cartSize < 1 || b.duration <= 0 || b.rate < 0 || b.shop < 1 {
		fmt.Fprintln(stderr, "--concurrency, --items, --cart-size, --duration and --shop must be positive, --rate >= 0")
		return errUsage
	}
	if b.warmup < 0 {
		b.warmup = min(b.duration/4, time.Second)
	}
	results, err := b.run(ctx, stderr)
	if err != nil {
		return err
	}
	return printHTTPResults(stdout, results, b.json)
}

// printHTTPResults prints the engine bench's table plus a shadow line per
// cell, or the JSON.
func printHTTPResults(w io.Writer, results []httpResult, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"results": results})
	}
	plain := make([]BenchResult, len(results))
	for i, r := range results {
		plain[i] = r.BenchResult
	}
	if err := printResults(w, plain, false); err != nil {
		return err
	}
	for _, r := range results {
		load := fmt.Sprintf("C=%d", r.Concurrency)
		if r.Rate > 0 {
			load = fmt.Sprintf("rate=%.0f/s", r.Rate)
		}
		killed := ""
		if r.KillSwitch {
			killed = " (KILL SWITCH ENGAGED: served by Redis in part)"
		}
		fmt.Fprintf(w, "shadow of %s at %s: p99 %.2f ms, drops %d, timeouts %d%s\n",
			r.Mode, load, r.ShadowP99MS, r.ShadowDrops, r.ShadowTimeouts, killed)
	}
	return nil
}

// benchTarget is the server a bench drives: its addresses and tokens, and
// for an in-process server how to restart it between cells.
type benchTarget struct {
	checkout   string // host:port
	admin      string // host:port
	adminToken string
	apiToken   string
	pod        string
	// restart, when set, replaces the in-process server by a fresh one on
	// the same databases and updates the addresses.
	restart func(ctx context.Context) error
	close   func()
}

func (b *httpBench) run(ctx context.Context, progress io.Writer) ([]httpResult, error) {
	var t *benchTarget
	var err error
	if b.configPath != "" {
		t, err = b.remoteTarget()
	} else {
		t, err = b.localTarget(ctx, progress)
	}
	if err != nil {
		return nil, err
	}
	defer t.close()
	if b.cpuProfile != "" {
		f, err := os.Create(b.cpuProfile)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return nil, err
		}
		defer pprof.StopCPUProfile()
	}
	// Fresh item ids per run and per cell: the hot item is stocked anew
	// before each cell and never sells out, and a running server's other
	// inventory is left alone.
	run := fmt.Sprintf("%x", rand.Uint32())
	itemBase := int64(1_000_000 + rand.IntN(1_000_000_000))
	var results []httpResult
	for cellNo, mode := range b.modes {
		if t.restart != nil && cellNo > 0 {
			if err := t.restart(ctx); err != nil {
				return results, err
			}
		}
		load := fmt.Sprintf("C=%d", b.concurrency)
		if b.rate > 0 {
			load = fmt.Sprintf("rate=%.0f/s", b.rate)
		}
		fmt.Fprintf(progress, "bench http: %s %s for %s...\n", mode, load, b.duration)
		c := newBenchClient(t, b.concurrency)
		r, err := b.cell(ctx, c, progress, mode, fmt.Sprintf("%s-%d", run, cellNo), itemBase+int64(cellNo*b.items))
		c.close()
		if err != nil {
			return results, fmt.Errorf("%s: %w", mode, err)
		}
		results = append(results, r)
	}
	return results, nil
}

// remoteTarget reads the config of a running server.
func (b *httpBench) remoteTarget() (*benchTarget, error) {
	cfg, err := LoadConfig(b.configPath)
	if err != nil {
		return nil, err
	}
	t := &benchTarget{checkout: dialAddr(cfg.Listen), admin: dialAddr(cfg.AdminListen),
		adminToken: os.Getenv("TANDEM_ADMIN_TOKEN"), apiToken: os.Getenv("TANDEM_API_TOKEN"), close: func() {}}
	if t.adminToken == "" {
		return nil, errors.New("bench http --config: TANDEM_ADMIN_TOKEN is required (modes are set through the admin API)")
	}
	if t.pod, err = b.podOf(cfg); err != nil {
		return nil, err
	}
	return t, nil
}

// podOf returns --pod, or the pod that lists --shop.
func (b *httpBench) podOf(cfg Config) (string, error) {
	for _, p := range cfg.Pods {
		if b.pod == "" && p.ShopSet().Contains(b.shop) || b.pod != "" && p.Name == b.pod {
			if !p.ShopSet().Contains(b.shop) {
				return "", fmt.Errorf("bench http: pod %s does not list shop %d", p.Name, b.shop)
			}
			return p.Name, nil
		}
	}
	if b.pod != "" {
		return "", fmt.Errorf("bench http: no pod %q in the config", b.pod)
	}
	return "", fmt.Errorf("bench http: no pod lists shop %d", b.shop)
}

// dialAddr turns a listen address into one to dial.
func dialAddr(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

// benchServers are scratch databases and a Redis prefix with the config of
// a one-pod fleet on them, for in-process servers.
type benchServers struct {
	env *benchEnv
	cfg Config
}

func newBenchServers(ctx context.Context, mysqlDSN string, rt benchRedis, shop int64, mode tandem.Mode) (*benchServers, error) {
	env, err := newBenchEnv(ctx, &engineBench{mysqlDSN: mysqlDSN, redis: rt})
	if err != nil {
		return nil, err
	}
	controlDB := env.dbName + "_control"
	if _, err := env.rootDB.ExecContext(ctx, "CREATE DATABASE "+controlDB); err != nil {
		env.close()
		return nil, err
	}
	env.cleanup = append(env.cleanup, func() { env.rootDB.Exec("DROP DATABASE IF EXISTS " + controlDB) })
	dsn, err := mysql.ParseDSN(env.dsn)
	if err != nil {
		env.close()
		return nil, err
	}
	dsn.DBName = controlDB
	cfg := DefaultConfig()
	cfg.Listen, cfg.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Control.MySQLDSN = dsn.FormatDSN()
	cluster := len(rt.cluster) > 0
	cfg.Control.RedisAddr, cfg.Control.RedisAddrs, cfg.Control.RedisCluster = rt.addr, rt.cluster, cluster
	cfg.Control.RedisPrefix = env.prefix + "control:"
	// The scheduled audit would land in some cells and not others.
	cfg.Rollout.AuditInterval = 0
	cfg.Pods = []PodConfig{{
		Name: "bench", Shops: []string{fmt.Sprint(shop)}, Mode: string(mode),
		MySQLDSN: env.dsn, RedisAddr: rt.addr, RedisAddrs: rt.cluster, RedisCluster: cluster, RedisPrefix: env.prefix + "bench:",
	}}
	if err := cfg.Validate(); err != nil {
		env.close()
		return nil, err
	}
	return &benchServers{env: env, cfg: cfg}, nil
}

// start runs one in-process `tandem serve` on the servers' config. Its
// logger writes warnings and errors to w.
func (s *benchServers) start(ctx context.Context, adminToken string, w io.Writer) (*Main, error) {
	m := NewMain()
	m.Config = s.cfg
	m.AdminToken = adminToken
	m.InstanceID = "bench-" + randomHex(4)
	m.Stdout, m.Stderr = io.Discard, w
	m.Logger = newLogger("console", zapcore.WarnLevel, w)
	if err := m.Run(ctx); err != nil {
		return nil, err
	}
	return m, nil
}

func (s *benchServers) close() { s.env.close() }

// localTarget starts an in-process server on scratch stores.
func (b *httpBench) localTarget(ctx context.Context, progress io.Writer) (*benchTarget, error) {
	srv, err := newBenchServers(ctx, b.mysqlDSN, b.redis, b.shop, tandem.ModeRedis)
	if err != nil {
		return nil, err
	}
	t := &benchTarget{adminToken: randomHex(16), pod: "bench"}
	var m *Main
	t.restart = func(ctx context.Context) error {
		if m != nil {
			m.Close()
			m = nil
		}
		var err error
		if m, err = srv.start(ctx, t.adminToken, progress); err != nil {
			return fmt.Errorf("in-process server: %w", err)
		}
		t.checkout, t.admin = m.CheckoutAddr, m.AdminAddr
		return nil
	}
	t.close = func() {
		if m != nil {
			m.Close()
		}
		srv.close()
	}
	if err := t.restart(ctx); err != nil {
		t.close()
		return nil, err
	}
	return t, nil
}

// benchClient talks to a target over one keep-alive transport with enough
// idle connections for every concurrent buyer.
type benchClient struct {
	t      *benchTarget
	tr     *http.Transport
	client *http.Client
}

func newBenchClient(t *benchTarget, concurrency int) *benchClient {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        concurrency + 16,
		MaxIdleConnsPerHost: concurrency + 16,
		IdleConnTimeout:     90 * time.Second,
	}
	return &benchClient{t: t, tr: tr, client: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
}

func (c *benchClient) close() { c.tr.CloseIdleConnections() }

// apiError is a non-2xx answer: its status and the error JSON's code.
type apiError struct {
	Status  int
	Code    string
	Message string
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message)
}

// do sends a JSON request and decodes a 2xx answer into out (when not nil);
// it returns the status, or an *apiError for any other answer.
func (c *benchClient) do(ctx context.Context, method, url, token string, body []byte, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return 0, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("X-Actor", "tandem-bench")
	resp, err := c.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return resp.StatusCode, err
	}
	if resp.StatusCode/100 != 2 {
		var eb struct {
			Error struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		_ = json.Unmarshal(data, &eb)
		return resp.StatusCode, &apiError{Status: resp.StatusCode, Code: eb.Error.Code, Message: eb.Error.Message}
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s %s: decode answer: %w", method, url, err)
		}
	}
	return resp.StatusCode, nil
}

func (c *benchClient) admin(ctx context.Context, method, path string, body, out any) error {
	var data []byte
	if body != nil {
		var err error
		if data, err = json.Marshal(body); err != nil {
			return err
		}
	}
	if _, err := c.do(ctx, method, "http://"+c.t.admin+path, c.t.adminToken, data, out); err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	return nil
}

func (c *benchClient) checkout(ctx context.Context, method, path string, body, out any) (int, error) {
	var data []byte
	if body != nil {
		var err error
		if data, err = json.Marshal(body); err != nil {
			return 0, err
		}
	}
	return c.do(ctx, method, "http://"+c.t.checkout+path, c.t.apiToken, data, out)
}

const benchReason = "tandem bench http"

// modePath returns the transitions that take a pod from one mode to
// another, one allowed step at a time (API.md "Modes").
func modePath(from, to tandem.Mode) []tandem.Mode {
	order := []tandem.Mode{tandem.ModeRedis, tandem.ModeShadow, tandem.ModeMySQL, tandem.ModeMySQLOnly}
	pos := func(m tandem.Mode) int {
		for i, o := range order {
			if o == m {
				return i
			}
		}
		return -1
	}
	i, j := pos(from), pos(to)
	if i < 0 || j < 0 {
		return nil
	}
	var path []tandem.Mode
	for i != j {
		if i < j {
			i++
		} else {
			i--
		}
		path = append(path, order[i])
	}
	return path
}

// setMode walks the pod to mode through the admin API; shadow -> mysql is
// forced past the gates (a bench cannot wait for them), and mysql_only ->
// mysql resyncs Redis first, as the API requires.
func (c *benchClient) setMode(ctx context.Context, mode tandem.Mode) error {
	var pod tandem.PodStatus
	if err := c.admin(ctx, http.MethodGet, "/admin/pods/"+c.t.pod, nil, &pod); err != nil {
		return err
	}
	from := pod.Mode
	for _, step := range modePath(from, mode) {
		if from == tandem.ModeMySQLOnly {
			body := map[string]string{"reason": benchReason, "from": "mysql"}
			if err := c.admin(ctx, http.MethodPost, "/admin/pods/"+c.t.pod+"/resync", body, nil); err != nil {
				return err
			}
		}
		body := map[string]any{"mode": step, "reason": benchReason,
			"force": from == tandem.ModeShadow && step == tandem.ModeMySQL}
		if err := c.admin(ctx, http.MethodPut, "/admin/pods/"+c.t.pod+"/mode", body, &pod); err != nil {
			return err
		}
		from = step
	}
	return nil
}

// stock sets the cell's items to the largest on_hand and waits until the
// checkout API answers them from mode's source of truth (other instances
// of a fleet apply a mode change within a second).
func (c *benchClient) stock(ctx context.Context, shop int64, items []int64, mode tandem.Mode) error {
	want := mode.SourceOfTruth()
	for _, item := range items {
		path := fmt.Sprintf("/v1/inventory/%d/%d/1", shop, item)
		if _, err := c.checkout(ctx, http.MethodPut, path, map[string]int64{"on_hand": tandem.MaxOnHand}, nil); err != nil {
			return fmt.Errorf("PUT %s: %w", path, err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for {
			var inv tandem.Inventory
			if _, err := c.checkout(ctx, http.MethodGet, path, nil, &inv); err != nil {
				return fmt.Errorf("GET %s: %w", path, err)
			}
			if inv.SourceOfTruth == want {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("GET %s: source of truth %s, want %s (kill switch engaged?)", path, inv.SourceOfTruth, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

// report returns the pod's REPORT.
func (c *benchClient) report(ctx context.Context) (tandem.Report, error) {
	var body struct {
		Pods []tandem.Report `json:"pods"`
	}
	if err := c.admin(ctx, http.MethodGet, "/admin/report", nil, &body); err != nil {
		return tandem.Report{}, err
	}
	for _, r := range body.Pods {
		if r.Pod == c.t.pod {
			return r, nil
		}
	}
	return tandem.Report{}, fmt.Errorf("GET /admin/report: no pod %s", c.t.pod)
}

// settledReport waits until the shadow work of the cell has been compared
// (the comparison count stops moving), at most a few seconds.
func (c *benchClient) settledReport(ctx context.Context) (tandem.Report, error) {
	prev, err := c.report(ctx)
	if err != nil {
		return prev, err
	}
	for range 30 {
		time.Sleep(100 * time.Millisecond)
		r, err := c.report(ctx)
		if err != nil {
			return r, err
		}
		if r.Comparisons == prev.Comparisons {
			return r, nil
		}
		prev = r
	}
	return prev, nil
}

type benchLine struct {
	ItemID   int64   `json:"inventory_item_id"`
	Quantity int64   `json:"quantity"`
	GroupIDs []int64 `json:"group_ids"`
}

type benchReserve struct {
	CartToken string      `json:"cart_token"`
	ShopID    int64       `json:"shop_id"`
	Lines     []benchLine `json:"lines"`
}

// cell measures one mode: set the mode, stock fresh items, warm up, run
// the measured load, then read the shadow's latency and drops.
func (b *httpBench) cell(ctx context.Context, c *benchClient, progress io.Writer, mode tandem.Mode, cellID string, itemBase int64) (httpResult, error) {
	res := httpResult{BenchResult: BenchResult{Suite: "http", Mode: string(mode), Items: b.items, CartSize: b.cartSize,
		Concurrency: b.concurrency, Rate: b.rate}, Rate: b.rate}
	if err := c.setMode(ctx, mode); err != nil {
		return res, err
	}
	items := make([]int64, b.items)
	for i := range items {
		items[i] = itemBase + int64(i)
	}
	if err := c.stock(ctx, b.shop, items, mode); err != nil {
		return res, err
	}
	shape := engineBench{items: b.items, cartSize: b.cartSize}
	url := "http://" + c.t.checkout + "/v1/reservations"
	var refused atomic.Int64
	var firstErr sync.Once
	var failure error
	reserve := func(phase string) loadgen.Op {
		return func(ctx context.Context, w int, seq int64) error {
			lines := shape.cart(int64(w) + seq*int64(b.concurrency))
			req := benchReserve{CartToken: fmt.Sprintf("bh-%s-%s-%d-%d", cellID, phase, w, seq), ShopID: b.shop,
				Lines: make([]benchLine, len(lines))}
			for i, l := range lines {
				req.Lines[i] = benchLine{ItemID: itemBase + l.ItemID - 1, Quantity: l.Quantity, GroupIDs: []int64{1}}
			}
			body, err := json.Marshal(req)
			if err != nil {
				return err
			}
			status, err := c.do(ctx, http.MethodPost, url, c.t.apiToken, body, nil)
			var ae *apiError
			switch {
			case err == nil && status == http.StatusCreated:
				return nil
			case errors.As(err, &ae) && ae.Code == tandem.EINSUFFICIENT:
				refused.Add(1)
				return nil
			case err == nil:
				err = fmt.Errorf("status %d, want 201", status)
			}
			if ctx.Err() == nil {
				firstErr.Do(func() { failure = err })
			}
			return err
		}
	}
	load := func(d time.Duration, op loadgen.Op) loadgen.Result {
		if b.rate > 0 {
			return loadgen.Open(ctx, b.rate, b.concurrency, d, op)
		}
		return loadgen.Closed(ctx, b.concurrency, d, op)
	}
	if b.warmup > 0 {
		load(b.warmup, reserve("w"))
	}
	before, err := c.settledReport(ctx)
	if err != nil {
		return res, err
	}
	refused.Store(0)
	lr := load(b.duration, reserve("m"))
	if err := ctx.Err(); err != nil {
		return res, err
	}
	after, err := c.settledReport(ctx)
	if err != nil {
		return res, err
	}
	res.OpsPerSec = lr.OpsPerSec
	res.P50MS, res.P99MS, res.P999MS = ms(lr.P50), ms(lr.P99), ms(lr.P999)
	res.Errors, res.Refused = lr.Errors, refused.Load()
	if shadow := mode.Shadow(); shadow != "" {
		res.ShadowP99MS = after.LatencyMS[shadow].P99
	}
	res.ShadowDrops = max(0, after.Divergences[tandem.KindShadowDropped]-before.Divergences[tandem.KindShadowDropped])
	res.ShadowTimeouts = max(0, after.Divergences[tandem.KindShadowTimeout]-before.Divergences[tandem.KindShadowTimeout])
	res.BenchResult.ShadowP99MS, res.BenchResult.ShadowDrops = res.ShadowP99MS, res.ShadowDrops
	var pod tandem.PodStatus
	if err := c.admin(ctx, http.MethodGet, "/admin/pods/"+c.t.pod, nil, &pod); err != nil {
		return res, err
	}
	if res.KillSwitch = pod.KillSwitch; res.KillSwitch && mode.SourceOfTruth() == tandem.StoreMySQL {
		fmt.Fprintf(progress, "bench http: %s: WARNING the pod's kill switch is engaged (automatic abort?): the cell was served by Redis in part\n", mode)
	}
	if failure != nil {
		fmt.Fprintf(progress, "bench http: %s: %d errors, first: %v\n", mode, res.Errors, failure)
	}
	return res, nil
}

// KillSwitchResult is `tandem bench killswitch`'s figure: how long a kill
// switch change made on one instance takes to reach another.
type KillSwitchResult struct {
	Suite   string  `json:"suite"`
	Toggles int     `json:"toggles"`
	P50MS   float64 `json:"p50_ms"`
	P99MS   float64 `json:"p99_ms"`
	MaxMS   float64 `json:"max_ms"`
	// APIP99MS is the p99 of the engaging instance's own answer.
	APIP99MS float64 `json:"api_p99_ms"`
	// Errors counts failed requests and changes not seen within the
	// propagation timeout.
	Errors int64 `json:"errors"`
}

// killSwitchTimeout bounds the wait for one change to reach the other
// instance; DESIGN.md promises one second.
const killSwitchTimeout = 5 * time.Second

// runBenchKillSwitch is `tandem bench http --killswitch N`.
func runBenchKillSwitch(ctx context.Context, mysqlDSN string, rt benchRedis, toggles int, asJSON bool, stdout, stderr io.Writer) error {
	r, err := benchKillSwitch(ctx, mysqlDSN, rt, toggles, stderr)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"results": []KillSwitchResult{r}})
	}
	fmt.Fprintf(stdout, "kill switch propagation between two instances over %d changes: p50 %.2f ms, p99 %.2f ms, max %.2f ms (engaging answer p99 %.2f ms), errors %d\n",
		r.Toggles, r.P50MS, r.P99MS, r.MaxMS, r.APIP99MS, r.Errors)
	return nil
}

// benchKillSwitch starts two in-process instances on one control database
// and Redis, changes the kill switch through the first one's admin API and
// times until the second one's switch (what its router reads) shows it.
func benchKillSwitch(ctx context.Context, mysqlDSN string, rt benchRedis, toggles int, progress io.Writer) (KillSwitchResult, error) {
	res := KillSwitchResult{Suite: "killswitch", Toggles: toggles}
	srv, err := newBenchServers(ctx, mysqlDSN, rt, 1, tandem.ModeMySQL)
	if err != nil {
		return res, err
	}
	defer srv.close()
	token := randomHex(16)
	a, err := srv.start(ctx, token, progress)
	if err != nil {
		return res, fmt.Errorf("instance A: %w", err)
	}
	defer a.Close()
	bm, err := srv.start(ctx, token, progress)
	if err != nil {
		return res, fmt.Errorf("instance B: %w", err)
	}
	defer bm.Close()
	pod := srv.cfg.Pods[0].Name
	c := newBenchClient(&benchTarget{admin: a.AdminAddr, adminToken: token, pod: pod}, 1)
	defer c.close()
	fmt.Fprintf(progress, "bench killswitch: %d changes on instance A, watched on instance B...\n", toggles)
	var seen, api []time.Duration
	for i := range toggles {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		engage := i%2 == 0
		method := http.MethodDelete
		if engage {
			method = http.MethodPost
		}
		// Spread the changes over B's poll ticker so none lines up with it.
		time.Sleep(time.Duration(5+rand.IntN(45)) * time.Millisecond)
		start := time.Now()
		err := c.admin(ctx, method, "/admin/killswitch", map[string]any{"reason": "tandem bench killswitch", "pods": []string{pod}}, nil)
		answered := time.Since(start)
		if err != nil {
			res.Errors++
			fmt.Fprintf(progress, "bench killswitch: change %d: %v\n", i, err)
			continue
		}
		api = append(api, answered)
		for bm.sw.Engaged(pod) != engage {
			if time.Since(start) > killSwitchTimeout {
				break
			}
			time.Sleep(50 * time.Microsecond)
		}
		d := time.Since(start)
		if bm.sw.Engaged(pod) != engage {
			res.Errors++
			fmt.Fprintf(progress, "bench killswitch: change %d not seen by B within %s\n", i, killSwitchTimeout)
			continue
		}
		seen = append(seen, d)
	}
	sort.Slice(seen, func(i, j int) bool { return seen[i] < seen[j] })
	sort.Slice(api, func(i, j int) bool { return api[i] < api[j] })
	res.P50MS, res.P99MS = ms(loadgen.Quantile(seen, 0.5)), ms(loadgen.Quantile(seen, 0.99))
	res.MaxMS = ms(loadgen.Quantile(seen, 1))
	res.APIP99MS = ms(loadgen.Quantile(api, 0.99))
	return res, nil
}
