package controldb

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/tandemhq/tandem"
)

// Statements of the pods' manual throttles (table pod_throttles).
const (
	thLoadSQL = "/* conn_tag='control' */ SELECT pod, throttled, since, actor, reason FROM pod_throttles WHERE throttled = 1 ORDER BY pod"
	thSetSQL  = "/* conn_tag='control' */ INSERT INTO pod_throttles (pod, throttled, since, actor, reason) VALUES (?, ?, ?, ?, ?) " +
		"ON DUPLICATE KEY UPDATE throttled = VALUES(throttled), since = VALUES(since), actor = VALUES(actor), reason = VALUES(reason)"
)

// SetThrottle records pod's manual throttle m, appends e to the audit log
// and bumps the control version (every instance applies it within its
// poll), in one transaction, and returns the new version. Returns
// EUNAVAILABLE.
func (s *Store) SetThrottle(ctx context.Context, pod string, m tandem.ManualThrottle, e tandem.AuditLogEntry) (int64, error) {
	var version int64
	err := s.withTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, thSetSQL, pod, m.On, m.Since.UTC(), clip(m.Actor, 128), clip(m.Reason, 1000)); err != nil {
			return fmt.Errorf("set throttle of %s: %w", pod, err)
		}
		var err error
		version, err = appendAuditBump(ctx, tx, e)
		return err
	})
	return version, err
}

// Throttles returns the manual throttles that are on, by pod. Returns
// EUNAVAILABLE.
func (s *Store) Throttles(ctx context.Context) (map[string]tandem.ManualThrottle, error) {
	if err := s.ready(); err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, thLoadSQL)
	if err != nil {
		return nil, translate(fmt.Errorf("load throttles: %w", err))
	}
	defer rows.Close()
	out := map[string]tandem.ManualThrottle{}
	for rows.Next() {
		var pod string
		var m tandem.ManualThrottle
		if err := rows.Scan(&pod, &m.On, &m.Since, &m.Actor, &m.Reason); err != nil {
			return nil, translate(fmt.Errorf("load throttles: %w", err))
		}
		m.Since = m.Since.UTC()
		out[pod] = m
	}
	if err := rows.Err(); err != nil {
		return nil, translate(fmt.Errorf("load throttles: %w", err))
	}
	return out, nil
}
