// Package controldb is the control database: the pods' modes, the control
// version, the append-only audit log, the divergence sample, the running
// instances, the kill switch's durable record, the background transitions
// and the rollout plan. Every fleet instance shares it; the pods' own
// MySQL databases are mysqlres's. Its migrations are embedded and recorded
// in MigrationsTable.
package controldb

import (
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/go-sql-driver/mysql"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/internal/mysqlx"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// MigrationsTable records the applied control-database migrations.
const MigrationsTable = "tandem_control_migrations"

// Defaults of a Store.
const (
	DefaultMaxDivergences    = 1_000_000
	DefaultInstanceRetention = 24 * time.Hour
	maxOpenConns             = 8
	dialTimeout              = 3 * time.Second
	ioTimeout                = 10 * time.Second
)

// Statements of the control database. Every one carries the caller tag
// 'control'; the rollout controller and the comparator's writer are its
// only flows.
const (
	ctlInitPodSQL     = "/* conn_tag='control' */ INSERT IGNORE INTO control_pods (pod, mode, resynced, updated_at) VALUES (?, ?, 0, ?)"
	ctlPodsSQL        = "/* conn_tag='control' */ SELECT pod, mode, updated_at FROM control_pods ORDER BY pod"
	ctlVersionSQL     = "/* conn_tag='control' */ SELECT version FROM control_version WHERE id = 1"
	ctlBumpSQL        = "/* conn_tag='control' */ UPDATE control_version SET version = version + 1 WHERE id = 1"
	ctlLockPodSQL     = "/* conn_tag='control' */ SELECT mode FROM control_pods WHERE pod = ? FOR UPDATE"
	ctlSetModeSQL     = "/* conn_tag='control' */ UPDATE control_pods SET mode = ?, resynced = 0, updated_at = ? WHERE pod = ?"
	ctlSetResyncedSQL = "/* conn_tag='control' */ UPDATE control_pods SET resynced = 1 WHERE pod = ?"
	ctlResyncedSQL    = "/* conn_tag='control' */ SELECT resynced FROM control_pods WHERE pod = ?"
	ctlAppendAuditSQL = "/* conn_tag='control' */ INSERT INTO audit_log (at, actor, action, pod, reason, before_value, after_value) VALUES (?, ?, ?, ?, ?, ?, ?)"
	ctlAuditLogSQL    = "/* conn_tag='control' */ SELECT at, actor, action, pod, reason, before_value, after_value FROM audit_log ORDER BY id DESC LIMIT ?"
	ctlRegisterSQL    = "/* conn_tag='control' */ INSERT INTO instances (id, addr, started_at, last_seen, control_version) VALUES (?, ?, ?, ?, ?) " +
		"ON DUPLICATE KEY UPDATE addr = VALUES(addr), started_at = VALUES(started_at), last_seen = VALUES(last_seen), control_version = VALUES(control_version)"
	ctlHeartbeatSQL = "/* conn_tag='control' */ INSERT INTO instances (id, addr, started_at, last_seen, control_version) VALUES (?, '', ?, ?, ?) " +
		"ON DUPLICATE KEY UPDATE last_seen = VALUES(last_seen), control_version = VALUES(control_version)"
	ctlPruneInstancesSQL = "/* conn_tag='control' */ DELETE FROM instances WHERE last_seen < ?"
	ctlInstancesSQL      = "/* conn_tag='control' */ SELECT id, addr, started_at, last_seen, control_version FROM instances ORDER BY started_at, id"
	// ctlAppendDivergenceSQL is followed by one ctlDivergenceRow per divergence, comma separated.
	ctlAppendDivergenceSQL = "/* conn_tag='control' */ INSERT INTO divergences (at, pod, op, kind, cart_token, shop_id, source_of_truth, primary_outcome, shadow_outcome, position) VALUES "
	ctlDivergenceRow       = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
	ctlMaxDivergenceIDSQL  = "/* conn_tag='control' */ SELECT COALESCE(MAX(id), 0) FROM divergences"
	ctlPruneDivergencesSQL = "/* conn_tag='control' */ DELETE FROM divergences WHERE id <= ? ORDER BY id LIMIT 10000"
	// ctlDivergencesSQL is completed by the filter clauses and ctlDivergencesTail.
	ctlDivergencesSQL      = "/* conn_tag='control' */ SELECT id, at, pod, op, kind, cart_token, shop_id, source_of_truth, primary_outcome, shadow_outcome, position FROM divergences WHERE 1 = 1"
	ctlDivergencesPodSQL   = " AND pod = ?"
	ctlDivergencesKindSQL  = " AND kind = ?"
	ctlDivergencesSinceSQL = " AND at >= ?"
	ctlDivergencesTail     = " ORDER BY id DESC LIMIT ?"
)

// Config configures a Store; NewStore takes the defaults for its zero
// fields.
type Config struct {
	// DSN is the control database (go-sql-driver format); required.
	DSN string
	// MaxDivergences bounds the divergence sample: older rows are deleted
	// as new ones arrive; default DefaultMaxDivergences.
	MaxDivergences int64
	// InstanceRetention is how long an instance no longer seen is listed;
	// default DefaultInstanceRetention.
	InstanceRetention time.Duration
}

// Store is the control database: pod modes, the control version,
// the append-only audit log, the divergence sample and the running
// instances. It implements rollout.StateStore, comparator.DivergenceLog and
// killswitch.AuditLog. Every change appends its audit-log row and bumps the
// control version in one transaction, so instances that poll the version
// reload exactly when something changed.
type Store struct {
	cfg       Config
	db        *sql.DB
	closeOnce sync.Once
}

// NewStore returns a store of the control database cfg.DSN, not yet open:
// call Migrate (at install or upgrade) and Open.
func NewStore(cfg Config) *Store {
	if cfg.MaxDivergences <= 0 {
		cfg.MaxDivergences = DefaultMaxDivergences
	}
	if cfg.InstanceRetention <= 0 {
		cfg.InstanceRetention = DefaultInstanceRetention
	}
	return &Store{cfg: cfg}
}

// mysqlConfig parses the DSN and bounds the dial and I/O times the DSN
// leaves open, so that a control database that hangs fails fast.
func (s *Store) mysqlConfig() (*mysql.Config, error) {
	cfg, err := mysqlx.ParseDSN(s.cfg.DSN)
	if err != nil {
		return nil, fmt.Errorf("controldb: parse DSN: %w", err)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = dialTimeout
	}
	if cfg.ReadTimeout == 0 {
		cfg.ReadTimeout = ioTimeout
	}
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = ioTimeout
	}
	return cfg, nil
}

// Open connects to the control database and checks that it answers.
func (s *Store) Open(ctx context.Context) error {
	cfg, err := s.mysqlConfig()
	if err != nil {
		return err
	}
	db, err := mysqlx.OpenPool(cfg, maxOpenConns)
	if err != nil {
		return fmt.Errorf("controldb: open control database: %w", err)
	}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return translate(fmt.Errorf("controldb: ping control database: %w", err))
	}
	s.db = db
	return nil
}

// Ping checks that the control database answers, for readiness.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.ready(); err != nil {
		return err
	}
	return translate(s.db.PingContext(ctx))
}

// Close closes the connections; safe to call twice.
func (s *Store) Close() error {
	var err error
	s.closeOnce.Do(func() {
		if s.db != nil {
			err = s.db.Close()
		}
	})
	return err
}

// Migrate creates the control database when it is missing and the user
// may, and brings its tables up to date. Idempotent; works without Open.
func (s *Store) Migrate(ctx context.Context) error {
	cfg, err := s.mysqlConfig()
	if err != nil {
		return err
	}
	return translate(mysqlx.Migrate(ctx, *cfg, migrationFS, "migrations", MigrationsTable))
}

// withTx runs fn in a transaction and commits it, the way mysqlres runs
// its transactions: a deadlock or lock-wait timeout reruns fn from the
// start after a jittered backoff, up to mysqlx.MaxAttempts, and stops
// waiting when ctx ends (mysqlx.Retry). fn must not keep state across
// attempts except what it returns.
func (s *Store) withTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	if err := s.ready(); err != nil {
		return err
	}
	return translate(mysqlx.Retry(ctx, func() error { return mysqlx.Tx(ctx, s.db, fn) }, nil))
}

// translate turns an error at the store's boundary into a *tandem.Error
// when it has a meaning in the contract and wraps anything else as
// internal.
func translate(err error) error {
	return mysqlx.Translate("controldb", err)
}

func (s *Store) ready() error {
	if s.db == nil {
		return tandem.Errorf(tandem.EUNAVAILABLE, "control database is not open")
	}
	return nil
}

// CheckSchema reports whether the control database holds the schema this
// binary needs: every migration applied and every table present. Returns
// EUNAVAILABLE naming what is missing, or when the database cannot be
// reached.
func (s *Store) CheckSchema(ctx context.Context) error {
	if err := s.ready(); err != nil {
		return err
	}
	return translate(mysqlx.CheckSchema(ctx, s.db, migrationFS, "migrations", MigrationsTable))
}

// InitPods stores each pod that has no row yet with its mode; stored pods
// keep theirs. It bumps the version when it stores one.
func (s *Store) InitPods(ctx context.Context, pods []tandem.Pod, at time.Time) error {
	return s.withTx(ctx, func(tx *sql.Tx) error {
		var added int64
		for _, p := range pods {
			res, err := tx.ExecContext(ctx, ctlInitPodSQL, p.Name, string(p.Mode), at.UTC())
			if err != nil {
				return fmt.Errorf("init pod %s: %w", p.Name, err)
			}
			n, _ := res.RowsAffected()
			added += n
		}
		if added > 0 {
			if _, err := tx.ExecContext(ctx, ctlBumpSQL); err != nil {
				return fmt.Errorf("bump control version: %w", err)
			}
		}
		return nil
	})
}

// Pods returns every stored pod (Name, Mode, UpdatedAt) and the control
// version, read in one snapshot.
func (s *Store) Pods(ctx context.Context) ([]tandem.Pod, int64, error) {
	var pods []tandem.Pod
	var version int64
	err := s.withTx(ctx, func(tx *sql.Tx) error {
		pods = pods[:0]
		if err := tx.QueryRowContext(ctx, ctlVersionSQL).Scan(&version); err != nil {
			return fmt.Errorf("read control version: %w", err)
		}
		rows, err := tx.QueryContext(ctx, ctlPodsSQL)
		if err != nil {
			return fmt.Errorf("read pods: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var p tandem.Pod
			var mode string
			if err := rows.Scan(&p.Name, &mode, &p.UpdatedAt); err != nil {
				return fmt.Errorf("read pods: %w", err)
			}
			p.Mode = tandem.Mode(mode)
			pods = append(pods, p)
		}
		return rows.Err()
	})
	return pods, version, err
}

// Version returns the control version.
func (s *Store) Version(ctx context.Context) (int64, error) {
	if err := s.ready(); err != nil {
		return 0, err
	}
	var v int64
	if err := s.db.QueryRowContext(ctx, ctlVersionSQL).Scan(&v); err != nil {
		return 0, translate(fmt.Errorf("read control version: %w", err))
	}
	return v, nil
}

// SetMode moves pod from mode from to mode to, clears its resynced flag,
// appends e to the audit log and bumps the version, in one transaction.
// Returns ECONFLICT when pod is no longer in from, EUNKNOWNPOD when it is
// not stored.
func (s *Store) SetMode(ctx context.Context, pod string, from, to tandem.Mode, e tandem.AuditLogEntry) (int64, error) {
	var version int64
	err := s.withTx(ctx, func(tx *sql.Tx) error {
		var cur string
		err := tx.QueryRowContext(ctx, ctlLockPodSQL, pod).Scan(&cur)
		if err == sql.ErrNoRows {
			return tandem.Errorf(tandem.EUNKNOWNPOD, "pod %q is not in the control database", pod)
		} else if err != nil {
			return fmt.Errorf("lock pod %s: %w", pod, err)
		}
		if tandem.Mode(cur) != from {
			return tandem.Errorf(tandem.ECONFLICT, "pod %s is in %s now, not %s: it changed meanwhile", pod, cur, from)
		}
		if _, err := tx.ExecContext(ctx, ctlSetModeSQL, string(to), e.At.UTC(), pod); err != nil {
			return fmt.Errorf("set mode of %s: %w", pod, err)
		}
		if version, err = appendAuditBump(ctx, tx, e); err != nil {
			return err
		}
		return nil
	})
	return version, err
}

// appendAuditBump appends e and bumps the control version, in tx, and
// returns the new version.
func appendAuditBump(ctx context.Context, tx *sql.Tx, e tandem.AuditLogEntry) (int64, error) {
	if _, err := tx.ExecContext(ctx, ctlAppendAuditSQL, e.At.UTC(), clip(e.Actor, 128), clip(e.Action, 64),
		clip(e.Pod, 64), clip(e.Reason, 1000), clip(e.Before, 255), clip(e.After, 255)); err != nil {
		return 0, fmt.Errorf("append audit log: %w", err)
	}
	if _, err := tx.ExecContext(ctx, ctlBumpSQL); err != nil {
		return 0, fmt.Errorf("bump control version: %w", err)
	}
	var v int64
	if err := tx.QueryRowContext(ctx, ctlVersionSQL).Scan(&v); err != nil {
		return 0, fmt.Errorf("read control version: %w", err)
	}
	return v, nil
}

// clip cuts s to at most n characters, the width of its column.
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n])
}

// MarkResynced sets pod's resynced flag and appends e, in one transaction.
func (s *Store) MarkResynced(ctx context.Context, pod string, e tandem.AuditLogEntry) error {
	return s.withTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, ctlSetResyncedSQL, pod)
		if err != nil {
			return fmt.Errorf("mark %s resynced: %w", pod, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			var one int
			if err := tx.QueryRowContext(ctx, ctlResyncedSQL, pod).Scan(&one); err == sql.ErrNoRows {
				return tandem.Errorf(tandem.EUNKNOWNPOD, "pod %q is not in the control database", pod)
			}
		}
		_, err = appendAuditBump(ctx, tx, e)
		return err
	})
}

// Resynced returns pod's resynced flag (false for a pod not stored).
func (s *Store) Resynced(ctx context.Context, pod string) (bool, error) {
	if err := s.ready(); err != nil {
		return false, err
	}
	var ok bool
	err := s.db.QueryRowContext(ctx, ctlResyncedSQL, pod).Scan(&ok)
	if err == sql.ErrNoRows {
		return false, nil
	} else if err != nil {
		return false, translate(fmt.Errorf("read resynced flag: %w", err))
	}
	return ok, nil
}

// AppendAudit appends e to the audit log and bumps the version.
func (s *Store) AppendAudit(ctx context.Context, e tandem.AuditLogEntry) error {
	return s.withTx(ctx, func(tx *sql.Tx) error {
		_, err := appendAuditBump(ctx, tx, e)
		return err
	})
}

// AuditLog returns the last limit entries, newest first.
func (s *Store) AuditLog(ctx context.Context, limit int) ([]tandem.AuditLogEntry, error) {
	if err := s.ready(); err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, ctlAuditLogSQL, limit)
	if err != nil {
		return nil, translate(fmt.Errorf("read audit log: %w", err))
	}
	defer rows.Close()
	out := []tandem.AuditLogEntry{}
	for rows.Next() {
		var e tandem.AuditLogEntry
		if err := rows.Scan(&e.At, &e.Actor, &e.Action, &e.Pod, &e.Reason, &e.Before, &e.After); err != nil {
			return nil, translate(fmt.Errorf("read audit log: %w", err))
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, translate(fmt.Errorf("read audit log: %w", err))
	}
	return out, nil
}

// RegisterInstance records a starting instance (or restarts its record)
// and forgets instances not seen for Config.InstanceRetention.
func (s *Store) RegisterInstance(ctx context.Context, in tandem.Instance) error {
	if err := s.ready(); err != nil {
		return err
	}
	if _, err := s.db.ExecContext(ctx, ctlPruneInstancesSQL, in.StartedAt.UTC().Add(-s.cfg.InstanceRetention)); err != nil {
		return translate(fmt.Errorf("prune instances: %w", err))
	}
	if _, err := s.db.ExecContext(ctx, ctlRegisterSQL, clip(in.ID, 128), clip(in.Addr, 255),
		in.StartedAt.UTC(), in.LastSeen.UTC(), in.ControlVersion); err != nil {
		return translate(fmt.Errorf("register instance: %w", err))
	}
	return nil
}

// Heartbeat records that instance id is alive at at and has applied version.
func (s *Store) Heartbeat(ctx context.Context, id string, at time.Time, version int64) error {
	if err := s.ready(); err != nil {
		return err
	}
	if _, err := s.db.ExecContext(ctx, ctlHeartbeatSQL, clip(id, 128), at.UTC(), at.UTC(), version); err != nil {
		return translate(fmt.Errorf("heartbeat: %w", err))
	}
	return nil
}

// Instances returns every recorded instance, oldest start first; Stale is
// left for the caller, which knows the time.
func (s *Store) Instances(ctx context.Context) ([]tandem.Instance, error) {
	if err := s.ready(); err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, ctlInstancesSQL)
	if err != nil {
		return nil, translate(fmt.Errorf("list instances: %w", err))
	}
	defer rows.Close()
	out := []tandem.Instance{}
	for rows.Next() {
		var in tandem.Instance
		if err := rows.Scan(&in.ID, &in.Addr, &in.StartedAt, &in.LastSeen, &in.ControlVersion); err != nil {
			return nil, translate(fmt.Errorf("list instances: %w", err))
		}
		out = append(out, in)
	}
	if err := rows.Err(); err != nil {
		return nil, translate(fmt.Errorf("list instances: %w", err))
	}
	return out, nil
}

// AppendDivergences persists a batch of divergences in one statement and
// deletes the oldest beyond Config.MaxDivergences.
func (s *Store) AppendDivergences(ctx context.Context, ds []tandem.Divergence) error {
	if len(ds) == 0 {
		return nil
	}
	if err := s.ready(); err != nil {
		return err
	}
	var q strings.Builder
	q.WriteString(ctlAppendDivergenceSQL)
	args := make([]any, 0, len(ds)*10)
	for i, d := range ds {
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteString(ctlDivergenceRow)
		primary, err := json.Marshal(d.Primary)
		if err != nil {
			return fmt.Errorf("encode primary outcome: %w", err)
		}
		shadow, err := json.Marshal(d.Shadow)
		if err != nil {
			return fmt.Errorf("encode shadow outcome: %w", err)
		}
		var position any
		if d.Position != nil {
			b, err := json.Marshal(d.Position)
			if err != nil {
				return fmt.Errorf("encode drifted position: %w", err)
			}
			position = string(b)
		}
		args = append(args, d.At.UTC(), clip(d.Pod, 64), clip(string(d.Op), 32), clip(string(d.Kind), 32), clip(d.CartToken, 128),
			d.ShopID, clip(d.SourceOfTruth, 16), string(primary), string(shadow), position)
	}
	if _, err := s.db.ExecContext(ctx, q.String(), args...); err != nil {
		return translate(fmt.Errorf("append divergences: %w", err))
	}
	var maxID int64
	if err := s.db.QueryRowContext(ctx, ctlMaxDivergenceIDSQL).Scan(&maxID); err != nil {
		return translate(fmt.Errorf("bound divergences: %w", err))
	}
	if cut := maxID - s.cfg.MaxDivergences; cut > 0 {
		if _, err := s.db.ExecContext(ctx, ctlPruneDivergencesSQL, cut); err != nil {
			return translate(fmt.Errorf("bound divergences: %w", err))
		}
	}
	return nil
}

// Divergences returns persisted divergences matching f, newest first; a
// Limit of 0 means 100.
func (s *Store) Divergences(ctx context.Context, f tandem.DivergenceFilter) ([]tandem.Divergence, error) {
	if err := s.ready(); err != nil {
		return nil, err
	}
	q := ctlDivergencesSQL
	var args []any
	if f.Pod != "" {
		q += ctlDivergencesPodSQL
		args = append(args, f.Pod)
	}
	if f.Kind != "" {
		q += ctlDivergencesKindSQL
		args = append(args, f.Kind)
	}
	if !f.Since.IsZero() {
		q += ctlDivergencesSinceSQL
		args = append(args, f.Since.UTC())
	}
	if f.Limit <= 0 {
		f.Limit = 100
	}
	args = append(args, f.Limit)
	rows, err := s.db.QueryContext(ctx, q+ctlDivergencesTail, args...)
	if err != nil {
		return nil, translate(fmt.Errorf("list divergences: %w", err))
	}
	defer rows.Close()
	out := []tandem.Divergence{}
	for rows.Next() {
		var d tandem.Divergence
		var primary, shadow string
		var position sql.NullString
		if err := rows.Scan(&d.ID, &d.At, &d.Pod, &d.Op, &d.Kind, &d.CartToken, &d.ShopID, &d.SourceOfTruth, &primary, &shadow, &position); err != nil {
			return nil, translate(fmt.Errorf("list divergences: %w", err))
		}
		if position.Valid {
			d.Position = new(tandem.Drift)
			if err := json.Unmarshal([]byte(position.String), d.Position); err != nil {
				return nil, fmt.Errorf("decode drifted position of divergence %d: %w", d.ID, err)
			}
		}
		if err := json.Unmarshal([]byte(primary), &d.Primary); err != nil {
			return nil, fmt.Errorf("decode primary outcome of divergence %d: %w", d.ID, err)
		}
		if err := json.Unmarshal([]byte(shadow), &d.Shadow); err != nil {
			return nil, fmt.Errorf("decode shadow outcome of divergence %d: %w", d.ID, err)
		}
		d.Primary.Latency = time.Duration(d.Primary.LatencyMS * float64(time.Millisecond))
		d.Shadow.Latency = time.Duration(d.Shadow.LatencyMS * float64(time.Millisecond))
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, translate(fmt.Errorf("list divergences: %w", err))
	}
	return out, nil
}
