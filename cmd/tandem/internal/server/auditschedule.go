package server

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/zap"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/dualwrite"
	"github.com/tandemhq/tandem/rollout"
)

// The scheduled audit runs once per interval across the fleet, not once per
// instance: the instance that holds a MySQL named lock in the control
// database (GET_LOCK, on a connection it keeps) runs it for every pod and
// writes each result to the audit log; the other instances read the
// latest results from the audit log, so that the promotion gate of every
// instance sees the fleet's last audit. When the leader stops or loses its
// connection, MySQL frees the lock and another instance takes it at its
// next tick.
const (
	// auditLeaderSQL takes the lock without waiting: 1 taken, 0 held by
	// another session.
	auditLeaderSQL = "/* conn_tag='control' */ SELECT GET_LOCK(?, 0)"
	// auditStillLeaderSQL checks that this session still holds the lock.
	auditStillLeaderSQL = "/* conn_tag='control' */ SELECT COALESCE(IS_USED_LOCK(?) = CONNECTION_ID(), 0)"
	auditReleaseSQL     = "/* conn_tag='control' */ SELECT RELEASE_LOCK(?)"

	// ActorScheduler is the audit log's actor of the scheduled audit.
	ActorScheduler = "scheduler"
	// auditLogScan is how many of the newest audit-log entries a follower
	// reads for the leader's results.
	auditLogScan = 200
)

// auditLeader is one instance's claim on the scheduled audit.
type auditLeader struct {
	db   *sql.DB
	name string

	mu   sync.Mutex
	conn *sql.Conn // held while this instance leads
}

// newAuditLeader opens a small pool of its own on the control database:
// the lock lives as long as the connection that took it.
func newAuditLeader(dsn string) (*auditLeader, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("audit schedule: parse control DSN: %w", err)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 2 * time.Second
	}
	if cfg.ReadTimeout == 0 {
		cfg.ReadTimeout = 5 * time.Second
	}
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return nil, fmt.Errorf("audit schedule: %w", err)
	}
	db.SetMaxOpenConns(2)
	// Named locks are server-wide: the control database's name keeps fleets
	// that share a server apart. MySQL takes at most 64 characters.
	name := "tandem.audit." + cfg.DBName
	if len(name) > 64 {
		name = name[:64]
	}
	return &auditLeader{db: db, name: name}, nil
}

// lead reports whether this instance runs the scheduled audit now, taking
// the lock when it is free.
func (l *auditLeader) lead(ctx context.Context) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn != nil {
		var mine int64
		err := l.conn.QueryRowContext(ctx, auditStillLeaderSQL, l.name).Scan(&mine)
		if err == nil && mine == 1 {
			return true, nil
		}
		// The connection broke (and the lock with it) or was taken over.
		l.conn.Close()
		l.conn = nil
	}
	conn, err := l.db.Conn(ctx)
	if err != nil {
		return false, err
	}
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, auditLeaderSQL, l.name).Scan(&got); err != nil {
		conn.Close()
		return false, err
	}
	if got.Int64 != 1 {
		conn.Close()
		return false, nil
	}
	l.conn = conn
	return true, nil
}

// Close gives the lock up at once (closing the connection would too) and
// closes the pool.
func (l *auditLeader) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, _ = l.conn.ExecContext(ctx, auditReleaseSQL, l.name)
		cancel()
		l.conn.Close()
		l.conn = nil
	}
	return l.db.Close()
}

// startAuditSchedule runs the scheduled audit loop (Config.Rollout.AuditInterval).
func (m *Main) startAuditSchedule() error {
	l, err := newAuditLeader(m.Config.Control.MySQLDSN)
	if err != nil {
		return err
	}
	m.closers = append(m.closers, l.Close)
	m.goLoop(m.Config.Rollout.AuditInterval, func(ctx context.Context) { m.scheduledAudits(ctx, l) })
	return nil
}

// scheduledAudits audits every pod when this instance leads, else learns
// the leader's latest results.
func (m *Main) scheduledAudits(ctx context.Context, l *auditLeader) {
	leader, err := l.lead(ctx)
	if err != nil {
		m.Logger.Warn("scheduled audit: cannot tell the leader (control database)", zap.Error(err))
		return
	}
	if !leader {
		m.followAudits(ctx)
		return
	}
	for _, p := range m.pods {
		actx, cancel := scheduledAuditContext(m.ctx)
		m.scheduledAudit(actx, p)
		cancel()
	}
}

// scheduledAuditTimeout bounds one pod's scheduled audit.
const scheduledAuditTimeout = 2 * time.Minute

// scheduledAuditContext is the context of one pod's scheduled audit: nobody
// waits for its answer, so its sweep reads the stores paced, as the
// periodic sweep does (dualwrite.DefaultSweepDuty), under a bound of its
// own rather than the schedule's 30 s for every pod.
func scheduledAuditContext(parent context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(tandem.WithPace(parent, dualwrite.DefaultSweepDuty), scheduledAuditTimeout)
}

func (m *Main) scheduledAudit(ctx context.Context, p *podRuntime) {
	a, err := m.ctl.Audit(ctx, p.cfg.Name, tandem.Change{Actor: ActorScheduler, Reason: "scheduled audit by " + m.InstanceID})
	if err != nil {
		m.Logger.Warn("scheduled audit", zap.String("pod", p.cfg.Name), zap.Error(err))
		return
	}
	if !a.Clean {
		m.Logger.Warn("drift audit found drift", zap.String("pod", p.cfg.Name), zap.Int("drifted", len(a.Drifted)))
	}
}

// followAudits records the newest audit of each pod found in the audit log
// as this instance's last audit (its verdict only: the leader counted the
// drifted positions).
func (m *Main) followAudits(ctx context.Context) {
	entries, err := m.control.AuditLog(ctx, auditLogScan)
	if err != nil {
		m.Logger.Warn("scheduled audit: read the leader's results", zap.Error(err))
		return
	}
	seen := map[string]bool{}
	for _, e := range entries { // newest first
		if e.Action != rollout.ActionAudit || seen[e.Pod] {
			continue
		}
		seen[e.Pod] = true
		m.cmp.RecordAudit(tandem.Audit{Pod: e.Pod, At: e.At, Clean: e.After == "clean"})
	}
}
