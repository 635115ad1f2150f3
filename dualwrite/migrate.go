package dualwrite

import (
	"context"
	"time"
)

// What the backfill and the rebuild of a Redis share: the pause of the
// shadow work of the shops they rewrite.

// pauseShops makes the shadow work of shops wait (waitShop) until the
// returned func is called.
func (r *Router) pauseShops(shops []int64) (resume func()) {
	done := make(chan struct{})
	r.pausing.Add(1)
	r.mu.Lock()
	if r.paused == nil {
		r.paused = map[int64]chan struct{}{}
	}
	for _, sh := range shops {
		r.paused[sh] = done
	}
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		for _, sh := range shops {
			if r.paused[sh] == done {
				delete(r.paused, sh)
			}
		}
		r.mu.Unlock()
		close(done)
		r.pausing.Add(-1)
	}
}

// waitShop returns when the shop's shadow work may run.
func (r *Router) waitShop(ctx context.Context, shop int64) {
	for r.pausing.Load() > 0 {
		r.mu.Lock()
		ch := r.paused[shop]
		r.mu.Unlock()
		if ch == nil {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return
		}
	}
}

// auditSettle is AuditSettle, 4 x ShadowTimeout when unset.
func (r *Router) auditSettle() time.Duration {
	if r.AuditSettle > 0 {
		return r.AuditSettle
	}
	return 4 * r.ShadowTimeout
}
