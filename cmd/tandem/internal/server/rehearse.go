package server

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/capture"
	"github.com/tandemhq/tandem/internal/replay"
	"github.com/tandemhq/tandem/rollout"
)

// rehearser is the rollout plan's Rehearser: it replays a pod's captures
// of this instance (the capture recorder) on a scratch database through
// the MySQL engine with the pod's settings (internal/replay), as `tandem
// replay` does.
type rehearser struct{ m *Main }

var _ rollout.Rehearser = rehearser{}

// LatestCapture returns pod's newest capture of this instance that ended
// with its file complete.
func (r rehearser) LatestCapture(pod string) (string, bool) {
	cs, err := r.m.captures.Captures(context.Background())
	if err != nil {
		return "", false
	}
	for _, c := range cs { // newest first
		if c.Pod == pod && c.State == tandem.CaptureDone {
			return c.ID, true
		}
	}
	return "", false
}

// Rehearse replays capture id at speed on a scratch database created on
// rollout.plan.rehearsal.server (default: the pod's own MySQL server) and
// dropped after.
func (r rehearser) Rehearse(ctx context.Context, id string, speed float64) (rollout.RehearsalResult, error) {
	rc, info, err := r.m.captures.OpenCapture(ctx, id)
	if err != nil {
		return rollout.RehearsalResult{}, err
	}
	f, err := capture.ReadFile(rc)
	rc.Close()
	if err != nil {
		return rollout.RehearsalResult{}, fmt.Errorf("capture %s: %w", id, err)
	}
	var pc PodConfig
	for _, p := range r.m.Config.Pods {
		if p.Name == info.Pod {
			pc = p
		}
	}
	server := r.m.Config.Rollout.Plan.Rehearsal.Server
	if server == "" {
		server = pc.MySQLDSN
	}
	h := &replay.Rehearsal{File: f, ServerDSN: server, PoolCap: r.m.Config.Reservation.PoolCap,
		MaxOpenConns: pc.MySQLMaxOpenConns, MaxInflight: pc.MySQLMaxInflight}
	r.m.Logger.Info("rehearsal started", zap.String("pod", info.Pod), zap.String("capture", id),
		zap.Int64("ops", info.Ops), zap.Float64("speed", speed))
	res, err := h.Run(ctx, speed)
	if err != nil {
		r.m.Logger.Warn("rehearsal could not run", zap.String("pod", info.Pod), zap.String("capture", id), zap.Error(err))
		return rollout.RehearsalResult{}, err
	}
	out := rollout.RehearsalResult{Ops: res.Ops, Errors: res.Errors + res.Cancelled, Violations: len(res.Violations),
		GrantedThenRefused: res.Diff.GrantedThenRefused, RefusedThenGranted: res.Diff.RefusedThenGranted}
	for _, s := range res.PerOp {
		out.P99 = max(out.P99, time.Duration(s.P99MS*float64(time.Millisecond)))
	}
	r.m.Logger.Info("rehearsal ended", zap.String("pod", info.Pod), zap.String("capture", id), zap.Float64("speed", speed),
		zap.Int("ops", out.Ops), zap.Duration("p99", out.P99), zap.Int("errors", out.Errors), zap.Int("violations", out.Violations),
		zap.Int("granted_then_refused", out.GrantedThenRefused), zap.Int("refused_then_granted", out.RefusedThenGranted))
	return out, nil
}
