package controldb

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/tandemhq/tandem"
)

// Statements of the kill switch's durable copy, in the control database.
const (
	ksLoadSQL   = "/* conn_tag='control' */ SELECT pod, engaged, engaged_at, actor, reason, cleared_at FROM killswitch ORDER BY pod"
	ksLockSQL   = "/* conn_tag='control' */ SELECT engaged, cleared_at FROM killswitch WHERE pod = ? FOR UPDATE"
	ksEngageSQL = "/* conn_tag='control' */ INSERT INTO killswitch (pod, engaged, engaged_at, actor, reason, cleared_at) VALUES (?, 1, ?, ?, ?, NULL) " +
		"ON DUPLICATE KEY UPDATE engaged = 1, engaged_at = VALUES(engaged_at), actor = VALUES(actor), reason = VALUES(reason)"
	ksDisengageSQL = "/* conn_tag='control' */ INSERT INTO killswitch (pod, engaged, engaged_at, cleared_at) VALUES (?, 0, ?, ?) " +
		"ON DUPLICATE KEY UPDATE engaged = 0, cleared_at = VALUES(cleared_at)"
)

// KillSwitchRecord is the kill switch's copy in the control database
// (table killswitch); it implements killswitch.Record. The control Redis
// holds the other copy; together they survive the loss of either.
type KillSwitchRecord struct {
	s *Store
}

// KillSwitch returns the store's kill-switch record.
func (s *Store) KillSwitch() *KillSwitchRecord { return &KillSwitchRecord{s: s} }

// Engage marks each entry's pod engaged, keeping the entry of a pod that
// already is. Returns EUNAVAILABLE.
func (k *KillSwitchRecord) Engage(ctx context.Context, entries []tandem.AuditLogEntry) error {
	return k.write(ctx, entries, false)
}

// Restore writes back entries this copy lacks (engaged while the control
// database was down): a pod already engaged, or cleared at or after the
// entry's engagement, is left as it is. Returns EUNAVAILABLE.
func (k *KillSwitchRecord) Restore(ctx context.Context, entries []tandem.AuditLogEntry) error {
	return k.write(ctx, entries, true)
}

func (k *KillSwitchRecord) write(ctx context.Context, entries []tandem.AuditLogEntry, unlessCleared bool) error {
	if len(entries) == 0 {
		return nil
	}
	return k.s.withTx(ctx, func(tx *sql.Tx) error {
		for _, e := range entries {
			var engaged bool
			var cleared sql.NullTime
			err := tx.QueryRowContext(ctx, ksLockSQL, e.Pod).Scan(&engaged, &cleared)
			switch {
			case err == sql.ErrNoRows:
			case err != nil:
				return fmt.Errorf("read kill switch of %s: %w", e.Pod, err)
			case engaged:
				continue // keeps its first engagement
			case unlessCleared && cleared.Valid && !cleared.Time.Before(e.At.UTC().Truncate(time.Microsecond)):
				continue // disengaged after this engagement
			}
			if _, err := tx.ExecContext(ctx, ksEngageSQL, clip(e.Pod, 64), e.At.UTC(), clip(e.Actor, 128), clip(e.Reason, 1000)); err != nil {
				return fmt.Errorf("engage kill switch of %s: %w", e.Pod, err)
			}
		}
		return nil
	})
}

// Disengage clears the pods and marks them cleared at at. Returns
// EUNAVAILABLE.
func (k *KillSwitchRecord) Disengage(ctx context.Context, pods []string, at time.Time) error {
	if len(pods) == 0 {
		return nil
	}
	return k.s.withTx(ctx, func(tx *sql.Tx) error {
		for _, p := range pods {
			if _, err := tx.ExecContext(ctx, ksDisengageSQL, clip(p, 64), at.UTC(), at.UTC()); err != nil {
				return fmt.Errorf("disengage kill switch of %s: %w", p, err)
			}
		}
		return nil
	})
}

// Load returns the engaged pods and when each pod was last cleared.
// Returns EUNAVAILABLE.
func (k *KillSwitchRecord) Load(ctx context.Context) ([]tandem.AuditLogEntry, map[string]time.Time, error) {
	if err := k.s.ready(); err != nil {
		return nil, nil, err
	}
	rows, err := k.s.db.QueryContext(ctx, ksLoadSQL)
	if err != nil {
		return nil, nil, translate(fmt.Errorf("read kill switch: %w", err))
	}
	defer rows.Close()
	var engaged []tandem.AuditLogEntry
	cleared := map[string]time.Time{}
	for rows.Next() {
		var e tandem.AuditLogEntry
		var on bool
		var c sql.NullTime
		if err := rows.Scan(&e.Pod, &on, &e.At, &e.Actor, &e.Reason, &c); err != nil {
			return nil, nil, translate(fmt.Errorf("read kill switch: %w", err))
		}
		if c.Valid {
			cleared[e.Pod] = c.Time.UTC()
		}
		if on {
			e.Action, e.After = "killswitch_engage", "engaged"
			engaged = append(engaged, e)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, translate(fmt.Errorf("read kill switch: %w", err))
	}
	return engaged, cleared, nil
}
