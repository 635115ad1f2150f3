package rollout

import (
	"context"
	"fmt"

	"github.com/tandemhq/tandem"
)

// CheckAbort trips the kill switch of every pod whose source of truth is
// MySQL and whose window has at least AbortMinComparisons comparisons at a
// divergence rate, or a MySQL error rate, at or above AbortDivergenceRate.
// It returns the pods it tripped.
func (c *Controller) CheckAbort(ctx context.Context) []string {
	g := c.Gates
	if g.AbortDivergenceRate <= 0 || c.Comparator == nil || c.Switch == nil {
		return nil
	}
	var tripped []string
	for _, p := range c.PodConfigs {
		// mysql_only has no shadow to compare and cannot fall back.
		if c.Mode(p.Name).Effective(c.engaged(p.Name)) != tandem.ModeMySQL {
			continue
		}
		n, rate := c.Comparator.GateStats(p.Name)
		what := "divergence rate"
		if _, errRate := c.Comparator.ErrorStats(p.Name); errRate > rate {
			what, rate = "MySQL error rate", errRate
		}
		if n < g.AbortMinComparisons || rate < g.AbortDivergenceRate {
			continue
		}
		reason := fmt.Sprintf("automatic abort: %s %.4f >= %.4f over %d comparisons in %s",
			what, rate, g.AbortDivergenceRate, n, g.Window)
		if _, err := c.Switch.Engage(ctx, []string{p.Name}, tandem.Change{Actor: ActorAuto, Reason: reason}); err != nil {
			c.report(fmt.Errorf("automatic abort of %s: %w", p.Name, err))
			continue
		}
		c.changed(tandem.AuditLogEntry{At: c.Now().UTC(), Actor: ActorAuto, Action: ActionAutomaticAbort, Pod: p.Name,
			Reason: reason, Before: string(tandem.ModeMySQL), After: "kill switch engaged"})
		tripped = append(tripped, p.Name)
	}
	return tripped
}
