package rollout

import (
	"context"
	"fmt"
	"time"
)

// The controller's background loops: each runs one function every
// interval, under the controller's context, until Close.

func (c *Controller) loop(every time.Duration, what string, fn func(context.Context) error) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-c.ctx.Done():
				return
			case <-t.C:
			}
			ctx, cancel := context.WithTimeout(c.ctx, storeTimeout)
			err := fn(ctx)
			cancel()
			if err != nil && c.ctx.Err() == nil {
				c.report(fmt.Errorf("%s: %w", what, err))
			}
		}
	}()
}

func (c *Controller) pollOnce(ctx context.Context) error {
	v, err := c.Store.Version(ctx)
	if err != nil {
		return err
	}
	if v == c.version.Load() {
		return nil
	}
	return c.Reload(ctx)
}
