package rollout

import (
	"context"
	"fmt"
	"time"

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
func (k *gateKeeper) observeKillSwitch() {
	if k.sw == nil || k.cmp == nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, p := range k.pods {
		killed := k.sw.Engaged(p.Name)
		m := k.marks[p.Name]
		if m.observed && m.killed && !killed {
			k.cmp.Reset(p.Name)
			m.bad = 0
		}
		m.observed, m.killed = true, killed
		k.marks[p.Name] = m
	}
}

// freshBad reports whether pod's count of divergences and MySQL errors
// changed since the previous check, and remembers it.
func (k *gateKeeper) freshBad(pod string, bad int64) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	m := k.marks[pod]
	fresh := bad != m.bad
	m.bad = bad
	k.marks[pod] = m
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

// abortArmed reports whether the automatic abort is on and has the
// comparator's measures to judge.
func (k *gateKeeper) abortArmed() bool {
	return k.thresholds.AbortDivergenceRate > 0 && k.cmp != nil
}

// abortReason says why pod's recent window (since its last unkill) trips
// the automatic abort: at least AbortMinComparisons comparisons at a
// divergence rate, or a MySQL error rate, at or above
// AbortDivergenceRate, with a divergence or MySQL error new since the
// previous call; "" when it does not.
func (k *gateKeeper) abortReason(pod string) string {
	g := k.thresholds
	r := k.cmp.AbortStats(pod)
	// Every pod's count is taken each check, whatever its mode: a pod
	// promoted to mysql is judged on what comes after.
	fresh := k.freshBad(pod, r.Bad)
	what, rate := abortRate(r)
	if !fresh || r.Comparisons < g.AbortMinComparisons || rate < g.AbortDivergenceRate {
		return ""
	}
	return fmt.Sprintf("automatic abort: %s %.4f >= %.4f over the last %d comparisons (%s window)",
		what, rate, g.AbortDivergenceRate, r.Comparisons, shortDuration(r.Window))
}

// aborter is the automatic abort's action, a turn every AbortInterval:
// the gates judge a pod's recent window, the aborter trips its kill switch.
type aborter struct {
	gates abortJudge
	modes modeReader
	// sw is nil when the Controller runs without one: nothing to trip.
	sw   switchEngager
	pods podConfigs
	now  func() time.Time
	notify
}

// abortJudge is the gates as the automatic abort reads them.
type abortJudge interface {
	observeKillSwitch()
	abortArmed() bool
	abortReason(pod string) string
}

// CheckAbort trips the kill switch of every pod whose source of truth is
// MySQL and whose recent window trips the automatic abort (abortReason).
// It returns the pods it tripped.
func (a *aborter) CheckAbort(ctx context.Context) []string {
	a.gates.observeKillSwitch()
	if !a.gates.abortArmed() || a.sw == nil {
		return nil
	}
	var tripped []string
	for _, p := range a.pods {
		reason := a.gates.abortReason(p.Name)
		// mysql_only has no shadow to compare and cannot fall back.
		if reason == "" || a.modes.Mode(p.Name).Effective(a.sw.Engaged(p.Name)) != tandem.ModeMySQL {
			continue
		}
		if _, err := a.sw.Engage(ctx, []string{p.Name}, tandem.Change{Actor: ActorAuto, Reason: reason}); err != nil {
			a.report(fmt.Errorf("automatic abort of %s: %w", p.Name, err))
			continue
		}
		a.changed(tandem.AuditLogEntry{At: a.now().UTC(), Actor: ActorAuto, Action: ActionAutomaticAbort, Pod: p.Name,
			Reason: reason, Before: string(tandem.ModeMySQL), After: "kill switch engaged"})
		tripped = append(tripped, p.Name)
	}
	return tripped
}

// abortWatch is POD.abort: pod's recent window against the abort's
// threshold.
func (k *gateKeeper) abortWatch(pod string, eff tandem.Mode) *tandem.AbortWatch {
	if k.cmp == nil {
		return nil
	}
	r := k.cmp.AbortStats(pod)
	g := k.thresholds
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
