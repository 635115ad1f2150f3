package rollout

import (
	"context"
	"fmt"

	"github.com/tandemhq/tandem"
)

// The automatic abort judges what MySQL does now: the comparator's recent
// window (rollout.abort_window, a minute by default), counted from the
// pod's last unkill, and it trips only on a divergence or MySQL error that
// arrived since its previous check. A windowed rate also rises when older
// matches leave the window faster than older divergences; a rate that
// crossed the threshold that way, with nothing new going wrong, is no
// reason to kill a pod (issue 21: an unkill undone 8 s later by it).

// abortMark is what the abort last saw of a pod.
type abortMark struct {
	// observed is set once killed was read.
	observed bool
	killed   bool
	// bad is the comparator's count of divergences and MySQL errors at
	// the previous check.
	bad int64
}

// observeKillSwitch resets the comparator's gates and abort window of
// every pod whose kill switch was disengaged since the last look, so that
// only the comparisons after the unkill count. Every instance looks at
// least every AbortInterval (and on each status read), with its own
// comparator.
func (c *Controller) observeKillSwitch() {
	if c.Switch == nil || c.Comparator == nil {
		return
	}
	c.abortMu.Lock()
	defer c.abortMu.Unlock()
	for _, p := range c.PodConfigs {
		killed := c.Switch.Engaged(p.Name)
		m := c.abortMarks[p.Name]
		if m.observed && m.killed && !killed {
			c.Comparator.Reset(p.Name)
			m.bad = 0
		}
		m.observed, m.killed = true, killed
		c.abortMarks[p.Name] = m
	}
}

// freshBad reports whether pod's count of divergences and MySQL errors
// changed since the previous check, and remembers it.
func (c *Controller) freshBad(pod string, bad int64) bool {
	c.abortMu.Lock()
	defer c.abortMu.Unlock()
	m := c.abortMarks[pod]
	fresh := bad != m.bad
	m.bad = bad
	c.abortMarks[pod] = m
	return fresh
}

// abortRate returns the higher of r's divergence rate and MySQL error
// rate, and which it is.
func abortRate(r tandem.RecentComparisons) (what string, rate float64) {
	what, rate = "divergence rate", r.DivergenceRate()
	if e := r.MySQLErrorRate(); e > rate {
		what, rate = "MySQL error rate", e
	}
	return what, rate
}

// CheckAbort trips the kill switch of every pod whose source of truth is
// MySQL and whose recent window (since its last unkill) has at least
// AbortMinComparisons comparisons at a divergence rate, or a MySQL error
// rate, at or above AbortDivergenceRate, with a divergence or MySQL error
// new since the previous check. It returns the pods it tripped.
func (c *Controller) CheckAbort(ctx context.Context) []string {
	c.observeKillSwitch()
	g := c.Gates
	if g.AbortDivergenceRate <= 0 || c.Comparator == nil || c.Switch == nil {
		return nil
	}
	var tripped []string
	for _, p := range c.PodConfigs {
		r := c.Comparator.AbortStats(p.Name)
		// Every pod's count is taken each check, whatever its mode: a pod
		// promoted to mysql is judged on what comes after.
		fresh := c.freshBad(p.Name, r.Bad)
		// mysql_only has no shadow to compare and cannot fall back.
		if c.Mode(p.Name).Effective(c.engaged(p.Name)) != tandem.ModeMySQL {
			continue
		}
		what, rate := abortRate(r)
		if !fresh || r.Comparisons < g.AbortMinComparisons || rate < g.AbortDivergenceRate {
			continue
		}
		reason := fmt.Sprintf("automatic abort: %s %.4f >= %.4f over the last %d comparisons (%s window)",
			what, rate, g.AbortDivergenceRate, r.Comparisons, shortDuration(r.Window))
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

// abortWatch is POD.abort: pod's recent window against the abort's
// threshold.
func (c *Controller) abortWatch(pod string, eff tandem.Mode) *tandem.AbortWatch {
	if c.Comparator == nil {
		return nil
	}
	r := c.Comparator.AbortStats(pod)
	g := c.Gates
	_, rate := abortRate(r)
	w := &tandem.AbortWatch{
		Window: shortDuration(r.Window), Comparisons: r.Comparisons, MinComparisons: g.AbortMinComparisons,
		DivergenceRate: r.DivergenceRate(), MySQLErrorRate: r.MySQLErrorRate(), Threshold: g.AbortDivergenceRate,
		WouldTrip: g.AbortDivergenceRate > 0 && r.Comparisons >= g.AbortMinComparisons && rate >= g.AbortDivergenceRate,
		Armed:     g.AbortDivergenceRate > 0 && eff == tandem.ModeMySQL,
	}
	if !r.Since.IsZero() {
		since := r.Since.UTC()
		w.Since = &since
	}
	return w
}
