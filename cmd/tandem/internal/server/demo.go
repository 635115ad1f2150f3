package server

import (
	"context"
	"database/sql"
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

	"github.com/tandemhq/tandem"
)

// demoEnv is what the demo started and must stop: a throwaway mariadbd,
// an embedded Redis.
type demoEnv struct {
	mysqld *exec.Cmd
	mr     *miniredis.Miniredis
}

func (d *demoEnv) close() {
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

// demoNames are the names one demo run uses; tests replace them with
// their own so that they never touch a real demo's.
type demoNames struct {
	listen, adminListen string
	dbPrefix            string
	redisPrefix         string
}

var defaultDemoNames = demoNames{
	listen: "127.0.0.1:8080", adminListen: "127.0.0.1:8081",
	dbPrefix: demoDBPrefix, redisPrefix: demoRedisPrefix,
}

// setUpDemo builds the demo config on local stores: MySQL/MariaDB on
// 127.0.0.1:3306 if it answers, else a throwaway mariadbd under .demo/;
// Redis on 127.0.0.1:6379 if it answers, else embedded miniredis.
// TANDEM_DEMO_SPAWN_MYSQL and TANDEM_DEMO_EMBEDDED_REDIS force the
// fallbacks. It binds both ports before it touches any data (a second demo
// fails there, changing nothing), uses its own database names and Redis key
// prefix, and drops only databases that carry its marker table.
func (m *Main) setUpDemo(ctx context.Context) error {
	names := m.demoNames
	if names == (demoNames{}) {
		names = defaultDemoNames
	}
	if m.listenFlag != "" {
		names.listen = m.listenFlag
	}
	if m.adminListenFlag != "" {
		names.adminListen = m.adminListenFlag
	}
	for _, addr := range []string{names.listen, names.adminListen} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("demo: %s is in use (is another tandem demo or serve running? stop it first); nothing was changed: %w", addr, err)
		}
		m.closers = append(m.closers, ignoreClosed(ln.Close))
		m.bound = append(m.bound, ln)
	}
	m.demo = &demoEnv{}
	mysqlAddr := "127.0.0.1:3306"
	if os.Getenv("TANDEM_DEMO_SPAWN_MYSQL") != "" || !answers(mysqlAddr) {
		addr, err := m.spawnMariaDB(ctx)
		if err != nil {
			return err
		}
		mysqlAddr = addr
	}
	redisAddr := "127.0.0.1:6379"
	if os.Getenv("TANDEM_DEMO_EMBEDDED_REDIS") != "" || !answers(redisAddr) {
		mr, err := miniredis.Run()
		if err != nil {
			return fmt.Errorf("demo: embedded Redis: %w", err)
		}
		m.demo.mr = mr
		redisAddr = mr.Addr()
		m.Logger.Info("demo: no Redis on 127.0.0.1:6379, using embedded miniredis", zap.String("addr", redisAddr))
	}
	dsn := func(db string) string {
		c := mysql.NewConfig()
		c.User, c.Net, c.Addr, c.DBName = "root", "tcp", mysqlAddr, db
		return c.FormatDSN()
	}
	dbs := []string{names.dbPrefix + demoDBNameSuffix}
	for _, p := range demoPods {
		dbs = append(dbs, names.dbPrefix+p.name[len("pod-"):])
	}
	if err := resetDemoDatabases(ctx, dsn(""), dbs); err != nil {
		return fmt.Errorf("demo: MySQL at %s: %w", mysqlAddr, err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	iter := rdb.Scan(ctx, 0, names.redisPrefix+demoKeysPattern, 1000).Iterator()
	for iter.Next(ctx) {
		rdb.Unlink(ctx, iter.Val())
	}
	cfg := DefaultConfig()
	cfg.Listen, cfg.AdminListen = m.bound[0].Addr().String(), m.bound[1].Addr().String()
	cfg.Control.MySQLDSN = dsn(dbs[0])
	cfg.Control.RedisAddr = redisAddr
	cfg.Control.RedisPrefix = names.redisPrefix + "control:"
	cfg.Reservation.DefaultTTL = time.Minute
	cfg.Rollout.GateMinComparisons = 200
	cfg.Rollout.GateWindow = 5 * time.Minute
	cfg.Rollout.AuditInterval = 30 * time.Second
	cfg.Rollout.AbortDivergenceRate = 0.05
	for i, p := range demoPods {
		cfg.Pods = append(cfg.Pods, PodConfig{
			Name: p.name, Shops: []string{p.shops}, Mode: p.mode,
			MySQLDSN: dsn(dbs[i+1]), RedisAddr: redisAddr, RedisDB: 0, MySQLMaxOpenConns: 16,
			RedisPrefix: names.redisPrefix + p.name + ":",
		})
	}
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
func (m *Main) spawnMariaDB(ctx context.Context) (string, error) {
	server, err := exec.LookPath("mariadbd")
	if err != nil {
		if server, err = exec.LookPath("/usr/sbin/mariadbd"); err != nil {
			if server, err = exec.LookPath("mysqld"); err != nil {
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
	cmd := exec.Command(server, "--no-defaults", "--datadir="+dir, "--user=root", "--bind-address=127.0.0.1",
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
		return "", fmt.Errorf("demo: start %s: %w", server, err)
	}
	m.demo.mysqld = cmd
	for i := 0; i < 120 && !answers(addr); i++ {
		time.Sleep(250 * time.Millisecond)
	}
	if !answers(addr) {
		return "", fmt.Errorf("demo: %s did not answer on %s (see .demo/mysqld.log)", server, addr)
	}
	m.Logger.Info("demo: no MySQL on 127.0.0.1:3306, started a throwaway mariadbd (data in .demo/mysql, stopped on exit)",
		zap.String("addr", addr), zap.String("binary", server))
	return addr, nil
}

// demoCaptureFor covers the demo's first flash sale (30 s after the start).
const demoCaptureFor = 40 * time.Second

// captureDemoFlashSale records the first pod's traffic over the demo's
// first flash sale, so that the README's rehearsal has a capture to replay.
func (m *Main) captureDemoFlashSale(pod string) {
	if m.captures == nil {
		return
	}
	info, err := m.captures.StartCapture(m.ctx, pod, tandem.CaptureRequest{
		Change: tandem.Change{Actor: "demo", Reason: "demo: record the flash sale for a rehearsal"}, Duration: demoCaptureFor})
	if err != nil {
		m.Logger.Warn("demo capture", zap.Error(err))
		return
	}
	m.Logger.Info("recording the flash sale for a rehearsal",
		zap.String("capture", info.ID), zap.String("pod", pod), zap.Duration("for", demoCaptureFor),
		zap.String("then", "tandemctl capture get "+info.ID+" -o flash.tcap && tandem replay --capture flash.tcap --speed 1"))
}
