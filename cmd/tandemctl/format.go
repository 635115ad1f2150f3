package main

import (
	"strconv"
	"strings"
	"time"

	"github.com/tandemhq/tandem"
)

// notApplicable stands where there is nothing to show: no comparison to
// take a rate of, no latency sample, no gate for a killed pod.
const notApplicable = "n/a"

// gateNumber formats a gate's value or threshold in the gate's unit:
// "660", "0.050%", "3.78x", "9.58ms", "6.7s", "clean". JSON keeps the plain
// number; text never shows 1.3376180482686255.
func gateNumber(gate string, v float64) string {
	switch tandem.GateUnit(gate) {
	case tandem.UnitRatio:
		return rate(v)
	case tandem.UnitFactor:
		return strconv.FormatFloat(v, 'f', 2, 64) + "x"
	case tandem.UnitMS:
		return millis(v)
	case tandem.UnitSeconds:
		return seconds(v)
	case tandem.UnitClean:
		return onOff(v >= 1, "clean", "none clean")
	case tandem.UnitCount:
		if v == float64(int64(v)) {
			return strconv.FormatInt(int64(v), 10)
		}
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

// gateThreshold says what a gate asks for: ">= 1000", "<= 0.100%",
// "clean in window".
func gateThreshold(gate string, v float64) string {
	switch tandem.GateUnit(gate) {
	case tandem.UnitClean:
		return "clean in window"
	case tandem.UnitCount, tandem.UnitSeconds:
		return ">= " + gateNumber(gate, v)
	}
	return "<= " + gateNumber(gate, v)
}

// gateStatus is a check's verdict in a table: pass or FAIL.
func gateStatus(c tandem.GateCheck) string {
	return onOff(c.Passing, "pass", "FAIL")
}

// podGates sums a pod's promotion gates up for the GATES column: "pass",
// "fail: min_comparisons,audit_clean", or n/a while its kill switch is
// engaged (Redis serves it whatever the gates say).
func podGates(p tandem.PodStatus) string {
	switch {
	case p.KillSwitch:
		return notApplicable + " (killed)"
	case p.Gates.Passing:
		return "pass"
	}
	return "fail: " + listOr(p.Gates.FailedGates, "?")
}

// auditVerdict says how a pod's last audit went: clean, not clean, or "no
// audit yet" when none ran.
func auditVerdict(g tandem.Gates) string {
	if g.LastAuditClean {
		return "clean"
	}
	if g.LastAuditAt == nil {
		return "no audit yet"
	}
	return "not clean"
}

// rateOf formats a divergence rate, n/a when there was nothing to compare.
func rateOf(r float64, comparisons int64) string {
	if comparisons == 0 {
		return notApplicable
	}
	return rate(r)
}

// millis formats a latency in milliseconds: "9.58ms".
func millis(v float64) string {
	return strconv.FormatFloat(v, 'f', 2, 64) + "ms"
}

// seconds formats a number of seconds as a duration: "6.7s", "1m5s", "30m".
func seconds(v float64) string {
	d := time.Duration(v * float64(time.Second))
	if d < time.Minute {
		d = d.Round(100 * time.Millisecond)
	} else {
		d = d.Round(time.Second)
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	return s
}
