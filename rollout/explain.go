package rollout

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tandemhq/tandem"
)

// rolloutOrder lists the modes in rollout order.
var rolloutOrder = []tandem.Mode{tandem.ModeRedis, tandem.ModeShadow, tandem.ModeMySQL, tandem.ModeMySQLOnly}

// AllowedNext returns the modes a pod in mode from may go to next, in
// rollout order (resync and gates aside).
func AllowedNext(from tandem.Mode) []tandem.Mode {
	out := []tandem.Mode{}
	for _, m := range rolloutOrder {
		if tandem.CanTransition(from, m) {
			out = append(out, m)
		}
	}
	return out
}

// path returns the shortest chain of allowed transitions from one mode to
// another, both included; nil when there is none.
func path(from, to tandem.Mode) []tandem.Mode {
	prev := map[tandem.Mode]tandem.Mode{from: ""}
	queue := []tandem.Mode{from}
	for len(queue) > 0 {
		m := queue[0]
		queue = queue[1:]
		if m == to {
			var p []tandem.Mode
			for ; m != ""; m = prev[m] {
				p = append(p, m)
			}
			slices.Reverse(p)
			return p
		}
		for _, n := range AllowedNext(m) {
			if _, seen := prev[n]; !seen {
				prev[n] = m
				queue = append(queue, n)
			}
		}
	}
	return nil
}

// refusedError explains a refused mode change: which rules and gates
// failed, and what the operator may do next (details.allowed holds the
// modes the pod may go to from where it is).
func (fr *front) refusedError(pod string, from, to tandem.Mode, failed []string) error {
	var why []string
	for _, f := range failed {
		switch f {
		case RefusedTransition:
			why = append(why, transitionHint(from, to))
		case RefusedResync:
			why = append(why, fmt.Sprintf("its Redis is stale: tandemctl resync %s --from mysql first", pod))
		case RefusedKillSwitch:
			why = append(why, fmt.Sprintf("its kill switch is engaged: tandemctl unkill --pods %s first", pod))
		}
	}
	var gates []string
	var checks []tandem.GateCheck
	if slices.ContainsFunc(failed, isGate) {
		eg := fr.gates.EvaluateGates(pod)
		checks = eg.Checks
		for _, ch := range checks {
			if !ch.Passing {
				gates = append(gates, strings.TrimSpace(ch.Gate+" "+measure(ch))+": "+ch.Missing)
			}
		}
		verdict := "gates failing: "
		if eg.State == tandem.GateInconclusive {
			verdict = "gates inconclusive (too little data yet): "
		}
		why = append(why, verdict+strings.Join(gates, "; "))
	}
	if len(why) == 0 {
		why = append(why, fmt.Sprintf("%v", failed))
	}
	e := tandem.Errorf(tandem.ETRANSITIONREFUSED, "pod %s cannot go from %s to %s: %s", pod, from, to, strings.Join(why, "; ")).
		WithDetail("failed_gates", failed).
		WithDetail("allowed", AllowedNext(from))
	if checks != nil {
		e = e.WithDetail("checks", checks)
	}
	return e
}

// refusalMessage is the message of refusedError, for a dry run.
func (fr *front) refusalMessage(pod string, from, to tandem.Mode, failed []string) string {
	if len(failed) == 0 {
		return ""
	}
	return tandem.ErrorMessage(fr.refusedError(pod, from, to, failed))
}

// transitionHint says how to reach to from from.
func transitionHint(from, to tandem.Mode) string {
	if from == to {
		return "it is already in " + string(to)
	}
	p := path(from, to)
	if len(p) < 3 {
		return fmt.Sprintf("%s -> %s is not a transition", from, to)
	}
	steps := make([]string, len(p)-1)
	for i, m := range p[:len(p)-1] {
		steps[i] = string(m)
	}
	return strings.Join(steps, " -> ") + " first"
}

func isGate(name string) bool {
	return name == GateMinComparisons || name == GateMaxDivergenceRate || name == GateAuditClean
}

// measure says how a gate stands against its threshold: "660 of 1000",
// "0.5% > 0.1%"; nothing for the audit, whose missing part says it all
// (no audit yet, drift found, too old).
func measure(ch tandem.GateCheck) string {
	switch tandem.GateUnit(ch.Gate) {
	case tandem.UnitRatio:
		op := "<="
		if !ch.Passing {
			op = ">"
		}
		return percent(ch.Value) + " " + op + " " + percent(ch.Threshold)
	case tandem.UnitClean:
		return ""
	}
	return strconv.FormatFloat(ch.Value, 'f', -1, 64) + " of " + strconv.FormatFloat(ch.Threshold, 'f', -1, 64)
}

// percent formats a ratio as a percentage with at most three decimals:
// 0.0506329 is "5.063%", 0.01 is "1%".
func percent(r float64) string {
	s := strconv.FormatFloat(r*100, 'f', 3, 64)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s + "%"
}

func plural(n int64, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

// shortDuration formats 15m0s as 15m and 1h30m0s as 1h30m.
func shortDuration(d time.Duration) string {
	s := d.Round(time.Second).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// dryRun is the verdict of a dry run: what would fail and why, where the
// pod may go, and, for the promotion to mysql, each gate's measure.
func (fr *front) dryRun(pod string, from, to tandem.Mode, failed []string) *tandem.DryRun {
	d := &tandem.DryRun{WouldApply: len(failed) == 0, FailedGates: failed, Allowed: AllowedNext(from),
		Message: fr.refusalMessage(pod, from, to, failed)}
	if from == tandem.ModeShadow && to == tandem.ModeMySQL {
		d.Checks = fr.gates.EvaluateGates(pod).Checks
	}
	return d
}
