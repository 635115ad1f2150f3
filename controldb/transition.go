package controldb

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/tandemhq/tandem"
)

// Statements of the background transitions (conn_tag 'control').
const (
	ctlBeginTransitionSQL = "/* conn_tag='control' */ INSERT INTO transitions (pod, to_mode, owner, actor, reason, started_at) VALUES (?, ?, ?, ?, ?, ?) " +
		"ON DUPLICATE KEY UPDATE to_mode = VALUES(to_mode), owner = VALUES(owner), actor = VALUES(actor), reason = VALUES(reason), started_at = VALUES(started_at), copied = 0, total = 0, checkpoint = 0, checkpoint_copied = 0"
	ctlClaimTransitionSQL = "/* conn_tag='control' */ UPDATE transitions SET owner = ? WHERE pod = ? AND owner = ?"
	ctlTransitionsSQL     = "/* conn_tag='control' */ SELECT pod, to_mode, owner, actor, reason, started_at, copied, total, checkpoint, checkpoint_copied FROM transitions ORDER BY pod"
	ctlProgressSQL        = "/* conn_tag='control' */ UPDATE transitions SET copied = ?, total = ? WHERE pod = ? AND owner = ?"
	ctlCheckpointSQL      = "/* conn_tag='control' */ UPDATE transitions SET checkpoint = ?, checkpoint_copied = ?, copied = GREATEST(copied, ?) WHERE pod = ? AND owner = ? AND checkpoint <= ?"
	ctlEndTransitionSQL   = "/* conn_tag='control' */ DELETE FROM transitions WHERE pod = ?"
	ctlLockTransitionSQL  = "/* conn_tag='control' */ SELECT owner FROM transitions WHERE pod = ? FOR UPDATE"
)

// BeginTransition records that t runs (replacing an older record of the
// pod's).
func (s *Store) BeginTransition(ctx context.Context, t tandem.PendingTransition) error {
	if err := s.ready(); err != nil {
		return err
	}
	if _, err := s.db.ExecContext(ctx, ctlBeginTransitionSQL, clip(t.Pod, 64), string(t.To), clip(t.Owner, 128),
		clip(t.Actor, 128), clip(t.Reason, 1000), t.StartedAt.UTC()); err != nil {
		return translate(fmt.Errorf("begin transition of %s: %w", t.Pod, err))
	}
	return nil
}

// ClaimTransition hands pod's transition from instance from to instance
// to, and reports whether it was still from's.
func (s *Store) ClaimTransition(ctx context.Context, pod, from, to string) (bool, error) {
	if err := s.ready(); err != nil {
		return false, err
	}
	res, err := s.db.ExecContext(ctx, ctlClaimTransitionSQL, clip(to, 128), pod, from)
	if err != nil {
		return false, translate(fmt.Errorf("claim transition of %s: %w", pod, err))
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// PendingTransitions returns every recorded transition, by pod.
func (s *Store) PendingTransitions(ctx context.Context) ([]tandem.PendingTransition, error) {
	if err := s.ready(); err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, ctlTransitionsSQL)
	if err != nil {
		return nil, translate(fmt.Errorf("list transitions: %w", err))
	}
	defer rows.Close()
	var out []tandem.PendingTransition
	for rows.Next() {
		var t tandem.PendingTransition
		var to string
		if err := rows.Scan(&t.Pod, &to, &t.Owner, &t.Actor, &t.Reason, &t.StartedAt, &t.Copied, &t.Total, &t.Checkpoint.Shop, &t.Checkpoint.Copied); err != nil {
			return nil, translate(fmt.Errorf("scan transition: %w", err))
		}
		t.To = tandem.Mode(to)
		out = append(out, t)
	}
	return out, translate(rows.Err())
}

// TransitionProgress records how far owner's copy for pod is.
func (s *Store) TransitionProgress(ctx context.Context, pod, owner string, copied, total int) error {
	if err := s.ready(); err != nil {
		return err
	}
	if _, err := s.db.ExecContext(ctx, ctlProgressSQL, copied, total, pod, owner); err != nil {
		return translate(fmt.Errorf("transition progress of %s: %w", pod, err))
	}
	return nil
}

// TransitionCheckpoint records that owner's copy for pod has committed up
// to at (a checkpoint never goes back): a copy started again resumes
// after it.
func (s *Store) TransitionCheckpoint(ctx context.Context, pod, owner string, at tandem.BackfillCheckpoint) error {
	if err := s.ready(); err != nil {
		return err
	}
	if _, err := s.db.ExecContext(ctx, ctlCheckpointSQL, at.Shop, at.Copied, at.Copied, pod, owner, at.Shop); err != nil {
		return translate(fmt.Errorf("transition checkpoint of %s: %w", pod, err))
	}
	return nil
}

// EndTransition forgets pod's transition and reports whether there was one.
func (s *Store) EndTransition(ctx context.Context, pod string) (bool, error) {
	if err := s.ready(); err != nil {
		return false, err
	}
	res, err := s.db.ExecContext(ctx, ctlEndTransitionSQL, pod)
	if err != nil {
		return false, translate(fmt.Errorf("end transition of %s: %w", pod, err))
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// FinishTransition applies pod's recorded transition: it forgets it and
// moves the pod from from to to with audit entry e, in one transaction.
// Returns ECONFLICT when the transition is no longer recorded (cancelled
// meanwhile) or the pod is no longer in from, EUNKNOWNPOD.
func (s *Store) FinishTransition(ctx context.Context, pod string, from, to tandem.Mode, e tandem.AuditLogEntry) (int64, error) {
	var version int64
	err := s.withTx(ctx, func(tx *sql.Tx) error {
		var owner string
		err := tx.QueryRowContext(ctx, ctlLockTransitionSQL, pod).Scan(&owner)
		if err == sql.ErrNoRows {
			return tandem.Errorf(tandem.ECONFLICT, "the transition of pod %s was cancelled", pod)
		} else if err != nil {
			return fmt.Errorf("lock transition of %s: %w", pod, err)
		}
		if _, err := tx.ExecContext(ctx, ctlEndTransitionSQL, pod); err != nil {
			return fmt.Errorf("end transition of %s: %w", pod, err)
		}
		var cur string
		err = tx.QueryRowContext(ctx, ctlLockPodSQL, pod).Scan(&cur)
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
		version, err = appendAuditBump(ctx, tx, e)
		return err
	})
	return version, err
}
