package rollout

import (
	"context"
	"fmt"
	"time"
)

// The controller's background loops: each runs one function every
// interval, under the controller's context, until Close.

// startLoops starts the reload, heartbeat, abort and plan loops and,
// with a Fleet, resumes the transitions left behind and starts the loop
// that looks for more.
func (c *Controller) startLoops(ctx context.Context) {
	c.loop(c.PollInterval, "reload pod modes", c.poll)
	c.loop(c.HeartbeatInterval, "heartbeat", func(ctx context.Context) error {
		return c.Store.Heartbeat(ctx, c.InstanceID, c.Now().UTC(), c.Version())
	})
	c.loop(c.AbortInterval, "automatic abort", func(ctx context.Context) error {
		c.CheckAbort(ctx)
		return nil
	})
	c.loop(c.PlanInterval, "rollout plan", c.StepPlan)
	if c.Fleet != nil {
		if err := c.ResumeTransitions(ctx); err != nil {
			c.report(fmt.Errorf("resume transitions: %w", err))
		}
		c.loop(c.ResumeInterval, "resume transitions", c.ResumeTransitions)
	}
}

// loop runs fn every interval until Close, each run bounded by
// storeTimeout, and reports its failures as what.
func (c *Controller) loop(every time.Duration, what string, fn func(context.Context) error) {
	c.life.start(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-c.life.ctx.Done():
				return
			case <-t.C:
			}
			ctx, cancel := context.WithTimeout(c.life.ctx, storeTimeout)
			err := fn(ctx)
			cancel()
			if err != nil && c.life.ctx.Err() == nil {
				c.report(fmt.Errorf("%s: %w", what, err))
			}
		}
	})
}
