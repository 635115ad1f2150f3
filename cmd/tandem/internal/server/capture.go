package server

import (
	"context"
	"fmt"
	"os"

	"go.uber.org/zap"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/capture"
)

// openCaptures makes the recorder of the pods' traffic, the routers' Tap:
// its files live in a directory of this instance, removed at shutdown.
func (m *Main) openCaptures() error {
	dir, err := os.MkdirTemp("", "tandem-captures-")
	if err != nil {
		return fmt.Errorf("capture directory: %w", err)
	}
	m.closers = append(m.closers, func() error { return os.RemoveAll(dir) })
	pods := make(map[string]capture.Snapshot, len(m.pods))
	for _, p := range m.pods {
		pods[p.cfg.Name] = p.captureStart
	}
	m.captures = capture.NewRecorder(dir, pods)
	m.captures.AuditLog = m.control
	m.captures.OnError = func(err error) { m.Logger.Warn("capture", zap.Error(err)) }
	m.closers = append(m.closers, m.captures.Close)
	for _, p := range m.pods {
		p.router.Tap = m.captures
	}
	return nil
}

// captureStart reads the pod's state at the start of a capture: the
// ledger's positions and the source of truth's active holds.
func (p *podRuntime) captureStart(ctx context.Context) (string, []capture.Position, []capture.Hold, error) {
	sot := p.router.Mode().SourceOfTruth()
	var store tandem.Resyncer = p.redis
	if sot == tandem.StoreMySQL {
		store = p.mysql
	}
	onHand, err := p.mysql.Ledger().ListOnHand(ctx)
	if err != nil {
		return "", nil, nil, fmt.Errorf("read the ledger: %w", err)
	}
	holds, err := store.ActiveHolds(ctx)
	if err != nil {
		return "", nil, nil, fmt.Errorf("read the active holds of %s: %w", sot, err)
	}
	positions := make([]capture.Position, 0, len(onHand))
	for k, n := range onHand {
		positions = append(positions, capture.Position{Key: k, OnHand: n})
	}
	out := make([]capture.Hold, 0, len(holds))
	for _, h := range holds {
		out = append(out, capture.Hold{ShopID: h.ShopID, CartToken: h.CartToken, ExpiresAt: h.ExpiresAt, Lines: h.Lines})
	}
	return sot, positions, out, nil
}
