package server

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/go-sql-driver/mysql"
	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/rollout"
)

// Config is the YAML configuration of `tandem serve` and `tandem migrate`
// (docs/configuration.md). Secrets come only from the environment.
type Config struct {
	Listen      string            `yaml:"listen"`
	AdminListen string            `yaml:"admin_listen"`
	Control     ControlConfig     `yaml:"control"`
	Reservation ReservationConfig `yaml:"reservation"`
	Rollout     RolloutConfig     `yaml:"rollout"`
	Shadow      ShadowConfig      `yaml:"shadow"`
	Backfill    BackfillConfig    `yaml:"backfill"`
	Throttle    ThrottleConfig    `yaml:"throttle"`
	Pods        []PodConfig       `yaml:"pods"`
	// MetricsListen, when set, serves /metrics alone, without a token, on
	// its own address (for a scraper on a private network).
	MetricsListen string `yaml:"metrics_listen"`
}

// ControlConfig locates the control database and the fan-out Redis.
type ControlConfig struct {
	MySQLDSN  string `yaml:"mysql_dsn"`
	RedisAddr string `yaml:"redis_addr"`
	RedisDB   int    `yaml:"redis_db"`
	// RedisCluster and RedisAddrs reach a Redis Cluster through its seed
	// nodes instead of the single Redis at RedisAddr.
	RedisCluster bool     `yaml:"redis_cluster"`
	RedisAddrs   []string `yaml:"redis_addrs"`
	// RedisPrefix starts the kill switch's key and pub/sub channel
	// (default "tandem:control:"); fleets sharing one Redis need their own.
	RedisPrefix string `yaml:"redis_prefix"`
}

// ReservationConfig sets hold and pool defaults.
type ReservationConfig struct {
	DefaultTTL     time.Duration `yaml:"default_ttl"`
	ReaperInterval time.Duration `yaml:"reaper_interval"`
	PoolCap        int           `yaml:"pool_cap"`
}

// RolloutConfig sets the promotion gates and the automatic abort.
type RolloutConfig struct {
	GateMinComparisons    int64         `yaml:"gate_min_comparisons"`
	GateMaxDivergenceRate float64       `yaml:"gate_max_divergence_rate"`
	GateWindow            time.Duration `yaml:"gate_window"`
	GateRequireAudit      bool          `yaml:"gate_require_audit"`
	AbortDivergenceRate   float64       `yaml:"abort_divergence_rate"`
	AbortMinComparisons   int64         `yaml:"abort_min_comparisons"`
	// AbortWindow is the recent window the automatic abort judges.
	AbortWindow   time.Duration `yaml:"abort_window"`
	AuditInterval time.Duration `yaml:"audit_interval"`
	// GateConsecutivePasses is how many of the plan's evaluations in a
	// row must pass before it promotes a pod.
	GateConsecutivePasses int `yaml:"gate_consecutive_passes"`
	// GateMySQLP99Max, GateMaxP99Factor, GateP99Slack and
	// GateMaxMySQLErrorRate are the plan's performance gates (0 disables
	// each): MySQL's p99 at most GateMySQLP99Max and at most
	// max(GateMaxP99Factor x Redis's p99, Redis's p99 + GateP99Slack).
	GateMySQLP99Max       time.Duration `yaml:"gate_mysql_p99_max"`
	GateMaxP99Factor      float64       `yaml:"gate_max_p99_factor"`
	GateP99Slack          time.Duration `yaml:"gate_p99_slack"`
	GateMaxMySQLErrorRate float64       `yaml:"gate_max_mysql_error_rate"`
	Plan                  PlanConfig    `yaml:"plan"`
}

// PlanConfig holds the defaults of POST /admin/plan/start and the plan's
// notifications.
type PlanConfig struct {
	ShadowSoak time.Duration `yaml:"shadow_soak"`
	MySQLSoak  time.Duration `yaml:"mysql_soak"`
	FinalMode  string        `yaml:"final_mode"`
	Parallel   int           `yaml:"parallel"`
	Approval   bool          `yaml:"approval"`
	// Webhooks are URLs notified (JSON POST, Slack-compatible) of plan
	// steps, pauses, aborts and kill switch changes.
	Webhooks []string `yaml:"webhooks"`
	// ConfirmWebhooks are URLs that must answer 2xx to a pod's promotion
	// (its gate values) before the plan promotes it; ConfirmTimeout bounds
	// each call.
	ConfirmWebhooks []string      `yaml:"confirm_webhooks"`
	ConfirmTimeout  time.Duration `yaml:"confirm_timeout"`
	// Rehearsal is the plan's rehearsal gate (speed 0: off).
	Rehearsal RehearsalConfig `yaml:"rehearsal"`
}

// RehearsalConfig is the plan's rehearsal gate: before shadow -> mysql it
// replays the pod's latest capture at Speed times its speed on a scratch
// database, and promotes only when every op's p99 stayed under P99Max
// with no error, clean invariants and the capture's grants.
type RehearsalConfig struct {
	Speed  float64       `yaml:"speed"`
	P99Max time.Duration `yaml:"p99_max"`
	// Server is the MySQL server (a DSN of a user that may create
	// databases) on which each rehearsal creates its scratch database;
	// empty: the pod's own server (its mysql_dsn).
	Server string `yaml:"server"`
}

// ShadowConfig bounds the shadow's work.
type ShadowConfig struct {
	Timeout     time.Duration `yaml:"timeout"`
	MaxInflight int           `yaml:"max_inflight"`
}

// BackfillConfig sizes the bulk copy a pod runs before it enters shadow.
type BackfillConfig struct {
	// BatchHolds is about how many holds one transaction copies.
	BatchHolds int `yaml:"batch_holds"`
	// Workers is how many batches are copied at once.
	Workers int `yaml:"workers"`
}

// PodConfig is one pod: its shops and its own MySQL and Redis.
type PodConfig struct {
	Name              string   `yaml:"name"`
	Shops             []string `yaml:"shops"`
	Mode              string   `yaml:"mode"`
	MySQLDSN          string   `yaml:"mysql_dsn"`
	RedisAddr         string   `yaml:"redis_addr"`
	RedisDB           int      `yaml:"redis_db"`
	RedisCluster      bool     `yaml:"redis_cluster"`
	RedisAddrs        []string `yaml:"redis_addrs"`
	MySQLMaxOpenConns int      `yaml:"mysql_max_open_conns"`
	// MySQLMaxInflight is how many reserves, claims and releases hold a
	// MySQL connection at once, the rest queued first in, first out
	// (mysqlres.Store.MaxInflight); 0 means the pool less one.
	MySQLMaxInflight int `yaml:"mysql_max_inflight"`
	// RedisPrefix starts every Redis key of the pod (default "tandem:<name>:").
	RedisPrefix string `yaml:"redis_prefix"`
	// ReplicaDSN is a replica of the pod's MySQL (optional): its lag, read
	// from the heartbeat row the primary writes, throttles background work
	// (throttle.max_replica_lag).
	ReplicaDSN string `yaml:"replica_dsn"`

	shops tandem.ShopSet
}

// DefaultConfig returns the documented defaults (docs/configuration.md),
// with no pods.
func DefaultConfig() Config {
	return Config{
		Listen:      "127.0.0.1:8080",
		AdminListen: "127.0.0.1:8081",
		Control:     ControlConfig{MySQLDSN: "root@tcp(127.0.0.1:3306)/tandem_control", RedisAddr: "127.0.0.1:6379"},
		Reservation: ReservationConfig{DefaultTTL: tandem.DefaultTTL, ReaperInterval: time.Second, PoolCap: 1000},
		Rollout: RolloutConfig{
			GateMinComparisons: 1000, GateMaxDivergenceRate: 0.001, GateWindow: 15 * time.Minute,
			GateRequireAudit: true, AbortDivergenceRate: 0.01, AbortMinComparisons: 200, AbortWindow: time.Minute,
			AuditInterval: 5 * time.Minute, GateConsecutivePasses: 3, GateMySQLP99Max: 50 * time.Millisecond,
			GateMaxP99Factor: 3, GateP99Slack: 25 * time.Millisecond, GateMaxMySQLErrorRate: 0.001,
			Plan: PlanConfig{ShadowSoak: 30 * time.Minute, MySQLSoak: 30 * time.Minute, FinalMode: "mysql", Parallel: 1,
				ConfirmTimeout: rollout.DefaultConfirmTimeout, Rehearsal: RehearsalConfig{P99Max: 50 * time.Millisecond}},
		},
		Shadow:   ShadowConfig{Timeout: 250 * time.Millisecond, MaxInflight: 256},
		Backfill: BackfillConfig{BatchHolds: 5000, Workers: 3},
		Throttle: defaultThrottle(),
	}
}

// LoadConfig reads and validates a config file.
func LoadConfig(path string) (Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	return ParseConfig(f)
}

// ParseConfig decodes YAML over the defaults, rejecting unknown keys, and
// validates the result. Its errors name the key path and what the key
// expects, suggest the closest known key for an unknown one, and never name
// a Go type.
func ParseConfig(r io.Reader) (Config, error) {
	data, err := io.ReadAll(io.LimitReader(r, 1<<20))
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	cfg := DefaultConfig()
	// Parse to a node first: the checker names the key path and what it
	// expects in the operator's words (yaml.v3 would name Go types).
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return Config{}, yamlSyntaxError(err)
	}
	if err := checkConfigYAML(&doc); err != nil {
		return Config{}, err
	}
	// Validate puts the default back unless the file names a cluster: a
	// default single address must not count as "both redis_addr and
	// redis_addrs".
	cfg.Control.RedisAddr = ""
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		return Config{}, yamlSyntaxError(err)
	}
	if err := cfg.Validate(); err != nil {
		var ce *configError
		if errors.As(err, &ce) && ce.line == 0 {
			ce.line = lineOf(&doc, ce.path)
		}
		return Config{}, err
	}
	return cfg, nil
}

var podName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// Validate checks every key and names the first that is wrong.
func (c *Config) Validate() error {
	if err := c.validateControl(); err != nil {
		return err
	}
	if err := c.validateLimits(); err != nil {
		return err
	}
	if err := c.Rollout.validate(); err != nil {
		return err
	}
	return c.validatePods()
}

// bad names a wrong key of the config; ParseConfig adds its line.
func bad(key, format string, args ...any) error {
	return &configError{path: key, msg: fmt.Sprintf(format, args...)}
}

// missing says that a required key is absent or empty, and what it wants.
func missing(key, what string) error {
	return &configError{path: key, msg: "missing: " + what}
}

// validateControl checks the listeners and the control plane.
func (c *Config) validateControl() error {
	for key, addr := range map[string]string{"listen": c.Listen, "admin_listen": c.AdminListen} {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return bad(key, "want host:port, got %q", addr)
		}
	}
	if c.MetricsListen != "" {
		if _, _, err := net.SplitHostPort(c.MetricsListen); err != nil {
			return bad("metrics_listen", "want host:port or nothing, got %q", c.MetricsListen)
		}
	}
	if c.Control.MySQLDSN == "" {
		return missing("control.mysql_dsn", "the control database's MySQL DSN (user@tcp(host:port)/db)")
	}
	if _, err := mysql.ParseDSN(c.Control.MySQLDSN); err != nil {
		return bad("control.mysql_dsn", "not a MySQL DSN (user@tcp(host:port)/db)")
	}
	if !c.Control.RedisCluster && c.Control.RedisAddr == "" && len(c.Control.RedisAddrs) == 0 {
		c.Control.RedisAddr = DefaultConfig().Control.RedisAddr
	}
	if err := validateRedis("control.", c.Control.RedisAddr, c.Control.RedisAddrs, c.Control.RedisCluster, c.Control.RedisDB); err != nil {
		return err
	}
	if c.Control.RedisPrefix == "" {
		c.Control.RedisPrefix = "tandem:control:"
	}
	if !strings.HasSuffix(c.Control.RedisPrefix, ":") {
		return bad("control.redis_prefix", "want a trailing colon, got %q", c.Control.RedisPrefix)
	}
	return nil
}

// validateLimits checks the reservation and shadow settings.
func (c *Config) validateLimits() error {
	for key, d := range map[string]time.Duration{"reservation.default_ttl": c.Reservation.DefaultTTL,
		"reservation.reaper_interval": c.Reservation.ReaperInterval, "shadow.timeout": c.Shadow.Timeout} {
		if err := checkRange(key, d); err != nil {
			return err
		}
	}
	if c.Reservation.PoolCap < 1 || c.Reservation.PoolCap > 100000 {
		return bad("reservation.pool_cap", "must be 1..100000, got %d", c.Reservation.PoolCap)
	}
	if c.Shadow.MaxInflight < 1 || c.Shadow.MaxInflight > 100000 {
		return bad("shadow.max_inflight", "must be 1..100000, got %d", c.Shadow.MaxInflight)
	}
	if c.Backfill.BatchHolds < 1 || c.Backfill.BatchHolds > 100000 {
		return bad("backfill.batch_holds", "must be 1..100000, got %d", c.Backfill.BatchHolds)
	}
	if c.Backfill.Workers < 1 || c.Backfill.Workers > 16 {
		return bad("backfill.workers", "must be 1..16, got %d", c.Backfill.Workers)
	}
	if err := c.Throttle.validate(); err != nil {
		return err
	}
	return nil
}

// validate checks the rollout's gates, abort and plan settings.
func (ro RolloutConfig) validate() error {
	switch {
	case ro.GateMinComparisons < 0:
		return bad("rollout.gate_min_comparisons", "must be >= 0")
	case ro.GateMaxDivergenceRate < 0 || ro.GateMaxDivergenceRate > 1:
		return bad("rollout.gate_max_divergence_rate", "must be 0..1")
	case checkRange("rollout.gate_window", ro.GateWindow) != nil:
		return checkRange("rollout.gate_window", ro.GateWindow)
	case ro.AbortDivergenceRate < 0 || ro.AbortDivergenceRate > 1:
		return bad("rollout.abort_divergence_rate", "must be 0..1 (0 disables)")
	case ro.AbortMinComparisons < 0:
		return bad("rollout.abort_min_comparisons", "must be >= 0")
	case checkRange("rollout.abort_window", ro.AbortWindow) != nil:
		return checkRange("rollout.abort_window", ro.AbortWindow)
	case ro.GateConsecutivePasses < 1 || ro.GateConsecutivePasses > 100:
		return bad("rollout.gate_consecutive_passes", "must be 1..100, got %d", ro.GateConsecutivePasses)
	case ro.GateMySQLP99Max < 0:
		return bad("rollout.gate_mysql_p99_max", "must be >= 0 (0 disables)")
	case ro.GateP99Slack < 0:
		return bad("rollout.gate_p99_slack", "must be >= 0 (0 disables)")
	case ro.AuditInterval < 0:
		return bad("rollout.audit_interval", "must be >= 0 (0 disables the scheduled audit)")
	case ro.GateMaxP99Factor < 0:
		return bad("rollout.gate_max_p99_factor", "must be >= 0 (0 disables)")
	case ro.GateMaxMySQLErrorRate < 0 || ro.GateMaxMySQLErrorRate > 1:
		return bad("rollout.gate_max_mysql_error_rate", "must be 0..1 (0 disables)")
	case ro.Plan.ShadowSoak < 0 || ro.Plan.MySQLSoak < 0:
		return bad("rollout.plan", "soaks must be >= 0")
	case ro.Plan.FinalMode != "mysql" && ro.Plan.FinalMode != "mysql_only":
		return bad("rollout.plan.final_mode", "must be mysql or mysql_only, got %q", ro.Plan.FinalMode)
	case ro.Plan.Parallel < 1 || ro.Plan.Parallel > 100:
		return bad("rollout.plan.parallel", "must be 1..100, got %d", ro.Plan.Parallel)
	}
	if ro.Plan.ConfirmTimeout <= 0 || ro.Plan.ConfirmTimeout > rollout.MaxConfirmTimeout {
		return bad("rollout.plan.confirm_timeout", "must be > 0 and at most %s, got %s", rollout.MaxConfirmTimeout, ro.Plan.ConfirmTimeout)
	}
	if len(ro.Plan.ConfirmWebhooks) > rollout.MaxConfirmWebhooks {
		return bad("rollout.plan.confirm_webhooks", "at most %d URLs, got %d", rollout.MaxConfirmWebhooks, len(ro.Plan.ConfirmWebhooks))
	}
	for _, raw := range ro.Plan.ConfirmWebhooks {
		if u, err := url.Parse(raw); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return bad("rollout.plan.confirm_webhooks", "must be http(s) URLs, got %q", raw)
		}
	}
	switch rh := ro.Plan.Rehearsal; {
	case rh.Speed < 0 || rh.Speed > rollout.MaxRehearsalSpeed:
		return bad("rollout.plan.rehearsal.speed", "must be 0..%d (0 turns the rehearsal off), got %v", rollout.MaxRehearsalSpeed, rh.Speed)
	case rh.P99Max <= 0:
		return bad("rollout.plan.rehearsal.p99_max", "must be > 0, got %s", rh.P99Max)
	case rh.Server != "":
		if _, err := mysql.ParseDSN(rh.Server); err != nil {
			return bad("rollout.plan.rehearsal.server", "not a MySQL DSN (user@tcp(host:port)/)")
		}
	}
	for _, u := range ro.Plan.Webhooks {
		if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
			return bad("rollout.plan.webhooks", "must be http(s) URLs, got %q", u)
		}
	}
	return nil
}

// validatePods checks every pod and fills its defaults.
func (c *Config) validatePods() error {
	if len(c.Pods) == 0 {
		return bad("pods", "at least one pod is required")
	}
	names := map[string]bool{}
	for i := range c.Pods {
		p := &c.Pods[i]
		key := fmt.Sprintf("pods[%d]", i)
		if p.Name == "" {
			return missing(key+".name", "every pod needs a name ([a-z0-9][a-z0-9_-]*)")
		}
		if !podName.MatchString(p.Name) {
			return bad(key+".name", "want [a-z0-9][a-z0-9_-]*, got %q", p.Name)
		}
		if names[p.Name] {
			return bad(key+".name", "pod %q is listed twice", p.Name)
		}
		names[p.Name] = true
		if len(p.Shops) == 0 {
			return missing(key+".shops", "at least one shop id or range (e.g. [1, 2, \"100-199\"])")
		}
		s, err := tandem.ParseShopSet(p.Shops)
		if err != nil {
			return bad(key+".shops", "%v", err)
		}
		p.shops = s
		for j := 0; j < i; j++ {
			if c.Pods[j].shops.Overlaps(s) {
				return bad(key+".shops", "overlaps the shops of pod %q", c.Pods[j].Name)
			}
		}
		if p.Mode == "" {
			p.Mode = string(tandem.ModeRedis)
		}
		if !tandem.Mode(p.Mode).Valid() {
			return bad(key+".mode", "want redis, shadow, mysql or mysql_only, got %q", p.Mode)
		}
		if p.MySQLDSN == "" {
			return missing(key+".mysql_dsn", fmt.Sprintf("pod %s's MySQL DSN (user@tcp(host:port)/db)", p.Name))
		}
		if _, err := mysql.ParseDSN(p.MySQLDSN); err != nil {
			return bad(key+".mysql_dsn", "not a MySQL DSN (user@tcp(host:port)/db)")
		}
		if _, err := mysql.ParseDSN(p.ReplicaDSN); err != nil && p.ReplicaDSN != "" {
			return bad(key+".replica_dsn", "not a MySQL DSN (user@tcp(host:port)/db)")
		}
		if err := validateRedis(key+".", p.RedisAddr, p.RedisAddrs, p.RedisCluster, p.RedisDB); err != nil {
			return err
		}
		if p.RedisPrefix == "" {
			p.RedisPrefix = "tandem:" + p.Name + ":"
		}
		if !strings.HasSuffix(p.RedisPrefix, ":") {
			return bad(key+".redis_prefix", "want a trailing colon, got %q", p.RedisPrefix)
		}
		if p.MySQLMaxOpenConns == 0 {
			p.MySQLMaxOpenConns = 32
		}
		if p.MySQLMaxOpenConns < 1 || p.MySQLMaxOpenConns > 1000 {
			return bad(key+".mysql_max_open_conns", "must be 1..1000")
		}
		if p.MySQLMaxInflight < 0 || p.MySQLMaxInflight > p.MySQLMaxOpenConns {
			return bad(key+".mysql_max_inflight", "must be 0 (the pool less one) to mysql_max_open_conns (%d), got %d", p.MySQLMaxOpenConns, p.MySQLMaxInflight)
		}
	}
	return nil
}

// ShopSet returns the pod's parsed shops (valid after Validate).
func (p PodConfig) ShopSet() tandem.ShopSet { return p.shops }

// validateRedis checks one Redis location: a single Redis (redis_addr,
// redis_db) or a Redis Cluster (redis_cluster: true and its seed nodes in
// redis_addrs), never a mix. prefix starts the keys named in errors.
func validateRedis(prefix, addr string, addrs []string, cluster bool, db int) error {
	bad := func(key, format string, args ...any) error {
		return &configError{path: prefix + key, msg: fmt.Sprintf(format, args...)}
	}
	if !cluster {
		if len(addrs) > 0 {
			return bad("redis_addrs", "seed nodes are for a Redis Cluster: set redis_cluster: true, or use redis_addr for a single Redis")
		}
		if addr == "" {
			return &configError{path: prefix + "redis_addr", msg: "missing: a single Redis (host:port), or redis_cluster: true with redis_addrs"}
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return bad("redis_addr", "want host:port, got %q", addr)
		}
		if db < 0 || db > 15 {
			return bad("redis_db", "must be 0..15")
		}
		return nil
	}
	if addr != "" {
		return bad("redis_addr", "set redis_addrs (the cluster's seed nodes), not redis_addr, with redis_cluster: true")
	}
	if len(addrs) == 0 {
		return bad("redis_addrs", "redis_cluster: true needs at least one seed node (host:port)")
	}
	seen := map[string]bool{}
	for i, a := range addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return bad(fmt.Sprintf("redis_addrs[%d]", i), "want host:port, got %q", a)
		}
		if seen[a] {
			return bad(fmt.Sprintf("redis_addrs[%d]", i), "%q is listed twice", a)
		}
		seen[a] = true
	}
	if db != 0 {
		return bad("redis_db", "a Redis Cluster has only database 0, got %d", db)
	}
	return nil
}

// RedisTarget says which Redis a config names, for logs and errors.
func redisTarget(addr string, addrs []string, cluster bool) string {
	if cluster {
		return "cluster " + strings.Join(addrs, ",")
	}
	return addr
}

// mysqlAddr says which server a DSN names, for errors: host:port, or the
// socket path; never the user or password.
func mysqlAddr(dsn string) string {
	c, err := mysql.ParseDSN(dsn)
	if err != nil || c.Addr == "" {
		return "(the DSN's default address)"
	}
	return c.Addr
}

// atMySQL names the server that err came from: "mysql at 127.0.0.1:3307
// is unavailable: connection refused". The error still unwraps to err.
func atMySQL(dsn string, err error) error {
	if err == nil {
		return nil
	}
	at := "mysql at " + mysqlAddr(dsn)
	var te *tandem.Error
	if errors.As(err, &te) {
		if rest, ok := strings.CutPrefix(te.Message, "mysql "); ok {
			return &addrError{msg: at + " " + rest, err: err}
		}
		return &addrError{msg: at + ": " + te.Message, err: err}
	}
	return &addrError{msg: at + ": " + err.Error(), err: err}
}

// addrError is an error told with the address it concerns.
type addrError struct {
	msg string
	err error
}

func (e *addrError) Error() string { return e.msg }
func (e *addrError) Unwrap() error { return e.err }
