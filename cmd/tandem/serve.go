package main

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
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/comparator"
	"github.com/tandemhq/tandem/dualwrite"
	"github.com/tandemhq/tandem/killswitch"
	"github.com/tandemhq/tandem/mysqlres"
	"github.com/tandemhq/tandem/redisres"
	"github.com/tandemhq/tandem/rollout"
	"github.com/tandemhq/tandem/web"
)

// Main is one `tandem serve`: every part wired together. End-to-end tests
// run it in-process (NewMain, set Config, Run, Close).
type Main struct {
	Config Config
	// AdminToken and APIToken come from TANDEM_ADMIN_TOKEN and
	// TANDEM_API_TOKEN; the admin token is required.
	AdminToken string
	APIToken   string
	// InstanceID names this instance in GET /admin/instances.
	InstanceID string
	// Demo runs the demo: built-in config, local or embedded stores.
	Demo        bool
	DemoTraffic bool
	LogFormat   string
	Logger      *zap.Logger
	Stdout      io.Writer
	Stderr      io.Writer

	// CheckoutAddr and AdminAddr are the bound addresses, set by Run.
	CheckoutAddr string
	AdminAddr    string

	registry *prometheus.Registry
	control  *mysqlres.ControlStore
	ctlRedis redis.UniversalClient
	cmp      *comparator.Comparator
	sw       *killswitch.Switch
	ctl      *rollout.Controller
	fleet    *dualwrite.Fleet
	pods     []*podRuntime
	servers  []*http.Server
	demo     *demoEnv

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
}

// NewMain returns a Main with the defaults.
func NewMain() *Main {
	return &Main{Config: DefaultConfig(), LogFormat: "json", Stdout: os.Stdout, Stderr: os.Stderr}
}

// ParseFlags reads `tandem serve` flags and the config file.
func (m *Main) ParseFlags(args []string, getenv func(string) string) error {
	fs := flag.NewFlagSet("tandem serve", flag.ContinueOnError)
	fs.SetOutput(m.Stderr)
	path := fs.String("config", "", "YAML config file; none runs the demo")
	traffic := fs.Bool("demo-traffic", false, "play demo checkouts across the pods (on by default in the demo)")
	format := fs.String("log-format", "", "json or console (default: json, console in the demo)")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("serve: unexpected argument %q: %w", fs.Arg(0), errUsage)
	}
	m.AdminToken, m.APIToken = getenv("TANDEM_ADMIN_TOKEN"), getenv("TANDEM_API_TOKEN")
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
	if *format != "" {
		if *format != "json" && *format != "console" {
			return fmt.Errorf("serve: --log-format must be json or console: %w", errUsage)
		}
		m.LogFormat = *format
	}
	return nil
}

func newLogger(format string, w io.Writer) *zap.Logger {
	enc := zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
	if format == "console" {
		cfg := zap.NewDevelopmentEncoderConfig()
		cfg.EncodeTime = zapcore.TimeEncoderOfLayout("15:04:05.000")
		enc = zapcore.NewConsoleEncoder(cfg)
	}
	return zap.New(zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(w)), zap.InfoLevel))
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
		m.Logger = newLogger(m.LogFormat, m.Stderr)
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			m.Close()
		}
	}()
	if m.Demo {
		if err := m.setUpDemo(ctx); err != nil {
			return err
		}
	}
	if m.AdminToken == "" {
		return errors.New("serve: TANDEM_ADMIN_TOKEN is required (the admin API never runs without a token)")
	}
	if m.InstanceID == "" {
		host, _ := os.Hostname()
		m.InstanceID = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), randomHex(3))
	}
	m.registry = prometheus.NewRegistry()
	m.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cfg := m.Config

	// Bind both listeners first: a taken port fails fast, and the instance
	// registers the address it really serves on (also with port 0).
	checkoutLn, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	m.closers = append(m.closers, ignoreClosed(checkoutLn.Close))
	adminLn, err := net.Listen("tcp", cfg.AdminListen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.AdminListen, err)
	}
	m.closers = append(m.closers, ignoreClosed(adminLn.Close))
	m.CheckoutAddr, m.AdminAddr = checkoutLn.Addr().String(), adminLn.Addr().String()

	// The control plane: modes and audit log in MySQL, kill switch in Redis.
	m.control = mysqlres.NewControlStore(cfg.Control.MySQLDSN)
	if err := m.control.Migrate(ctx); err != nil {
		return fmt.Errorf("control database: %w", err)
	}
	if err := m.control.Open(ctx); err != nil {
		return fmt.Errorf("control database: %w", err)
	}
	m.closers = append(m.closers, m.control.Close)
	m.ctlRedis = newRedisClient(cfg.Control.RedisAddr, cfg.Control.RedisAddrs, cfg.Control.RedisCluster, cfg.Control.RedisDB)
	m.closers = append(m.closers, m.ctlRedis.Close)
	onError := func(what string) func(error) {
		return func(err error) { m.Logger.Warn(what, zap.Error(err)) }
	}
	m.cmp = &comparator.Comparator{Log: m.control, Window: cfg.Rollout.GateWindow, OnError: onError("comparator")}
	podNames := make([]string, len(cfg.Pods))
	podConfigs := make([]rollout.PodConfig, len(cfg.Pods))
	for i, p := range cfg.Pods {
		podNames[i] = p.Name
		podConfigs[i] = rollout.PodConfig{Name: p.Name, Shops: p.ShopSet(), Mode: tandem.Mode(p.Mode)}
	}
	m.ctl = &rollout.Controller{
		PodConfigs: podConfigs,
		Gates: rollout.Gates{
			MinComparisons: cfg.Rollout.GateMinComparisons, MaxDivergenceRate: cfg.Rollout.GateMaxDivergenceRate,
			Window: cfg.Rollout.GateWindow, RequireAudit: cfg.Rollout.GateRequireAudit,
			AbortDivergenceRate: cfg.Rollout.AbortDivergenceRate, AbortMinComparisons: cfg.Rollout.AbortMinComparisons,
		},
		Store: m.control, Comparator: m.cmp, InstanceID: m.InstanceID, Addr: m.AdminAddr,
		OnError: onError("rollout"),
	}
	m.sw = &killswitch.Switch{
		Pods: podNames, Channel: redisres.NewKillSwitchChannel(m.ctlRedis, cfg.Control.RedisPrefix),
		Modes: m.ctl, AuditLog: m.control, OnError: onError("kill switch"),
	}
	m.ctl.Switch = m.sw

	// The pods: each with its own MySQL (unit rows and ledger) and Redis.
	m.fleet = &dualwrite.Fleet{}
	for _, pc := range cfg.Pods {
		p, err := m.openPod(ctx, pc)
		if err != nil {
			return fmt.Errorf("pod %s: %w", pc.Name, err)
		}
		m.pods = append(m.pods, p)
		m.fleet.Routers = append(m.fleet.Routers, p.router)
	}
	m.ctl.Ops = podOps{fleet: m.fleet}

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
	}
	if cfg.Rollout.AuditInterval > 0 {
		if err := m.startAuditSchedule(); err != nil {
			return err
		}
	}

	metrics := web.NewMetrics(m.registry)
	checkout := &web.Server{Checkout: m.fleet, APIToken: m.APIToken, Logger: m.Logger, Metrics: metrics}
	admin := &web.AdminServer{Admin: m.ctl, Token: m.AdminToken, Ready: m.ready, Gatherer: m.registry,
		Logger: m.Logger, Metrics: metrics, Plan: planService{ctl: m.ctl}}
	m.serve(checkoutLn, checkout.Handler())
	m.serve(adminLn, admin.Handler())
	m.Logger.Info("tandem serving", zap.String("checkout", m.CheckoutAddr), zap.String("admin", m.AdminAddr),
		zap.String("instance", m.InstanceID), zap.Int("pods", len(m.pods)))
	if m.DemoTraffic {
		m.startDemoTraffic()
	}
	return nil
}

func (m *Main) openPod(ctx context.Context, pc PodConfig) (*podRuntime, error) {
	cfg := m.Config
	p := &podRuntime{cfg: pc}
	reg := prometheus.WrapRegistererWith(prometheus.Labels{"pod": pc.Name}, m.registry)
	p.mysql = mysqlres.NewStore(pc.MySQLDSN)
	p.mysql.PoolCap = cfg.Reservation.PoolCap
	p.mysql.DefaultTTL = cfg.Reservation.DefaultTTL
	p.mysql.MaxOpenConns = pc.MySQLMaxOpenConns
	p.mysql.Logger = m.Logger.With(zap.String("pod", pc.Name))
	p.mysql.Registerer = reg
	if err := p.mysql.Migrate(ctx); err != nil {
		return nil, fmt.Errorf("mysql migrate: %w", err)
	}
	if err := p.mysql.Open(); err != nil {
		return nil, fmt.Errorf("mysql: %w", err)
	}
	m.closers = append(m.closers, p.mysql.Close)
	p.rdb = newRedisClient(pc.RedisAddr, pc.RedisAddrs, pc.RedisCluster, pc.RedisDB)
	m.closers = append(m.closers, p.rdb.Close)
	p.redis = redisres.NewStore(p.rdb, p.mysql.Ledger())
	p.redis.Prefix = pc.RedisPrefix
	p.redis.DefaultTTL = cfg.Reservation.DefaultTTL
	p.redis.Logger = p.mysql.Logger
	p.redis.Registerer = reg
	if err := p.redis.Open(); err != nil {
		return nil, fmt.Errorf("redis %s: %w", redisTarget(pc.RedisAddr, pc.RedisAddrs, pc.RedisCluster), err)
	}
	m.closers = append(m.closers, p.redis.Close)
	p.router = &dualwrite.Router{
		Pod: pc.Name, Shops: pc.ShopSet(), Redis: p.redis, MySQL: p.mysql, Ledger: p.mysql.Ledger(),
		Modes: m.ctl, Kill: m.sw, Recorder: m.cmp,
		ShadowTimeout: cfg.Shadow.Timeout, MaxInflight: cfg.Shadow.MaxInflight, DefaultTTL: cfg.Reservation.DefaultTTL,
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
// the source of truth of any pod is down.
func (m *Main) ready(ctx context.Context) (bool, map[string]string) {
	deps := map[string]string{}
	ok := true
	check := func(name string, err error, critical bool) {
		if err == nil {
			deps[name] = "ok"
			return
		}
		deps[name] = "down"
		if critical {
			ok = false
		}
	}
	check("control_mysql", m.control.Ping(ctx), true)
	check("control_redis", m.ctlRedis.Ping(ctx).Err(), true)
	for _, p := range m.pods {
		sot := p.router.Mode().SourceOfTruth()
		check(p.cfg.Name+"_mysql", p.mysql.DB().PingContext(ctx), sot == tandem.StoreMySQL)
		check(p.cfg.Name+"_redis", p.rdb.Ping(ctx).Err(), sot == tandem.StoreRedis)
	}
	return ok, deps
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
		if m.demo != nil {
			m.demo.close()
		}
		if m.Logger != nil {
			_ = m.Logger.Sync()
		}
	})
	return nil
}

// podOps runs backfill, audit and resync on a pod's stores for rollout.
type podOps struct{ fleet *dualwrite.Fleet }

func (o podOps) Backfill(ctx context.Context, pod string) error {
	r, err := o.fleet.Pod(pod)
	if err != nil {
		return err
	}
	_, err = r.Backfill(ctx)
	return err
}

func (o podOps) Audit(ctx context.Context, pod string) (*tandem.Audit, error) {
	r, err := o.fleet.Pod(pod)
	if err != nil {
		return nil, err
	}
	return r.Audit(ctx)
}

func (o podOps) Resync(ctx context.Context, pod string) (int, error) {
	r, err := o.fleet.Pod(pod)
	if err != nil {
		return 0, err
	}
	return r.Resync(ctx)
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	m := NewMain()
	m.Stdout, m.Stderr = stdout, stderr
	if err := m.ParseFlags(args, os.Getenv); err != nil {
		return err
	}
	if err := m.Run(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	m.Logger.Info("shutting down")
	return m.Close()
}

func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("tandem migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "YAML config file (required)")
	if err := fs.Parse(args); err != nil || *path == "" {
		return errUsage
	}
	cfg, err := LoadConfig(*path)
	if err != nil {
		return err
	}
	return migrateAll(ctx, cfg, stdout)
}

// migrateAll creates or upgrades the control database and every pod's
// MySQL; it is idempotent.
func migrateAll(ctx context.Context, cfg Config, stdout io.Writer) error {
	if err := mysqlres.NewControlStore(cfg.Control.MySQLDSN).Migrate(ctx); err != nil {
		return fmt.Errorf("control database: %w", err)
	}
	fmt.Fprintln(stdout, "migrated control database")
	for _, p := range cfg.Pods {
		s := mysqlres.NewStore(p.MySQLDSN)
		if err := s.Migrate(ctx); err != nil {
			return fmt.Errorf("pod %s: %w", p.Name, err)
		}
		s.Close()
		fmt.Fprintf(stdout, "migrated pod %s\n", p.Name)
	}
	return nil
}
