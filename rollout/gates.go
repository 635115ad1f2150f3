package rollout

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tandemhq/tandem"
)

// A pod goes from shadow to mysql only when its promotion gates pass
// (EvaluateGates); the rollout plan's soaks add MySQL's latency and error
// rate and the minimum soak time (PlanGates).

// Gates are the rollout thresholds of the config file.
type Gates struct {
	// MinComparisons is the fewest comparisons in the window to promote;
	// with fewer, the gates that measure rates are inconclusive.
	MinComparisons int64
	// MaxDivergenceRate is the highest divergence rate that promotes.
	MaxDivergenceRate float64
	// Window is the comparator's window, also the longest age of the
	// clean audit that RequireAudit asks for.
	Window time.Duration
	// RequireAudit asks for a clean drift audit within the window.
	RequireAudit bool
	// ConsecutivePasses is how many of the plan's evaluations in a row
	// must pass before it promotes a pod (0 or 1: one).
	ConsecutivePasses int
	// AbortDivergenceRate trips a pod's kill switch (0 disables); the
	// comparator's AbortWindow is the window it judges.
	AbortDivergenceRate float64
	AbortMinComparisons int64
	// MaxMySQLP99 is the plan's latency budget: MySQL's p99 over the
	// window at most this (0 disables).
	MaxMySQLP99 time.Duration
	// MaxP99Factor and P99Slack bound MySQL's p99 by Redis's: at most
	// max(MaxP99Factor x Redis's p99, Redis's p99 + P99Slack); 0 disables
	// each term, both 0 the bound.
	MaxP99Factor float64
	P99Slack     time.Duration
	// MaxMySQLErrorRate is the highest MySQL error rate the plan's soaks
	// accept (0 disables).
	MaxMySQLErrorRate float64
}

// DefaultGates are the defaults of the config's rollout section
// (docs/configuration.md).
var DefaultGates = Gates{
	MinComparisons: 1000, MaxDivergenceRate: 0.001, Window: 15 * time.Minute, RequireAudit: true, ConsecutivePasses: 3,
	AbortDivergenceRate: 0.01, AbortMinComparisons: 200,
	MaxMySQLP99: 50 * time.Millisecond, MaxP99Factor: 3, P99Slack: 25 * time.Millisecond, MaxMySQLErrorRate: 0.001,
}

// gateKeeper judges the pods on the comparator's measures: the promotion
// gates of shadow -> mysql, the plan's soak gates, and the automatic
// abort's window (abort.go). It watches the kill switch as it judges, so
// that after an unkill only what comes next counts.
type gateKeeper struct {
	thresholds Gates
	// cmp is nil when the Controller runs without one: nothing measured.
	cmp  Comparisons
	sw   switchReader
	pods podConfigs
	now  func() time.Time

	mu sync.Mutex
	// marks are what the kill switch and the abort last saw, by pod.
	marks map[string]abortMark
}

func newGateKeeper(g Gates, cmp Comparisons, sw switchReader, pods podConfigs, now func() time.Time) *gateKeeper {
	return &gateKeeper{thresholds: g, cmp: cmp, sw: sw, pods: pods, now: now, marks: map[string]abortMark{}}
}

// passesRequired is ConsecutivePasses, at least one.
func (g Gates) passesRequired() int {
	return max(g.ConsecutivePasses, 1)
}

// Names of the gates in failed_gates.
const (
	GateMinComparisons    = "min_comparisons"
	GateMaxDivergenceRate = "max_divergence_rate"
	GateAuditClean        = "audit_clean"
)

// EvaluateGates returns the state of pod's shadow -> mysql gates.
func (k *gateKeeper) EvaluateGates(pod string) tandem.Gates {
	k.observeKillSwitch()
	g := tandem.Gates{FailedGates: []string{}}
	var clean, recent bool
	if k.cmp != nil {
		g.Comparisons, g.DivergenceRate = k.cmp.GateStats(pod)
		var at time.Time
		var ok bool
		at, clean, ok = k.cmp.LastAudit(pod)
		clean = ok && clean
		recent = ok && !at.Before(k.now().Add(-k.thresholds.Window))
	}
	g.LastAuditClean = clean
	if g.Comparisons < k.thresholds.MinComparisons {
		g.FailedGates = append(g.FailedGates, GateMinComparisons)
	}
	if g.DivergenceRate > k.thresholds.MaxDivergenceRate {
		g.FailedGates = append(g.FailedGates, GateMaxDivergenceRate)
	}
	if k.thresholds.RequireAudit && !(clean && recent) {
		g.FailedGates = append(g.FailedGates, GateAuditClean)
	}
	g.Passing = len(g.FailedGates) == 0
	g.Checks = k.gateChecks(pod, g)
	g.State = combine(g.Checks)
	return g
}

// gateChecks measures each of pod's shadow -> mysql gates against its
// threshold, saying what a failing or inconclusive one lacks. The
// comparisons gate is inconclusive while the window holds fewer than
// MinComparisons, the divergence rate while it is over the limit on fewer
// (unless what they hold already fails it), the audit while there is no
// recent one and none that found drift.
func (k *gateKeeper) gateChecks(pod string, g tandem.Gates) []tandem.GateCheck {
	th := k.thresholds
	comparisons := tandem.GateCheck{Gate: tandem.GateComparisons, Value: float64(g.Comparisons), Threshold: float64(th.MinComparisons),
		State: tandem.GatePass}
	if g.Comparisons < th.MinComparisons {
		n := th.MinComparisons - g.Comparisons
		comparisons.State = tandem.GateInconclusive
		comparisons.Missing = fmt.Sprintf("%d more %s in the %s window", n, plural(n, "comparison"), shortDuration(th.Window))
	}
	rate := tandem.GateCheck{Gate: tandem.GateDivergenceRate, Value: g.DivergenceRate, Threshold: th.MaxDivergenceRate,
		State: rateState(g.Comparisons, g.DivergenceRate, th.MinComparisons, th.MaxDivergenceRate)}
	switch rate.State {
	case tandem.GateFail:
		rate.Missing = fmt.Sprintf("a divergence rate at most %s: find the cause with tandemctl divergences --pod %s",
			percent(th.MaxDivergenceRate), pod)
	case tandem.GateInconclusive:
		rate.Missing = fmt.Sprintf("%s on %d of %d comparisons: too few to judge against %s",
			percent(g.DivergenceRate), g.Comparisons, th.MinComparisons, percent(th.MaxDivergenceRate))
	}
	checks := []tandem.GateCheck{comparisons, rate}
	if th.RequireAudit {
		audit := tandem.GateCheck{Gate: tandem.GateAudit, Threshold: 1, State: tandem.GateInconclusive}
		var at time.Time
		var clean, ok bool
		if k.cmp != nil {
			at, clean, ok = k.cmp.LastAudit(pod)
		}
		recent := ok && !at.Before(k.now().Add(-th.Window))
		switch {
		case !ok:
			audit.Missing = "no audit yet: run tandemctl audit " + pod
		case !clean:
			audit.State = tandem.GateFail
			audit.Missing = fmt.Sprintf("the last audit (%s) found drift: resync or fix it, then audit again", at.UTC().Format(time.RFC3339))
		case !recent:
			audit.Missing = fmt.Sprintf("the last clean audit is %s old, beyond the %s window: run tandemctl audit %s",
				shortDuration(k.now().Sub(at)), shortDuration(th.Window), pod)
		default:
			audit.Value, audit.State = 1, tandem.GatePass
		}
		checks = append(checks, audit)
	}
	for i := range checks {
		checks[i].Passing = checks[i].State == tandem.GatePass
	}
	return checks
}

// rateState judges a rate of bad comparisons of n against at most limit:
// over it, the gate fails once there are minN comparisons, or before
// when the bad ones already exceed what minN comparisons allow; until
// then it is inconclusive. Too little data never fails a gate.
func rateState(n int64, rate float64, minN int64, limit float64) tandem.GateState {
	bad := rate * float64(n)
	switch {
	case rate <= limit:
		return tandem.GatePass
	case n < minN && bad <= limit*float64(minN)+1e-9:
		return tandem.GateInconclusive
	}
	return tandem.GateFail
}

// lastAuditAt is when pod's last audit ran, nil when none has, so that the
// views tell "no audit yet" from "not clean".
func (k *gateKeeper) lastAuditAt(pod string) *time.Time {
	if k.cmp == nil {
		return nil
	}
	at, _, ok := k.cmp.LastAudit(pod)
	if !ok {
		return nil
	}
	at = at.UTC()
	return &at
}

// combine returns the verdict of checks together.
func combine(checks []tandem.GateCheck) tandem.GateState {
	states := make([]tandem.GateState, len(checks))
	for i, ch := range checks {
		states[i] = ch.State
	}
	return tandem.CombineGateStates(states...)
}

// Gates of the plan besides the promotion gates of EvaluateGates.
const (
	// GateMySQLP99 is MySQL's p99 latency in the window, in milliseconds,
	// against its limit: the budget Gates.MaxMySQLP99 and the bound by
	// Redis's p99 (Gates.MaxP99Factor, Gates.P99Slack), the lower of the
	// two. Its name stays that of the factor it replaced.
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
// and lasts soak: the promotion gates, MySQL's p99 against its service
// level, MySQL's error rate and the minimum soak time, each with its value,
// threshold and state.
func (k *gateKeeper) PlanGates(pod string, mode tandem.Mode, since time.Time, soak time.Duration) tandem.PlanGates {
	g := k.EvaluateGates(pod)
	checks := append([]tandem.GateCheck{}, g.Checks...)
	if k.cmp != nil {
		r := k.cmp.Report(pod, mode)
		n, _ := k.cmp.GateStats(pod)
		checks = append(checks, k.thresholds.p99Check(n, r.LatencyMS[tandem.StoreRedis].P99, r.LatencyMS[tandem.StoreMySQL].P99))
		errs := tandem.GateCheck{Gate: GateMySQLErrorRate, Threshold: k.thresholds.MaxMySQLErrorRate, State: tandem.GatePass}
		if mode.SourceOfTruth() == tandem.StoreMySQL {
			_, errs.Value = k.cmp.ErrorStats(pod)
		} else if r.Comparisons > 0 {
			errs.Value = float64(r.Divergences[tandem.KindShadowError]+r.Divergences[tandem.KindShadowTimeout]) / float64(r.Comparisons)
		}
		if k.thresholds.MaxMySQLErrorRate > 0 {
			errs.State = rateState(n, errs.Value, k.thresholds.MinComparisons, k.thresholds.MaxMySQLErrorRate)
		}
		switch errs.State {
		case tandem.GateFail:
			errs.Missing = fmt.Sprintf("MySQL error rate %s, at most %s", percent(errs.Value), percent(k.thresholds.MaxMySQLErrorRate))
		case tandem.GateInconclusive:
			errs.Missing = fmt.Sprintf("MySQL error rate %s on %d of %d comparisons: too few to judge against %s",
				percent(errs.Value), n, k.thresholds.MinComparisons, percent(k.thresholds.MaxMySQLErrorRate))
		}
		checks = append(checks, errs)
	}
	soaked := time.Duration(0)
	if !since.IsZero() {
		soaked = k.now().Sub(since)
	}
	ms := tandem.GateCheck{Gate: GateMinSoak, Value: soaked.Seconds(), Threshold: soak.Seconds(), State: tandem.GatePass}
	if soaked < soak {
		ms.State = tandem.GateInconclusive
		ms.Missing = fmt.Sprintf("%s more soak", (soak - soaked).Round(time.Second))
	}
	checks = append(checks, ms)
	for i := range checks {
		checks[i].Passing = checks[i].State == tandem.GatePass
	}
	pg := tandem.PlanGates{Passing: true, Checks: checks, State: combine(checks), PassesRequired: k.thresholds.passesRequired()}
	for _, ch := range checks {
		pg.Passing = pg.Passing && ch.Passing
	}
	return pg
}

// p99Check judges MySQL's p99 (mysqlMS) over n comparisons: at most the
// budget MaxMySQLP99, and at most max(MaxP99Factor x Redis's p99,
// Redis's p99 + P99Slack). A factor of an in-memory store's latency alone
// is no service level: Redis answers in 2 ms, and a commit with fsync
// cannot be within 3x of that while being an excellent 10 ms for the
// buyer; the slack lets a fast Redis be followed by a healthy MySQL, the
// budget holds MySQL to what the buyer can afford. Over its limit on
// fewer than MinComparisons comparisons, it is inconclusive.
func (g Gates) p99Check(n int64, redisMS, mysqlMS float64) tandem.GateCheck {
	ch := tandem.GateCheck{Gate: GateMySQLP99, Value: mysqlMS, State: tandem.GatePass}
	limit, why := math.Inf(1), ""
	if g.MaxMySQLP99 > 0 {
		limit, why = ms(g.MaxMySQLP99), fmt.Sprintf("the %s budget", msText(ms(g.MaxMySQLP99)))
	}
	if rel, relWhy, ok := g.relativeP99(redisMS); ok && rel < limit {
		limit, why = rel, relWhy
	}
	if math.IsInf(limit, 1) {
		return ch // disabled
	}
	ch.Threshold = math.Round(limit*1000) / 1000
	switch {
	case mysqlMS <= limit:
	case n < g.MinComparisons:
		ch.State = tandem.GateInconclusive
		ch.Missing = fmt.Sprintf("MySQL p99 %s over %s (%s) on %d of %d comparisons: too few to judge",
			msText(mysqlMS), why, msText(limit), n, g.MinComparisons)
	default:
		ch.State = tandem.GateFail
		ch.Missing = fmt.Sprintf("MySQL p99 %s is over %s (%s)", msText(mysqlMS), why, msText(limit))
	}
	return ch
}

// relativeP99 returns the bound of MySQL's p99 by Redis's, and in words;
// false when both terms are disabled or Redis has no latency yet.
func (g Gates) relativeP99(redisMS float64) (float64, string, bool) {
	if redisMS <= 0 || g.MaxP99Factor <= 0 && g.P99Slack <= 0 {
		return 0, "", false
	}
	byFactor, bySlack := math.Inf(-1), math.Inf(-1)
	if g.MaxP99Factor > 0 {
		byFactor = g.MaxP99Factor * redisMS
	}
	if g.P99Slack > 0 {
		bySlack = redisMS + ms(g.P99Slack)
	}
	if byFactor >= bySlack {
		return byFactor, fmt.Sprintf("%gx Redis's p99 %s", g.MaxP99Factor, msText(redisMS)), true
	}
	return bySlack, fmt.Sprintf("Redis's p99 %s + %s", msText(redisMS), msText(ms(g.P99Slack))), true
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func msText(v float64) string { return strconv.FormatFloat(math.Round(v*100)/100, 'f', -1, 64) + "ms" }

// failing returns the names of the checks that do not pass; with
// onlyAbort, only the abort gates that fail (an inconclusive one lacks
// data, which is no reason to abort).
func failing(g tandem.PlanGates, onlyAbort bool) []string {
	var out []string
	for _, ch := range g.Checks {
		if onlyAbort && (ch.State != tandem.GateFail || !abortGates[ch.Gate]) || ch.Passing {
			continue
		}
		out = append(out, ch.Gate)
	}
	return out
}

// notPassing says which checks of g fail and which are inconclusive, with
// what each lacks.
func notPassing(g tandem.PlanGates) string {
	var fail, unsure []string
	for _, ch := range g.Checks {
		switch ch.State {
		case tandem.GateFail:
			fail = append(fail, ch.Gate)
		case tandem.GateInconclusive:
			unsure = append(unsure, ch.Gate+" ("+ch.Missing+")")
		}
	}
	var parts []string
	if len(fail) > 0 {
		parts = append(parts, "gates failing: "+strings.Join(fail, ", "))
	}
	if len(unsure) > 0 {
		parts = append(parts, "gates inconclusive: "+strings.Join(unsure, ", "))
	}
	return strings.Join(parts, "; ")
}
