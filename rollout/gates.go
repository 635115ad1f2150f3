package rollout

import (
	"fmt"
	"time"

	"github.com/tandemhq/tandem"
)

// A pod goes from shadow to mysql only when its promotion gates pass
// (EvaluateGates); the rollout plan's soaks add MySQL's latency and error
// rate and the minimum soak time (PlanGates).

// Gates are the rollout thresholds of the config file.
type Gates struct {
	// MinComparisons is the fewest comparisons in the window to promote.
	MinComparisons int64
	// MaxDivergenceRate is the highest divergence rate that promotes.
	MaxDivergenceRate float64
	// Window is the comparator's window, also the longest age of the
	// clean audit that RequireAudit asks for.
	Window time.Duration
	// RequireAudit asks for a clean drift audit within the window.
	RequireAudit bool
	// AbortDivergenceRate trips a pod's kill switch (0 disables).
	AbortDivergenceRate float64
	AbortMinComparisons int64
	// MaxP99Factor is the highest MySQL p99 over Redis's p99 the plan's
	// soaks accept (0 disables).
	MaxP99Factor float64
	// MaxMySQLErrorRate is the highest MySQL error rate the plan's soaks
	// accept (0 disables).
	MaxMySQLErrorRate float64
}

// DefaultGates are the defaults of the config's rollout section (README
// "Configuration reference").
var DefaultGates = Gates{
	MinComparisons: 1000, MaxDivergenceRate: 0.001, Window: 15 * time.Minute, RequireAudit: true,
	AbortDivergenceRate: 0.01, AbortMinComparisons: 200, MaxP99Factor: 3, MaxMySQLErrorRate: 0.001,
}

// Names of the gates in failed_gates.
const (
	GateMinComparisons    = "min_comparisons"
	GateMaxDivergenceRate = "max_divergence_rate"
	GateAuditClean        = "audit_clean"
)

// EvaluateGates returns the state of pod's shadow -> mysql gates.
func (c *Controller) EvaluateGates(pod string) tandem.Gates {
	g := tandem.Gates{FailedGates: []string{}}
	var clean, recent bool
	if c.Comparator != nil {
		g.Comparisons, g.DivergenceRate = c.Comparator.GateStats(pod)
		var at time.Time
		var ok bool
		at, clean, ok = c.Comparator.LastAudit(pod)
		clean = ok && clean
		recent = ok && !at.Before(c.Now().Add(-c.Gates.Window))
	}
	g.LastAuditClean = clean
	if g.Comparisons < c.Gates.MinComparisons {
		g.FailedGates = append(g.FailedGates, GateMinComparisons)
	}
	if g.DivergenceRate > c.Gates.MaxDivergenceRate {
		g.FailedGates = append(g.FailedGates, GateMaxDivergenceRate)
	}
	if c.Gates.RequireAudit && !(clean && recent) {
		g.FailedGates = append(g.FailedGates, GateAuditClean)
	}
	g.Passing = len(g.FailedGates) == 0
	g.Checks = c.gateChecks(pod, g)
	return g
}

// Gates of the plan besides the promotion gates of EvaluateGates.
const (
	// GateMySQLP99 is MySQL's p99 latency over Redis's in the window, at
	// most Gates.MaxP99Factor.
	GateMySQLP99 = "mysql_p99_factor"
	// GateMySQLErrorRate is MySQL's error (and timeout) rate in the
	// window, at most Gates.MaxMySQLErrorRate.
	GateMySQLErrorRate = "mysql_error_rate"
	// GateMinSoak is the time the pod has soaked, in seconds, at least the
	// plan's soak.
	GateMinSoak = "min_soak"
)

// abortGates are the gates whose failure during a soak, after they
// passed, aborts the plan: they measure MySQL, not how much was measured.
var abortGates = map[string]bool{tandem.GateDivergenceRate: true, GateMySQLP99: true, GateMySQLErrorRate: true}

// PlanGates evaluates pod's gates for a soak in mode that began at since
// and lasts soak: the promotion gates, MySQL's p99 against Redis's,
// MySQL's error rate and the minimum soak time, each with its value and
// threshold.
func (c *Controller) PlanGates(pod string, mode tandem.Mode, since time.Time, soak time.Duration) tandem.PlanGates {
	g := c.EvaluateGates(pod)
	checks := append([]tandem.GateCheck{}, g.Checks...)
	if c.Comparator != nil {
		r := c.Comparator.Report(pod, mode)
		redis, mysql := r.LatencyMS[tandem.StoreRedis].P99, r.LatencyMS[tandem.StoreMySQL].P99
		p99 := tandem.GateCheck{Gate: GateMySQLP99, Threshold: c.Gates.MaxP99Factor, Passing: true}
		if redis > 0 && mysql > 0 {
			p99.Value = mysql / redis
		}
		if c.Gates.MaxP99Factor > 0 && p99.Value > c.Gates.MaxP99Factor {
			p99.Passing = false
			p99.Missing = fmt.Sprintf("MySQL p99 %.2fms is %.2fx Redis's %.2fms, at most %.2fx", mysql, p99.Value, redis, c.Gates.MaxP99Factor)
		}
		checks = append(checks, p99)
		errs := tandem.GateCheck{Gate: GateMySQLErrorRate, Threshold: c.Gates.MaxMySQLErrorRate, Passing: true}
		if mode.SourceOfTruth() == tandem.StoreMySQL {
			_, errs.Value = c.Comparator.ErrorStats(pod)
		} else if r.Comparisons > 0 {
			errs.Value = float64(r.Divergences[tandem.KindShadowError]+r.Divergences[tandem.KindShadowTimeout]) / float64(r.Comparisons)
		}
		if c.Gates.MaxMySQLErrorRate > 0 && errs.Value > c.Gates.MaxMySQLErrorRate {
			errs.Passing = false
			errs.Missing = fmt.Sprintf("MySQL error rate %.4f, at most %.4f", errs.Value, c.Gates.MaxMySQLErrorRate)
		}
		checks = append(checks, errs)
	}
	soaked := time.Duration(0)
	if !since.IsZero() {
		soaked = c.Now().Sub(since)
	}
	ms := tandem.GateCheck{Gate: GateMinSoak, Value: soaked.Seconds(), Threshold: soak.Seconds(), Passing: soaked >= soak}
	if !ms.Passing {
		ms.Missing = fmt.Sprintf("%s more soak", (soak - soaked).Round(time.Second))
	}
	checks = append(checks, ms)
	pg := tandem.PlanGates{Passing: true, Checks: checks}
	for _, ch := range checks {
		pg.Passing = pg.Passing && ch.Passing
	}
	return pg
}

// failing returns the names of the failing checks, only abort gates when
// onlyAbort.
func failing(g tandem.PlanGates, onlyAbort bool) []string {
	var out []string
	for _, ch := range g.Checks {
		if !ch.Passing && (!onlyAbort || abortGates[ch.Gate]) {
			out = append(out, ch.Gate)
		}
	}
	return out
}
