package benchcmd

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/cmd/tandem/internal/server"
	"github.com/tandemhq/tandem/internal/bench"
	"github.com/tandemhq/tandem/internal/cli"
)

// runHTTP is `tandem bench http`: flags, then bench.HTTP on the
// running server of --config or on in-process servers (startBenchServer),
// or with --killswitch N bench.KillSwitch.
func runHTTP(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("tandem bench http")
	cfgPath := fs.String("config", "", "drive the running server of this config `FILE` (admin token from TANDEM_ADMIN_TOKEN); none runs one in-process on scratch databases")
	modes := fs.String("modes", "redis,shadow,mysql", "pod modes to measure, in order (redis, shadow, mysql, mysql_only)")
	conc := fs.Int("concurrency", 32, "closed loop: concurrent buyers; open loop (--rate): the most requests in flight, arrivals beyond it count as errors")
	rate := fs.Float64("rate", 0, "offered reserves per second, open loop (0: closed loop)")
	rateOfMySQL := fs.Float64("rate-of-mysql", 0, "measure mysql mode's closed-loop capacity at --concurrency first, then run --modes open loop at this fraction of it (at most max(256, 8 x --concurrency) in flight); 0: off")
	compare := fs.Bool("compare-engine", false, "also measure the raw redis engine at --concurrency and print the p50 that HTTP adds in redis mode")
	repeat := fs.Int("repeat", 1, "measure --modes this many rounds, interleaved (redis, shadow, redis, shadow, ...): a p99 read from one cell of a few seconds moves with whatever else the machine does then, and `bench report` judges the median of the rounds")
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
	if err := cli.ParseArgs(fs, args, benchHTTPSynopsis, benchHTTPSummary, stdout); err != nil {
		return err
	}
	if *kill < 0 {
		fmt.Fprintln(stderr, "--killswitch must be >= 0")
		return cli.ErrUsage
	}
	rt := bench.NewRedis(*raddr, *rcluster)
	run := startBenchRun("http", args)
	if *kill > 0 {
		r, err := bench.KillSwitch(ctx, startBenchServer, *dsn, rt, *kill, stderr)
		if err != nil {
			return err
		}
		endBenchRun(run, stderr)
		return bench.PrintKillSwitch(stdout, run, r, *js)
	}
	b := bench.HTTP{Start: startBenchServer, Concurrency: *conc, Rate: *rate, Duration: *dur, Warmup: *warmup,
		Items: *items, CartSize: *cartSize, Shop: *shop, Pod: *pod, MySQLDSN: *dsn, Redis: rt, CPUProfile: *cpu,
		RateOfMySQL: *rateOfMySQL, CompareEngine: *compare, Repeat: *repeat}
	for _, m := range strings.Split(*modes, ",") {
		md := tandem.Mode(strings.TrimSpace(m))
		if !md.Valid() {
			fmt.Fprintf(stderr, "--modes: unknown mode %q (want redis, shadow, mysql, mysql_only)\n", m)
			return cli.ErrUsage
		}
		b.Modes = append(b.Modes, md)
	}
	if b.Concurrency < 1 || b.Items < 1 || b.CartSize < 1 || b.Duration <= 0 || b.Rate < 0 || b.Shop < 1 || b.Repeat < 1 {
		fmt.Fprintln(stderr, "--concurrency, --items, --cart-size, --duration, --shop and --repeat must be positive, --rate >= 0")
		return cli.ErrUsage
	}
	if b.RateOfMySQL < 0 || b.RateOfMySQL > 0 && b.Rate > 0 {
		fmt.Fprintln(stderr, "--rate-of-mysql must be >= 0, and goes without --rate")
		return cli.ErrUsage
	}
	if b.Warmup < 0 {
		b.Warmup = min(b.Duration/4, time.Second)
	}
	if *cfgPath != "" {
		var err error
		if b.Remote, err = benchRemote(*cfgPath); err != nil {
			return err
		}
	}
	results, err := b.Run(ctx, stderr)
	if err != nil {
		return err
	}
	endBenchRun(run, stderr)
	return bench.PrintHTTPResults(stdout, run, results, *js)
}

// benchRemote describes the running server of a config file to the bench.
func benchRemote(path string) (*bench.Remote, error) {
	cfg, err := server.LoadConfig(path)
	if err != nil {
		return nil, err
	}
	r := &bench.Remote{Listen: cfg.Listen, AdminListen: cfg.AdminListen,
		AdminToken: os.Getenv("TANDEM_ADMIN_TOKEN"), APIToken: os.Getenv("TANDEM_API_TOKEN")}
	for _, p := range cfg.Pods {
		r.Pods = append(r.Pods, bench.RemotePod{Name: p.Name, Shops: p.ShopSet()})
	}
	return r, nil
}

// startBenchServer is the bench's bench.StartFunc: one in-process `tandem
// serve` of a one-pod fleet on the bench's scratch stores.
func startBenchServer(ctx context.Context, spec bench.ServeSpec) (bench.Server, error) {
	cfg := server.DefaultConfig()
	cfg.Listen, cfg.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Control.MySQLDSN = spec.ControlDSN
	cluster := len(spec.Redis.Cluster) > 0
	cfg.Control.RedisAddr, cfg.Control.RedisAddrs, cfg.Control.RedisCluster = spec.Redis.Addr, spec.Redis.Cluster, cluster
	cfg.Control.RedisPrefix = spec.ControlPrefix
	// The scheduled audit would land in some cells and not others.
	cfg.Rollout.AuditInterval = 0
	// A cell measures its mode: the automatic abort would engage the kill
	// switch when a saturated mysql cell drops its Redis shadow work
	// (drops count as divergences) and serve the rest of the cell from
	// Redis, over-estimating mysql mode's capacity and the open-loop rates
	// taken from it. The drops are still reported; the abort itself is
	// tested by the rollout and end-to-end tests.
	cfg.Rollout.AbortDivergenceRate = 0
	shops := []string{fmt.Sprint(spec.Shop)}
	if spec.Shops > 0 {
		shops = []string{fmt.Sprintf("1-%d", spec.Shops)}
	}
	cfg.Pods = []server.PodConfig{{
		Name: spec.Pod, Shops: shops, Mode: string(spec.Mode),
		MySQLDSN: spec.PodDSN, RedisAddr: spec.Redis.Addr, RedisAddrs: spec.Redis.Cluster, RedisCluster: cluster, RedisPrefix: spec.PodPrefix,
	}}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := server.NewMain()
	m.Config = cfg
	m.AdminToken = spec.AdminToken
	m.InstanceID = spec.InstanceID
	m.Stdout, m.Stderr = io.Discard, spec.Log
	m.LogFormat, m.LogLevel = "console", "warn"
	if err := m.Run(ctx); err != nil {
		return nil, err
	}
	return benchServer{m}, nil
}

// benchServer is a Main as the bench sees it.
type benchServer struct{ m *server.Main }

func (s benchServer) CheckoutAddr() string              { return s.m.CheckoutAddr }
func (s benchServer) AdminAddr() string                 { return s.m.AdminAddr }
func (s benchServer) KillSwitchEngaged(pod string) bool { return s.m.KillSwitchEngaged(pod) }
func (s benchServer) Metrics() prometheus.Gatherer      { return s.m.Gatherer() }
func (s benchServer) Close() error                      { return s.m.Close() }
