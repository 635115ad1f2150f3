package controldb

import (
	"context"
	"fmt"
	"time"

	"github.com/tandemhq/tandem"
)

// Statements of the rollout plan (conn_tag 'control').
const (
	ctlLoadPlanSQL  = "/* conn_tag='control' */ SELECT doc, version, driver, lease_until FROM rollout_plan WHERE id = 1"
	ctlSavePlanSQL  = "/* conn_tag='control' */ UPDATE rollout_plan SET doc = ?, version = version + 1 WHERE id = 1 AND version = ?"
	ctlLeasePlanSQL = "/* conn_tag='control' */ UPDATE rollout_plan SET driver = ?, lease_until = ? WHERE id = 1 AND (driver = ? OR lease_until < ?)"
)

// LoadPlan returns the rollout plan's record.
func (s *Store) LoadPlan(ctx context.Context) (tandem.PlanRecord, error) {
	var r tandem.PlanRecord
	if err := s.ready(); err != nil {
		return r, err
	}
	var doc string
	if err := s.db.QueryRowContext(ctx, ctlLoadPlanSQL).Scan(&doc, &r.Version, &r.Driver, &r.LeaseUntil); err != nil {
		return r, translate(fmt.Errorf("load plan: %w", err))
	}
	r.Doc = []byte(doc)
	return r, nil
}

// SavePlan writes the plan's document if its version is still version and
// returns the new one. Returns ECONFLICT when another write came first.
func (s *Store) SavePlan(ctx context.Context, doc []byte, version int64) (int64, error) {
	if err := s.ready(); err != nil {
		return 0, err
	}
	res, err := s.db.ExecContext(ctx, ctlSavePlanSQL, string(doc), version)
	if err != nil {
		return 0, translate(fmt.Errorf("save plan: %w", err))
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return 0, tandem.Errorf(tandem.ECONFLICT, "the rollout plan changed meanwhile")
	}
	return version + 1, nil
}

// LeasePlan makes instance id the plan's driver until until, if it
// already is or the lease ran out before now, and reports whether it is.
func (s *Store) LeasePlan(ctx context.Context, id string, now, until time.Time) (bool, error) {
	if err := s.ready(); err != nil {
		return false, err
	}
	res, err := s.db.ExecContext(ctx, ctlLeasePlanSQL, clip(id, 128), until.UTC(), id, now.UTC())
	if err != nil {
		return false, translate(fmt.Errorf("lease plan: %w", err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, translate(err)
	}
	if n == 1 {
		return true, nil
	}
	// Renewing within the same microsecond changes no row; check.
	r, err := s.LoadPlan(ctx)
	return err == nil && r.Driver == id && !r.LeaseUntil.Before(until), err
}
