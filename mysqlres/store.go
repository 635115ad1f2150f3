package mysqlres

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/internal/mysqlx"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// MigrationsTable records which of the engine's migrations have run.
const MigrationsTable = "tandem_migrations"

// Defaults of a Store's configuration.
const (
	DefaultPoolCap      = 1000
	DefaultMaxOpenConns = 32
	// DefaultRetention is how long ended reservations are kept, as long as
	// the Redis engine keeps its ended carts (redisres.DefaultRetention).
	DefaultRetention = 24 * time.Hour
)

// openTimeout bounds the server checks of Open.
const openTimeout = 10 * time.Second

// Statements run when the store starts.
const (
	openServerSQL   = "/* conn_tag='migrate' */ SELECT VERSION(), @@log_bin, @@binlog_format"
	openIsoMariaSQL = "/* conn_tag='migrate' */ SELECT @@tx_isolation"
	openIsoMySQLSQL = "/* conn_tag='migrate' */ SELECT @@transaction_isolation"
)

var (
	_ tandem.ShadowStore = (*Store)(nil)
	_ tandem.Ledger      = (*ledger)(nil)
)

// Store is the MySQL unit-row engine of one pod, and the pod's ledger.
// NewStore returns it with every setting at its default; change the exported
// fields before Open. A Store is safe for concurrent use once open.
type Store struct {
	// PoolCap is the most unit rows kept per (shop, item, group), at least
	// 1; default 1000.
	PoolCap int
	// MaxOpenConns bounds the engine's connection pool, at least 1;
	// default 32.
	MaxOpenConns int
	// MaxInflight is how many buyer flows (reserve, claim, release) hold a
	// connection at once, at least 1; the others queue for a slot first
	// in, first out (see admission). 0 means MaxOpenConns - 1 (the last
	// connection is the replenisher's and background work's), but at
	// least 1. It is at most MaxOpenConns.
	MaxInflight int
	// Retention is how long an ended (claimed, released, expired)
	// reservation is kept before PurgeEnded removes it, above zero;
	// default 24h.
	Retention time.Duration
	// AllowStatementBinlog starts the store even when the server logs binary
	// changes with binlog_format=STATEMENT, which is unsafe for SKIP LOCKED
	// (logged loudly).
	AllowStatementBinlog bool
	// Now is the store's clock; default time.Now.
	Now func() time.Time
	// Logger receives the store's logs; default zap.NewNop().
	Logger *zap.Logger
	// Registerer receives the store's metrics; nil means no metrics.
	Registerer prometheus.Registerer
	// Admissions is told every buyer flow's wait in the admission
	// (optional): the pod's throttle judges the buyers' health by it.
	Admissions AdmissionObserver

	dsn     string
	db      *sql.DB
	mariadb bool
	metrics *metrics
	repl    *replenisher
	// admission queues buyer flows for one of MaxInflight slots.
	admission admission
	// bulk refreshes the statistics as bulk writes fill the tables.
	bulk bulkStats

	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// NewStore returns a Store for the MySQL database dsn (go-sql-driver
// format) with the default settings, the wall clock and no logs; call Open
// before use.
func NewStore(dsn string) *Store {
	return &Store{
		dsn:          dsn,
		PoolCap:      DefaultPoolCap,
		MaxOpenConns: DefaultMaxOpenConns,
		Retention:    DefaultRetention,
		Now:          time.Now,
		Logger:       zap.NewNop(),
	}
}

// Name returns tandem.StoreMySQL.
func (s *Store) Name() string { return tandem.StoreMySQL }

// DB returns the store's connection pool (READ COMMITTED sessions), nil
// before Open.
func (s *Store) DB() *sql.DB { return s.db }

// Ledger returns the pod's ledger, kept in the store's database.
func (s *Store) Ledger() tandem.Ledger { return &ledger{s: s} }

// validate refuses settings the engine cannot run with.
func (s *Store) validate() error {
	switch {
	case s.PoolCap < 1:
		return tandem.Errorf(tandem.EINVALID, "mysql pool cap must be at least 1, got %d", s.PoolCap)
	case s.MaxOpenConns < 1:
		return tandem.Errorf(tandem.EINVALID, "mysql max open connections must be at least 1, got %d", s.MaxOpenConns)
	case s.MaxInflight < 0 || s.MaxInflight > s.MaxOpenConns:
		return tandem.Errorf(tandem.EINVALID, "mysql max in-flight must be between 0 (default) and the max open connections (%d), got %d", s.MaxOpenConns, s.MaxInflight)
	case s.Retention <= 0:
		return tandem.Errorf(tandem.EINVALID, "mysql retention must be above zero, got %s", s.Retention)
	case s.Now == nil || s.Logger == nil:
		return tandem.Errorf(tandem.EINVALID, "mysql store needs a clock and a logger (NewStore sets both)")
	}
	return nil
}

// inflight is the admission's size: MaxInflight, or MaxOpenConns - 1 (at
// least 1) when it is 0.
func (s *Store) inflight() int {
	if s.MaxInflight > 0 {
		return s.MaxInflight
	}
	return max(s.MaxOpenConns-1, 1)
}

// baseConfig parses the DSN and sets what the engine relies on: times
// parsed in UTC and parameters interpolated client side (one round trip per
// statement instead of prepare, execute and close).
func (s *Store) baseConfig() (*mysql.Config, error) {
	cfg, err := mysqlx.ParseDSN(s.dsn)
	if err != nil {
		return nil, fmt.Errorf("mysqlres: parse DSN: %w", err)
	}
	return cfg, nil
}

// Open connects to the database, checks the server (binary log format,
// isolation) within ctx and at most 10s, and starts the background
// replenisher, which runs until Close. It returns EINVALID for settings the
// engine cannot run with.
func (s *Store) Open(ctx context.Context) error {
	if err := s.validate(); err != nil {
		return err
	}
	cfg, err := s.baseConfig()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()

	// Probe the server first: which isolation variable it knows decides
	// the session setting of the real pool.
	probe, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return fmt.Errorf("mysqlres: open: %w", err)
	}
	var version, binlogFormat string
	var logBin sql.NullInt64
	err = probe.QueryRowContext(ctx, openServerSQL).Scan(&version, &logBin, &binlogFormat)
	probe.Close()
	if err != nil {
		return translate("open", fmt.Errorf("mysqlres: probe server: %w", err))
	}
	s.mariadb = strings.Contains(strings.ToLower(version), "mariadb")
	if logBin.Int64 == 1 && strings.EqualFold(binlogFormat, "STATEMENT") {
		s.Logger.Error("binary logging uses binlog_format=STATEMENT: SKIP LOCKED is unsafe for statement-based replication (replicas may diverge); use ROW",
			zap.String("server_version", version), zap.Bool("allowed", s.AllowStatementBinlog))
		if !s.AllowStatementBinlog {
			return errors.New("mysqlres: server logs binary changes with binlog_format=STATEMENT, unsafe for SKIP LOCKED; set binlog_format=ROW or AllowStatementBinlog")
		}
	}

	isoVar, isoSQL := "transaction_isolation", openIsoMySQLSQL
	if s.mariadb {
		isoVar, isoSQL = "tx_isolation", openIsoMariaSQL
	}
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params[isoVar] = "'READ-COMMITTED'"
	// Multi-statement batches let a reserve send BEGIN with its select and
	// its writes with COMMIT (batchTx): two round trips instead of six.
	cfg.MultiStatements = true
	db, err := mysqlx.OpenPool(cfg, s.MaxOpenConns)
	if err != nil {
		return fmt.Errorf("mysqlres: open: %w", err)
	}
	var iso string
	if err := db.QueryRowContext(ctx, isoSQL).Scan(&iso); err != nil {
		db.Close()
		return translate("open", fmt.Errorf("mysqlres: check isolation: %w", err))
	}
	if iso != "READ-COMMITTED" {
		db.Close()
		return fmt.Errorf("mysqlres: session isolation is %s, want READ-COMMITTED", iso)
	}

	m, err := newMetrics(s.Registerer, db)
	if err != nil {
		db.Close()
		return err
	}
	s.db, s.metrics = db, m
	s.admission = newAdmission(s.inflight())
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.repl = newReplenisher(s)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.repl.run(s.ctx)
	}()
	s.Logger.Info("mysql store open", zap.String("server_version", version),
		zap.String("binlog_format", binlogFormat), zap.Int("pool_cap", s.PoolCap))
	return nil
}

// Close stops the replenisher, waits for it and closes the connections.
// Safe to call twice.
func (s *Store) Close() error {
	var err error
	s.closeOnce.Do(func() {
		if s.cancel != nil {
			s.cancel()
		}
		s.wg.Wait()
		if s.metrics != nil {
			s.metrics.unregister()
		}
		if s.db != nil {
			err = s.db.Close()
		}
	})
	return err
}

// Migrate creates the database when it is missing and the user may, and
// brings its tables up to date. Idempotent; safe from many processes at
// once; works with or without Open.
func (s *Store) Migrate(ctx context.Context) error {
	cfg, err := s.baseConfig()
	if err != nil {
		return err
	}
	return translate("migrate", mysqlx.Migrate(ctx, *cfg, migrationFS, "migrations", MigrationsTable))
}
