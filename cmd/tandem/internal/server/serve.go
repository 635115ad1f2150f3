package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/capture"
	"github.com/tandemhq/tandem/comparator"
	"github.com/tandemhq/tandem/controldb"
	"github.com/tandemhq/tandem/dualwrite"
	"github.com/tandemhq/tandem/history"
	"github.com/tandemhq/tandem/internal/cli"
	"github.com/tandemhq/tandem/killswitch"
	"github.com/tandemhq/tandem/mysqlres"
	"github.com/tandemhq/tandem/redisres"
	"github.com/tandemhq/tandem/rollout"
	"github.com/tandemhq/tandem/throttle"
	"github.com/tandemhq/tandem/web"
	"github.com/tandemhq/tandem/webhook"
)

// Main is one `tandem serve`: every part wired together. End-to-end tests
// run it in-process (NewMain, set Config, Run, Close).
type Main struct {
	Config Config
	// AdminToken, ViewerToken and APIToken come from TANDEM_ADMIN_TOKEN,
	// TANDEM_VIEWER_TOKEN and TANDEM_API_TOKEN; the admin token is
	// required, the viewer token (read-only admin access) is optional.
	AdminToken  string
	ViewerToken string
	APIToken    string
	// InstanceID names this instance in GET /admin/instances.
	InstanceID string
	// Demo and DemoTraffic are what the command line asks for: the demo
	// (no --config) and its buyers. Run does neither itself: cmd/tandem
	// sets Prepare to the demo's set-up and runs the buyers against the
	// checkout API (cmd/tandem/internal/demo).
	Demo        bool
	DemoTraffic bool
	// Prepare, when set, runs first in Run, with the logger ready and
	// before the admin token is checked or anything is opened: the demo
	// builds the config there, binds the listeners (Bind) and adds what it
	// started to what Close undoes (AddCloser).
	Prepare   func(ctx context.Context, m *Main) error
	LogFormat string
	// LogLevel is debug, info (default), warn or error.
	LogLevel string
	Logger   *zap.Logger
	Stdout   io.Writer
	Stderr   io.Writer
	// BeforeBackfill, when set, runs before every backfill of a pod's
	// MySQL and may block it (ctx cancels it); end-to-end tests hold a copy
	// with it to watch the transition.
	BeforeBackfill func(ctx context.Context, pod string) error
	// PlanInterval, when set, is how often the rollout plan's driver
	// turns (default rollout.DefaultPlanInterval); tests shorten it.
	PlanInterval time.Duration
	// PlanLease, when set, is how long the plan's lease lasts unrenewed
	// (default rollout.DefaultLeaseDuration); tests shorten it.
	PlanLease time.Duration
	// HistoryInterval, when set, is how often GET /admin/history samples
	// the pods' reports (default history.DefaultInterval); tests shorten it.
	HistoryInterval time.Duration

	// CheckoutAddr, AdminAddr and MetricsAddr (with metrics_listen) are
	// the bound addresses, set by Run.
	CheckoutAddr string
	AdminAddr    string
	MetricsAddr  string

	// bound holds the checkout and admin listeners bound before Run
	// (Bind); Run serves on them.
	bound []net.Listener

	registry *prometheus.Registry
	control  *controldb.Store
	ctlRedis redis.UniversalClient
	cmp      *comparator.Comparator
	sw       *killswitch.Switch
	ctl      *rollout.Controller
	hooks    *webhook.Notifier
	fleet    *dualwrite.Fleet
	captures *capture.Recorder
	history  *history.Recorder
	pods     []*podRuntime
	servers  []*http.Server

	// readyState is each dependency's state at the last /readyz.
	readyMu    sync.Mutex
	readyState map[string]string

	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closers   []func() error
	closeOnce sync.Once
}

// podRuntime is one pod's stores and router.
type podRuntime struct {
	cfg    PodConfig
	mysql  *mysqlres.Store
	redis  *redisres.Store
	rdb    redis.UniversalClient
	router *dualwrite.Router
	// throttle is the pod's throttle of background work; reg its metrics'
	// registerer (labelled with the pod).
	throttle *throttle.Throttle
	reg      prometheus.Registerer
}

// NewMain returns a Main with the defaults.
func NewMain() *Main {
	return &Main{Config: DefaultConfig(), LogFormat: "json", Stdout: os.Stdout, Stderr: os.Stderr}
}

// ParseFlags reads `tandem serve` flags and the config file.
func (m *Main) ParseFlags(args []string, getenv func(string) string) error {
	fs := cli.NewFlagSet("tandem serve")
	path := fs.String("config", "", "YAML config `FILE`; none runs the demo")
	listen := fs.String("listen", "", "checkout API address `ADDR` (host:port), overriding the config's listen and the demo's 127.0.0.1:8080")
	adminListen := fs.String("admin-listen", "", "admin API and dashboard address `ADDR` (host:port), overriding the config's admin_listen and the demo's 127.0.0.1:8081")
	traffic := fs.Bool("demo-traffic", false, "play demo checkouts across the pods through the checkout API (on by default in the demo)")
	format := fs.String("log-format", "", "json or console (default: json, console in the demo)")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	if err := cli.ParseArgs(fs, args, serveSynopsis, serveSummary, m.Stdout); err != nil {
		return err
	}
	// Flags are checked before the config is read, so that a mistyped
	// flag is named as such rather than hidden behind a config error.
	if _, err := parseLogLevel(*level); err != nil {
		return &cli.UsageError{Msg: "serve: " + err.Error(), Command: "tandem serve", Synopsis: serveSynopsis}
	}
	if *format != "" && *format != "json" && *format != "console" {
		return &cli.UsageError{Msg: fmt.Sprintf("serve: --log-format must be json or console, got %q", *format), Command: "tandem serve", Synopsis: serveSynopsis}
	}
	for flagName, addr := range map[string]string{"--listen": *listen, "--admin-listen": *adminListen} {
		if _, _, err := net.SplitHostPort(addr); addr != "" && err != nil {
			return &cli.UsageError{Msg: fmt.Sprintf("serve: %s: want host:port, got %q", flagName, addr), Command: "tandem serve", Synopsis: serveSynopsis}
		}
	}
	m.AdminToken, m.APIToken = getenv("TANDEM_ADMIN_TOKEN"), getenv("TANDEM_API_TOKEN")
	m.ViewerToken = getenv("TANDEM_VIEWER_TOKEN")
	m.DemoTraffic = *traffic
	if *path == "" {
		m.Demo, m.DemoTraffic, m.LogFormat = true, true, "console"
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "demo-traffic" {
				m.DemoTraffic = *traffic
			}
		})
	} else {
		cfg, err := LoadConfig(*path)
		if err != nil {
			return err
		}
		m.Config = cfg
	}
	// The demo binds these two too (its default config's addresses).
	if *listen != "" {
		m.Config.Listen = *listen
	}
	if *adminListen != "" {
		m.Config.AdminListen = *adminListen
	}
	m.LogLevel = *level
	if *format != "" {
		m.LogFormat = *format
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Run starts every part and returns once both listeners accept; Close
// stops them.
func (m *Main) Run(ctx context.Context) (err error) {
	if m.Logger == nil {
		level, err := parseLogLevel(m.LogLevel)
		if err != nil {
			return err
		}
		m.Logger = newLogger(m.LogFormat, level, m.Stderr)
	}
	routeDriverLogs(m.Logger)
	m.ctx, m.cancel = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			m.Close()
		}
	}()
	if m.Prepare != nil {
		if err := m.Prepare(ctx, m); err != nil {
			return err
		}
	}
	if m.AdminToken == "" {
		return errors.New("serve: TANDEM_ADMIN_TOKEN is required (the admin API never runs without a token)")
	}
	if m.ViewerToken != "" && m.ViewerToken == m.AdminToken {
		return errors.New("serve: TANDEM_VIEWER_TOKEN must differ from TANDEM_ADMIN_TOKEN (the viewer token is read-only)")
	}
	if m.InstanceID == "" {
		host, _ := os.Hostname()
		m.InstanceID = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), randomHex(3))
	}
	m.registry = prometheus.NewRegistry()
	m.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cfg := m.Config

	checkoutLn, adminLn, metricsLn, err := m.listen()
	if err != nil {
		return err
	}
	if err := m.openControl(ctx); err != nil {
		return err
	}
	// The pods: each with its own MySQL (unit rows and ledger) and Redis.
	m.fleet = &dualwrite.Fleet{BeforeBackfill: m.BeforeBackfill}
	for _, pc := range cfg.Pods {
		p, err := m.openPod(ctx, pc)
		if err != nil {
			return fmt.Errorf("pod %s: %w", pc.Name, err)
		}
		m.pods = append(m.pods, p)
		m.fleet.Routers = append(m.fleet.Routers, p.router)
	}
	m.ctl.Fleet = m.fleet
	if err := m.openCaptures(); err != nil {
		return err
	}
	m.ctl.Rehearser = rehearser{m}
	m.ctl.Throttles = throttleStates(m.pods)

	if err := m.start(ctx); err != nil {
		return err
	}
	m.serveAll(checkoutLn, adminLn, metricsLn)
	return nil
}

// listen binds the checkout, admin and (when configured) metrics listeners
// first: a taken port fails fast, and the instance registers the address
// it really serves on (also with port 0).
func (m *Main) listen() (checkoutLn, adminLn, metricsLn net.Listener, err error) {
	cfg := m.Config
	if len(m.bound) == 2 {
		checkoutLn, adminLn = m.bound[0], m.bound[1]
	} else {
		if checkoutLn, err = net.Listen("tcp", cfg.Listen); err != nil {
			return nil, nil, nil, fmt.Errorf("listen %s: %w", cfg.Listen, err)
		}
		m.closers = append(m.closers, ignoreClosed(checkoutLn.Close))
		if adminLn, err = net.Listen("tcp", cfg.AdminListen); err != nil {
			return nil, nil, nil, fmt.Errorf("listen %s: %w", cfg.AdminListen, err)
		}
		m.closers = append(m.closers, ignoreClosed(adminLn.Close))
	}
	m.CheckoutAddr, m.AdminAddr = checkoutLn.Addr().String(), adminLn.Addr().String()
	if cfg.MetricsListen != "" {
		if metricsLn, err = net.Listen("tcp", cfg.MetricsListen); err != nil {
			return nil, nil, nil, fmt.Errorf("listen %s (metrics_listen): %w", cfg.MetricsListen, err)
		}
		m.closers = append(m.closers, ignoreClosed(metricsLn.Close))
		m.MetricsAddr = metricsLn.Addr().String()
	}
	return checkoutLn, adminLn, metricsLn, nil
}

// openControl opens the control plane: modes and audit log in MySQL, the
// kill switch in Redis, the comparator, the rollout controller and the
// webhooks. The pods are opened after it, the loops started by start.
func (m *Main) openControl(ctx context.Context) error {
	cfg := m.Config
	m.control = controldb.NewStore(controldb.Config{DSN: cfg.Control.MySQLDSN})
	if err := m.control.Migrate(ctx); err != nil {
		return fmt.Errorf("control database: %w", atMySQL(cfg.Control.MySQLDSN, err))
	}
	if err := m.control.Open(ctx); err != nil {
		return fmt.Errorf("control database: %w", atMySQL(cfg.Control.MySQLDSN, err))
	}
	m.closers = append(m.closers, m.control.Close)
	m.ctlRedis = newRedisClient(cfg.Control.RedisAddr, cfg.Control.RedisAddrs, cfg.Control.RedisCluster, cfg.Control.RedisDB)
	m.closers = append(m.closers, m.ctlRedis.Close)
	onError := func(what string) func(error) {
		return func(err error) { m.Logger.Warn(what, zap.Error(err)) }
	}
	m.cmp = comparator.New(comparator.Config{Log: m.control, Window: cfg.Rollout.GateWindow, AbortWindow: cfg.Rollout.AbortWindow,
		OnError: onError("comparator")})
	if len(cfg.Rollout.Plan.Webhooks) > 0 {
		m.hooks = &webhook.Notifier{URLs: cfg.Rollout.Plan.Webhooks, OnError: onError("webhook")}
		m.hooks.Open()
		m.closers = append(m.closers, m.hooks.Close)
	}
	podNames := make([]string, len(cfg.Pods))
	podConfigs := make([]rollout.PodConfig, len(cfg.Pods))
	for i, p := range cfg.Pods {
		podNames[i] = p.Name
		podConfigs[i] = rollout.PodConfig{Name: p.Name, Shops: p.ShopSet(), Mode: tandem.Mode(p.Mode)}
	}
	m.ctl = rollout.New(rollout.Config{
		PodConfigs: podConfigs,
		Gates: rollout.Gates{
			MinComparisons: cfg.Rollout.GateMinComparisons, MaxDivergenceRate: cfg.Rollout.GateMaxDivergenceRate,
			Window: cfg.Rollout.GateWindow, RequireAudit: cfg.Rollout.GateRequireAudit,
			ConsecutivePasses:   cfg.Rollout.GateConsecutivePasses,
			AbortDivergenceRate: cfg.Rollout.AbortDivergenceRate, AbortMinComparisons: cfg.Rollout.AbortMinComparisons,
			MaxMySQLP99: cfg.Rollout.GateMySQLP99Max, MaxP99Factor: cfg.Rollout.GateMaxP99Factor,
			P99Slack: cfg.Rollout.GateP99Slack, MaxMySQLErrorRate: cfg.Rollout.GateMaxMySQLErrorRate,
		},
		PlanDefaults: rollout.PlanSettings{
			ShadowSoak: cfg.Rollout.Plan.ShadowSoak, MySQLSoak: cfg.Rollout.Plan.MySQLSoak,
			FinalMode: tandem.Mode(cfg.Rollout.Plan.FinalMode), Parallel: cfg.Rollout.Plan.Parallel, Approval: cfg.Rollout.Plan.Approval,
			ConfirmWebhooks: cfg.Rollout.Plan.ConfirmWebhooks, ConfirmTimeout: cfg.Rollout.Plan.ConfirmTimeout,
			RehearsalSpeed: cfg.Rollout.Plan.Rehearsal.Speed, RehearsalP99Max: cfg.Rollout.Plan.Rehearsal.P99Max,
		},
		InstanceID: m.InstanceID, Addr: m.AdminAddr, PlanInterval: m.PlanInterval, LeaseDuration: m.PlanLease,
		OnError: onError("rollout"), OnChange: m.controlAction(),
	}, m.control)
	m.ctl.Comparator = m.cmp
	m.ctl.Confirmer = &webhook.Confirmer{}
	m.sw = killswitch.New(killswitch.Config{
		Pods: podNames, Channel: redisres.NewKillSwitchChannel(m.ctlRedis, cfg.Control.RedisPrefix),
		Durable: m.control.KillSwitch(), Modes: m.ctl, AuditLog: m.control, OnError: onError("kill switch"),
		OnChange: m.controlAction(), RedisStale: m.redisStale,
		OnIdle: func(pods []string, ch tandem.Change) {
			m.Logger.Info("kill switch not engaged: nothing to disengage", zap.Strings("pods", pods),
				zap.String("actor", ch.Actor), zap.String("reason", ch.Reason))
		},
		OnRestore: func(record string, entries []tandem.AuditLogEntry) {
			for _, e := range entries {
				m.Logger.Warn("kill switch written back into a record that had lost it",
					zap.String("record", record), zap.String("pod", e.Pod), zap.Time("engaged_at", e.At),
					zap.String("actor", e.Actor), zap.String("reason", e.Reason))
			}
		},
	})
	m.ctl.Switch = m.sw

	return nil
}

// start opens the comparator, the kill switch and the rollout controller,
// and starts the reapers and the scheduled audit.
func (m *Main) start(ctx context.Context) error {
	cfg := m.Config
	if err := m.cmp.Open(); err != nil {
		return err
	}
	m.closers = append(m.closers, m.cmp.Close)
	if err := m.sw.Open(ctx); err != nil {
		return fmt.Errorf("kill switch (control Redis %s): %w", redisTarget(cfg.Control.RedisAddr, cfg.Control.RedisAddrs, cfg.Control.RedisCluster), err)
	}
	m.closers = append(m.closers, m.sw.Close)
	if err := m.ctl.Open(ctx); err != nil {
		return fmt.Errorf("rollout controller: %w", err)
	}
	m.closers = append(m.closers, m.ctl.Close)
	m.registry.MustRegister(&controlCollector{m: m})

	for _, p := range m.pods {
		m.goLoop(cfg.Reservation.ReaperInterval, p.reap)
		m.goLoop(purgeInterval, p.purge)
		if p.cfg.ReplicaDSN != "" {
			m.goLoop(cfg.Throttle.HeartbeatInterval, p.beat)
		}
	}
	if cfg.Rollout.AuditInterval > 0 {
		if err := m.startAuditSchedule(); err != nil {
			return err
		}
	}

	return nil
}

// serveAll serves the checkout API, the admin API and the metrics listener.
func (m *Main) serveAll(checkoutLn, adminLn, metricsLn net.Listener) {
	metrics := web.NewMetrics(m.registry)
	checkout := &web.Server{Checkout: m.fleet, APIToken: m.APIToken, Logger: m.Logger, Metrics: metrics}
	reports := m.fleet.Reports(m.ctl)
	m.history = history.New(history.Config{Report: reports.Report, Interval: m.HistoryInterval, Logger: m.Logger})
	m.history.Open()
	m.closers = append(m.closers, m.history.Close)
	effective := m.Config.Redacted()
	admin := &web.AdminServer{Admin: reports, Token: m.AdminToken, ViewerToken: m.ViewerToken, Ready: m.ready,
		Gatherer: m.registry, Logger: m.Logger, Metrics: metrics, Plan: m.ctl, Captures: m.captures,
		Config: func() any { return effective }, History: m.history, Throttle: m.ctl}
	m.serve(checkoutLn, checkout.Handler())
	m.serve(adminLn, admin.Handler())
	if metricsLn != nil {
		m.serve(metricsLn, admin.MetricsHandler())
	}
	m.Logger.Info("tandem serving", zap.String("checkout", m.CheckoutAddr), zap.String("admin", m.AdminAddr),
		zap.String("instance", m.InstanceID), zap.Int("pods", len(m.pods)))
}

func (m *Main) openPod(ctx context.Context, pc PodConfig) (*podRuntime, error) {
	cfg := m.Config
	p := &podRuntime{cfg: pc}
	reg := prometheus.WrapRegistererWith(prometheus.Labels{"pod": pc.Name}, m.registry)
	p.reg = reg
	p.mysql = mysqlres.NewStore(pc.MySQLDSN)
	p.mysql.PoolCap = cfg.Reservation.PoolCap
	p.mysql.MaxOpenConns = pc.MySQLMaxOpenConns
	p.mysql.MaxInflight = pc.MySQLMaxInflight
	p.mysql.Logger = m.Logger.With(zap.String("pod", pc.Name))
	p.mysql.Registerer = reg
	if err := p.mysql.Migrate(ctx); err != nil {
		return nil, fmt.Errorf("migrate: %w", atMySQL(pc.MySQLDSN, err))
	}
	if err := p.mysql.Open(ctx); err != nil {
		return nil, atMySQL(pc.MySQLDSN, err)
	}
	m.closers = append(m.closers, p.mysql.Close)
	p.rdb = newRedisClient(pc.RedisAddr, pc.RedisAddrs, pc.RedisCluster, pc.RedisDB)
	m.closers = append(m.closers, p.rdb.Close)
	p.redis = redisres.NewStore(p.rdb, p.mysql.Ledger())
	p.redis.Prefix = pc.RedisPrefix
	p.redis.Logger = p.mysql.Logger
	p.redis.Registerer = reg
	if err := p.redis.Open(ctx); err != nil {
		return nil, fmt.Errorf("redis %s: %w", redisTarget(pc.RedisAddr, pc.RedisAddrs, pc.RedisCluster), err)
	}
	m.closers = append(m.closers, p.redis.Close)
	p.router = dualwrite.NewRouter(pc.Name, pc.ShopSet(), p.redis, p.mysql)
	p.router.Ledger = p.mysql.Ledger()
	p.router.Modes = m.ctl
	p.router.Kill = m.sw
	p.router.Recorder = m.cmp
	p.router.ShadowTimeout = cfg.Shadow.Timeout
	p.router.MaxInflight = cfg.Shadow.MaxInflight
	p.router.BackfillBatch, p.router.BackfillWorkers = cfg.Backfill.BatchHolds, cfg.Backfill.Workers
	p.router.DefaultTTL = cfg.Reservation.DefaultTTL
	p.router.Dirty = p.mysql
	p.router.Observer = newConvergeObserver(reg)
	p.router.Logger = p.mysql.Logger.Sugar()
	if err := m.openThrottle(p); err != nil {
		return nil, fmt.Errorf("throttle: %w", err)
	}
	if err := p.router.Open(); err != nil {
		return nil, fmt.Errorf("router: %w", err)
	}
	m.closers = append(m.closers, p.router.Close)
	return p, nil
}

// reap returns expired holds to stock in every store the pod's mode
// maintains. Many instances may reap at once: each hold returns once.
func (p *podRuntime) reap(ctx context.Context) {
	mode := p.router.Mode()
	stores := []tandem.ReservationStore{p.redis, p.mysql}
	if mode == tandem.ModeRedis {
		stores = stores[:1]
	} else if mode == tandem.ModeMySQLOnly {
		stores = stores[1:]
	}
	for _, s := range stores {
		for {
			n, err := s.ExpireDue(ctx, time.Now(), 500)
			if err != nil || n < 500 {
				break
			}
		}
	}
}

// purgeInterval is how often each instance removes the pod's MySQL
// reservations that ended more than their retention ago, and purgeLimit
// the most it removes in one round (batches of its own transactions).
const (
	purgeInterval = time.Minute
	purgeLimit    = 200_000
)

// purge removes the MySQL reservations, then the ledger's claim records,
// whose retention ended (the Redis engine's ended carts expire by
// themselves). Many instances may purge at once; an error waits for the
// next round.
func (p *podRuntime) purge(ctx context.Context) {
	ctx = tandem.WithThrottle(ctx, p.throttle, tandem.JobPurge)
	now := time.Now()
	if _, err := p.mysql.PurgeEnded(ctx, now, purgeLimit); err != nil {
		return
	}
	_, _ = p.mysql.PurgeClaims(ctx, now, purgeLimit)
}

// goLoop runs f every interval until Close.
func (m *Main) goLoop(interval time.Duration, f func(ctx context.Context)) {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-m.ctx.Done():
				return
			case <-t.C:
				ctx, cancel := context.WithTimeout(m.ctx, 30*time.Second)
				f(ctx)
				cancel()
			}
		}
	}()
}

// serve serves h on ln until Close.
func (m *Main) serve(ln net.Listener, h http.Handler) {
	addr := ln.Addr().String()
	srv := web.NewHTTPServer(addr, h)
	m.servers = append(m.servers, srv)
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			m.Logger.Error("http server", zap.String("addr", addr), zap.Error(err))
		}
	}()
}

// ignoreClosed wraps a listener's Close, which fails harmlessly once the
// HTTP server closed it.
func ignoreClosed(close func() error) func() error {
	return func() error {
		if err := close(); err != nil && !errors.Is(err, net.ErrClosed) {
			return err
		}
		return nil
	}
}

// ready reports every dependency; it fails when the control database or
// the source of truth of any pod is down, or when a database lacks the
// schema this binary needs (a migration not applied, a table missing).
// Each change of a dependency's state is logged once.
func (m *Main) ready(ctx context.Context) (bool, map[string]string) {
	deps := map[string]string{}
	ok := true
	check := func(name string, err error, critical bool) {
		state := "ok"
		if err != nil {
			state = "down"
			if msg := tandem.ErrorMessage(err); strings.HasPrefix(msg, "schema: ") {
				// A schema this binary cannot use is a deployment error,
				// not an outage: never ready, shadow store or not.
				state, critical = msg, true
			}
			if critical {
				ok = false
			}
		}
		deps[name] = state
		m.readyChanged(name, state, critical)
	}
	check("control_mysql", m.control.CheckSchema(ctx), true)
	check("control_redis", m.ctlRedis.Ping(ctx).Err(), true)
	for _, p := range m.pods {
		sot := p.router.Mode().SourceOfTruth()
		check(p.cfg.Name+"_mysql", p.mysql.CheckSchema(ctx), sot == tandem.StoreMySQL)
		check(p.cfg.Name+"_redis", p.rdb.Ping(ctx).Err(), sot == tandem.StoreRedis)
	}
	return ok, deps
}

// readyChanged logs a dependency's readiness when it differs from the last
// check's, so that a probe every few seconds does not flood the log.
func (m *Main) readyChanged(name, state string, critical bool) {
	m.readyMu.Lock()
	last, seen := m.readyState[name]
	if m.readyState == nil {
		m.readyState = map[string]string{}
	}
	m.readyState[name] = state
	m.readyMu.Unlock()
	if seen && last == state || !seen && state == "ok" {
		return
	}
	if state == "ok" {
		m.Logger.Info("dependency ready", zap.String("dependency", name), zap.String("was", last))
		return
	}
	m.Logger.Warn("dependency not ready", zap.String("dependency", name), zap.String("state", state),
		zap.Bool("fails_readiness", critical))
}

// Close stops accepting, drains in-flight requests, stops the loops and
// closes the stores. Safe to call twice.
func (m *Main) Close() error {
	m.closeOnce.Do(func() {
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, s := range m.servers {
			_ = s.Shutdown(shutdownCtx)
		}
		if m.cancel != nil {
			m.cancel()
		}
		m.wg.Wait()
		for i := len(m.closers) - 1; i >= 0; i-- {
			if err := m.closers[i](); err != nil && m.Logger != nil {
				m.Logger.Warn("close", zap.Error(err))
			}
		}
		if m.Logger != nil {
			_ = m.Logger.Sync()
		}
	})
	return nil
}

// Bind makes Run serve the checkout API on checkout and the admin API on
// admin rather than bind the config's addresses; Close closes them. The
// demo binds its ports before it touches any data.
func (m *Main) Bind(checkout, admin net.Listener) {
	m.bound = []net.Listener{checkout, admin}
	m.closers = append(m.closers, ignoreClosed(checkout.Close), ignoreClosed(admin.Close))
}

// AddCloser adds f to what Close undoes, last added first undone: f
// runs after everything opened later is closed.
func (m *Main) AddCloser(f func() error) { m.closers = append(m.closers, f) }

// KillSwitchEngaged reports whether this instance serves pod as killed;
// the kill switch bench times its propagation with it.
func (m *Main) KillSwitchEngaged(pod string) bool { return m.sw.Engaged(pod) }

// Gatherer is the instance's metrics registry, what /metrics serves.
func (m *Main) Gatherer() prometheus.Gatherer { return m.registry }

// notified are the control actions the webhooks hear of.
var notified = map[string]bool{
	rollout.ActionPlanStart: true, rollout.ActionPlanPause: true, rollout.ActionPlanResume: true,
	rollout.ActionPlanAbort: true, rollout.ActionPlanDone: true, rollout.ActionPlanStep: true,
	rollout.ActionPlanApprove: true, rollout.ActionPlanSkip: true, rollout.ActionAutomaticAbort: true,
	killswitch.ActionEngage: true, killswitch.ActionDisengage: true,
}

// controlAction logs every control action and tells the webhooks of those
// they hear of, without waiting for them.
func (m *Main) controlAction() func(tandem.AuditLogEntry) {
	log := logControlAction(m.Logger)
	return func(e tandem.AuditLogEntry) {
		log(e)
		if m.hooks != nil && notified[e.Action] {
			m.hooks.Notify(e)
		}
	}
}

// redisStale says why a pod's Redis is known not to be whole, for the kill
// switch's answer; "" before the fleet is open.
func (m *Main) redisStale(pod string) string {
	if m.fleet == nil {
		return ""
	}
	return m.fleet.RedisStale(pod)
}
