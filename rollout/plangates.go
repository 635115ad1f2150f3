package rollout

import (
	"fmt"
	"time"

	"github.com/tandemhq/tandem"
)

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
	c.init()
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
