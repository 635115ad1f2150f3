// Package demo is what `tandem serve` without --config runs besides the
// server: its stores (local MySQL/MariaDB and Redis, or a throwaway
// mariadbd and an embedded miniredis), its config, and buyers that play
// checkouts through the checkout API (traffic.go). The server
// (cmd/tandem/internal/server) does not import it: `tandem serve --config`
// links no miniredis, and the demo drives the server only through what a
// server.Main offers and through its HTTP APIs.
package demo

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/tandemhq/tandem/cmd/tandem/internal/server"
)

// Demo is one demo run's stores: what it started it stops when the
// server closes.
type Demo struct {
	// Names are the database names and key prefix of the run; zero takes
	// DefaultNames. Tests take their own, so that they never touch a real
	// demo's.
	Names Names

	logger *zap.Logger
	mysqld *exec.Cmd
	mr     *miniredis.Miniredis
}

// close stops the throwaway mariadbd and the embedded Redis, if started.
func (d *Demo) close() error {
	if d.mysqld != nil && d.mysqld.Process != nil {
		_ = d.mysqld.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { d.mysqld.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = d.mysqld.Process.Kill()
			<-done
		}
	}
	if d.mr != nil {
		d.mr.Close()
	}
	return nil
}

func answers(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 300*time.Millisecond)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// demoPods are the demo's pods: one per mode of interest, smallest first.
var demoPods = []struct {
	name, shops, mode string
}{
	{"pod-a", "1-9", "shadow"},
	{"pod-b", "10-99", "mysql"},
	{"pod-c", "100-999", "redis"},
}

// Names the demo uses and no other config does: its databases, its Redis
// key prefix, and the marker table that says a database is the demo's.
const (
	demoDBPrefix    = "tandem_demo_"
	demoRedisPrefix = "tandem-demo:"
	demoMarkerTable = "tandem_demo_marker"
)

// Statements of the demo's set-up. Database names are built from
// demoDBPrefix and pod names, never from input.
const (
	demoDBExistsSQL  = "SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = ?"
	demoMarkedSQL    = "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = ? AND table_name = '" + demoMarkerTable + "'"
	demoDropSQL      = "DROP DATABASE `%s`"
	demoCreateSQL    = "CREATE DATABASE `%s`"
	demoMarkSQL      = "CREATE TABLE `%s`." + demoMarkerTable + " (created_at DATETIME(6) NOT NULL, note VARCHAR(255) NOT NULL) ENGINE=InnoDB"
	demoMarkRowSQL   = "INSERT INTO `%s`." + demoMarkerTable + " (created_at, note) VALUES (?, 'created by tandem serve --demo; dropped and recreated at every demo start')"
	demoKeysPattern  = "*"
	demoDBNameSuffix = "control"
)

// Names are the names one demo run uses: its databases' prefix and its
// Redis key prefix.
type Names struct {
	DBPrefix, RedisPrefix string
}

// DefaultNames are the demo's names, which no other config uses.
var DefaultNames = Names{DBPrefix: demoDBPrefix, RedisPrefix: demoRedisPrefix}

// SetUp is the server.Main's Prepare in the demo: it builds the config on
// local stores: MySQL/MariaDB on 127.0.0.1:3306 if it answers, else a
// throwaway mariadbd under .demo/; Redis on 127.0.0.1:6379 if it answers,
// else embedded miniredis. TANDEM_DEMO_SPAWN_MYSQL and
// TANDEM_DEMO_EMBEDDED_REDIS force the fallbacks. It binds both of m's
// addresses (127.0.0.1:8080 and :8081 unless --listen and --admin-listen
// say otherwise) before it touches any data (a second demo fails there,
// changing nothing), uses its own database names and Redis key prefix, and
// drops only databases that carry its marker table. Without an admin token
// it makes one and prints it.
func (d *Demo) SetUp(ctx context.Context, m *server.Main) error {
	if d.Names == (Names{}) {
		d.Names = DefaultNames
	}
	d.logger = m.Logger
	m.AddCloser(d.close) // first added, last closed: after the stores
	var lns []net.Listener
	for _, addr := range []string{m.Config.Listen, m.Config.AdminListen} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			for _, ln := range lns {
				ln.Close()
			}
			return fmt.Errorf("demo: %s is in use (is another tandem demo or serve running? stop it first); nothing was changed: %w", addr, err)
		}
		lns = append(lns, ln)
	}
	m.Bind(lns[0], lns[1]) // Run serves on them, Close closes them
	mysqlAddr, redisAddr, err := d.startStores(ctx)
	if err != nil {
		return err
	}
	cfg, err := d.config(ctx, mysqlAddr, redisAddr)
	if err != nil {
		return err
	}
	cfg.Listen, cfg.AdminListen = lns[0].Addr().String(), lns[1].Addr().String()
	if err := cfg.Validate(); err != nil {
		return err
	}
	m.Config = cfg
	if m.AdminToken == "" {
		m.AdminToken = randomHex(16)
		fmt.Fprintf(m.Stdout, "\n  tandem demo: admin token %s\n  dashboard:   http://%s/  (paste the token)\n  tandemctl:   TANDEM_ADMIN_TOKEN=%s go run ./cmd/tandemctl pods\n\n",
			m.AdminToken, cfg.AdminListen, m.AdminToken)
	}
	return nil
}

// startStores returns the addresses of the MySQL and the Redis the demo
// runs on, local ones when they answer, else ones it starts.
func (d *Demo) startStores(ctx context.Context) (mysqlAddr, redisAddr string, err error) {
	mysqlAddr = "127.0.0.1:3306"
	if os.Getenv("TANDEM_DEMO_SPAWN_MYSQL") != "" || !answers(mysqlAddr) {
		if mysqlAddr, err = d.spawnMariaDB(ctx); err != nil {
			return "", "", err
		}
	}
	redisAddr = "127.0.0.1:6379"
	if os.Getenv("TANDEM_DEMO_EMBEDDED_REDIS") != "" || !answers(redisAddr) {
		mr, err := miniredis.Run()
		if err != nil {
			return "", "", fmt.Errorf("demo: embedded Redis: %w", err)
		}
		d.mr = mr
		redisAddr = mr.Addr()
		d.logger.Info("demo: no Redis on 127.0.0.1:6379, using embedded miniredis", zap.String("addr", redisAddr))
	}
	return mysqlAddr, redisAddr, nil
}

// config recreates the demo's databases and empties its Redis keys, and
// returns the config of its three pods on them.
func (d *Demo) config(ctx context.Context, mysqlAddr, redisAddr string) (server.Config, error) {
	dsn := func(db string) string {
		c := mysql.NewConfig()
		c.User, c.Net, c.Addr, c.DBName = "root", "tcp", mysqlAddr, db
		return c.FormatDSN()
	}
	dbs := []string{d.Names.DBPrefix + demoDBNameSuffix}
	for _, p := range demoPods {
		dbs = append(dbs, d.Names.DBPrefix+p.name[len("pod-"):])
	}
	if err := resetDemoDatabases(ctx, dsn(""), dbs); err != nil {
		return server.Config{}, fmt.Errorf("demo: MySQL at %s: %w", mysqlAddr, err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	iter := rdb.Scan(ctx, 0, d.Names.RedisPrefix+demoKeysPattern, 1000).Iterator()
	for iter.Next(ctx) {
		rdb.Unlink(ctx, iter.Val())
	}
	cfg := server.DefaultConfig()
	cfg.Control.MySQLDSN = dsn(dbs[0])
	cfg.Control.RedisAddr = redisAddr
	cfg.Control.RedisPrefix = d.Names.RedisPrefix + "control:"
	cfg.Reservation.DefaultTTL = time.Minute
	cfg.Rollout.GateMinComparisons = 200
	cfg.Rollout.GateWindow = 5 * time.Minute
	cfg.Rollout.AuditInterval = 30 * time.Second
	cfg.Rollout.AbortDivergenceRate = 0.05
	for i, p := range demoPods {
		cfg.Pods = append(cfg.Pods, server.PodConfig{
			Name: p.name, Shops: []string{p.shops}, Mode: p.mode,
			MySQLDSN: dsn(dbs[i+1]), RedisAddr: redisAddr, RedisDB: 0, MySQLMaxOpenConns: 16,
			RedisPrefix: d.Names.RedisPrefix + p.name + ":",
		})
	}
	return cfg, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// resetDemoDatabases drops and recreates the demo's databases, each with
// its marker table. A database of one of those names without the marker
// is someone else's: it refuses before dropping anything.
func resetDemoDatabases(ctx context.Context, rootDSN string, dbs []string) error {
	root, err := sql.Open("mysql", rootDSN)
	if err != nil {
		return err
	}
	defer root.Close()
	exists := make([]bool, len(dbs))
	for i, db := range dbs {
		var n, marked int
		if err := root.QueryRowContext(ctx, demoDBExistsSQL, db).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			continue
		}
		if err := root.QueryRowContext(ctx, demoMarkedSQL, db).Scan(&marked); err != nil {
			return err
		}
		if marked == 0 {
			return fmt.Errorf("database %s exists and is not the demo's (it has no %s table); the demo drops only its own databases: nothing was changed", db, demoMarkerTable)
		}
		exists[i] = true
	}
	for i, db := range dbs {
		if exists[i] {
			if _, err := root.ExecContext(ctx, fmt.Sprintf(demoDropSQL, db)); err != nil {
				return err
			}
		}
		for _, q := range []string{demoCreateSQL, demoMarkSQL} {
			if _, err := root.ExecContext(ctx, fmt.Sprintf(q, db)); err != nil {
				return err
			}
		}
		if _, err := root.ExecContext(ctx, fmt.Sprintf(demoMarkRowSQL, db), time.Now().UTC()); err != nil {
			return err
		}
	}
	return nil
}

// spawnMariaDB starts a throwaway mariadbd (or mysqld) from the installed
// binaries, with its data under .demo/mysql, on a free loopback port.
func (d *Demo) spawnMariaDB(ctx context.Context) (string, error) {
	bin, err := exec.LookPath("mariadbd")
	if err != nil {
		if bin, err = exec.LookPath("/usr/sbin/mariadbd"); err != nil {
			if bin, err = exec.LookPath("mysqld"); err != nil {
				return "", fmt.Errorf("demo: no MySQL/MariaDB answers on 127.0.0.1:3306 and none is installed (apt-get install mariadb-server)")
			}
		}
	}
	dir, err := filepath.Abs(filepath.Join(".demo", "mysql"))
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(dir, "mysql")); err != nil {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", err
		}
		install, err := exec.LookPath("mariadb-install-db")
		if err != nil {
			if install, err = exec.LookPath("mysql_install_db"); err != nil {
				return "", fmt.Errorf("demo: mariadb-install-db not found: %w", err)
			}
		}
		out, err := exec.CommandContext(ctx, install, "--no-defaults", "--datadir="+dir, "--user=root",
			"--auth-root-authentication-method=normal", "--skip-test-db").CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("demo: %s: %v\n%s", install, err, out)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	ln.Close()
	cmd := exec.Command(bin, "--no-defaults", "--datadir="+dir, "--user=root", "--bind-address=127.0.0.1",
		"--port="+port, "--socket="+filepath.Join(dir, "mysqld.sock"), "--pid-file="+filepath.Join(dir, "mysqld.pid"),
		"--skip-log-bin", "--innodb-buffer-pool-size=128M")
	logf, err := os.Create(filepath.Join(dir, "..", "mysqld.log"))
	if err != nil {
		return "", err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM} // never outlive the demo
	if err := cmd.Start(); err != nil {
		logf.Close()
		return "", fmt.Errorf("demo: start %s: %w", bin, err)
	}
	d.mysqld = cmd
	for i := 0; i < 120 && !answers(addr); i++ {
		time.Sleep(250 * time.Millisecond)
	}
	if !answers(addr) {
		return "", fmt.Errorf("demo: %s did not answer on %s (see .demo/mysqld.log)", bin, addr)
	}
	d.logger.Info("demo: no MySQL on 127.0.0.1:3306, started a throwaway mariadbd (data in .demo/mysql, stopped on exit)",
		zap.String("addr", addr), zap.String("binary", bin))
	return addr, nil
}
