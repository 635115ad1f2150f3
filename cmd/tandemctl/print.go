package main

import (
	"cmp"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/tandemhq/tandem"
)

func newTable(w io.Writer, header ...string) *tabwriter.Writer {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	return tw
}

func row(tw *tabwriter.Writer, cells ...string) {
	for i, c := range cells {
		// A tab or newline in a value (a reason, say) would break the table.
		cells[i] = strings.NewReplacer("\t", " ", "\n", " ").Replace(c)
	}
	fmt.Fprintln(tw, strings.Join(cells, "\t"))
}

func printPods(w io.Writer, pods []tandem.PodStatus) {
	if len(pods) == 0 {
		fmt.Fprintln(w, "no pods")
		return
	}
	tw := newTable(w, "POD", "MODE", "SOT", "SHADOW", "KILL", "SHOPS", "COMPARISONS", "DIV_RATE", "AUDIT", "GATES", "ABORT", "UPDATED")
	for _, p := range pods {
		row(tw, p.Pod, string(p.Mode), p.SourceOfTruth, orDash(p.Shadow), onOff(p.KillSwitch, "ENGAGED", "off"),
			orDash(p.Shops), strconv.FormatInt(p.Gates.Comparisons, 10), rateOf(p.Gates.DivergenceRate, p.Gates.Comparisons),
			auditVerdict(p.Gates), podGates(p), abortWatch(p.Abort), when(p.UpdatedAt))
	}
	tw.Flush()
	for _, p := range pods {
		if t := p.Transition; t != nil {
			fmt.Fprintf(w, "%s: -> %s running: %s\n", p.Pod, t.To, transitionProgress(*t))
		}
		if th := p.Throttle; th != nil && th.Throttled {
			fmt.Fprintf(w, "%s: %s\n", p.Pod, throttleText(th))
		}
	}
}

// abortWatch says how the pod's recent window stands against the
// automatic abort: "ok 0.000% < 1.000% (1m)", "TRIPS 6.000% >= 1.000%
// (1m)", or "ok 120 of 200 (1m)" while it has too few comparisons; a
// killed pod's tells whether an unkill would hold.
func abortWatch(a *tandem.AbortWatch) string {
	switch {
	case a == nil:
		return "-"
	case a.Threshold <= 0:
		return "off"
	}
	r := max(a.DivergenceRate, a.MySQLErrorRate)
	switch {
	case a.WouldTrip:
		return fmt.Sprintf("TRIPS %s >= %s (%s)", rate(r), rate(a.Threshold), a.Window)
	case a.Comparisons < a.MinComparisons:
		return fmt.Sprintf("ok %d of %d (%s)", a.Comparisons, a.MinComparisons, a.Window)
	}
	return fmt.Sprintf("ok %s < %s (%s)", rate(r), rate(a.Threshold), a.Window)
}

// transitionProgress says how far a background transition is:
// "backfill (copy) 41000 of 60000 holds copied (68%), started ...".
func transitionProgress(t tandem.Transition) string {
	s := t.Phase
	if t.Step != "" {
		s += " (" + t.Step + ")"
	}
	s += fmt.Sprintf(" %d of %d holds copied", t.Copied, t.Total)
	if t.Total > 0 {
		s += fmt.Sprintf(" (%d%%)", t.Copied*100/t.Total)
	}
	if t.HoldsPerSec > 0 {
		s += fmt.Sprintf(", %.0f holds/s, about %s left", t.HoldsPerSec, (time.Duration(t.ETASeconds * float64(time.Second))).Round(time.Second))
	}
	if t.Resumed > 0 {
		s += fmt.Sprintf(", resumed after shop %d with %d copied", t.Checkpoint, t.Resumed)
	}
	if t.YieldingToBuyers {
		s += ", yielding to buyers (one small batch at a time)"
	}
	switch t.CatchUp {
	case "carts":
		s += fmt.Sprintf(", catching up %d carts written during the copy", t.CatchUpCarts)
	case "swept":
		s += ", catching up by a sweep of every hold"
	}
	return s + ", started " + when(t.StartedAt) + "; the mode applies when it is done"
}

func printDryRun(w io.Writer, pod string, mode tandem.Mode, d tandem.DryRun) {
	verdict := "would apply"
	if !d.WouldApply {
		verdict = "would be REFUSED"
	}
	fmt.Fprintf(w, "dry run: %s -> %s %s\nfailed gates: %s\n", pod, mode, verdict, listOr(d.FailedGates, "none"))
	if d.Message != "" {
		fmt.Fprintf(w, "why:          %s\n", d.Message)
	}
	if len(d.Allowed) > 0 {
		next := make([]string, len(d.Allowed))
		for i, m := range d.Allowed {
			next[i] = string(m)
		}
		fmt.Fprintf(w, "allowed next: %s\n", strings.Join(next, ", "))
	}
	printGateChecks(w, d.Checks)
}

// printGateChecks shows each promotion gate against its threshold and, for
// a failing one, what it lacks.
func printGateChecks(w io.Writer, checks []tandem.GateCheck) {
	if len(checks) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := newTable(w, "GATE", "VALUE", "THRESHOLD", "STATUS", "MISSING")
	for _, c := range checks {
		row(tw, c.Gate, gateNumber(c.Gate, c.Value), gateThreshold(c.Gate, c.Threshold), gateStatus(c), orDash(c.Missing))
	}
	tw.Flush()
}

// printKillSwitch says which pods are killed and, per pod, since when, by
// whom and why: with two pods killed, the switch-wide since (the earliest)
// and reason (the latest) belong to different engagements.
func printKillSwitch(w io.Writer, st tandem.KillSwitchState) {
	if st.Engaged {
		fmt.Fprintf(w, "kill switch: ENGAGED for %s\n", listOr(st.Pods, "no pod"))
	} else {
		fmt.Fprintln(w, "kill switch: off")
	}
	if len(st.Engagements) > 0 {
		tw := newTable(w, "POD", "SINCE", "BY", "REASON")
		for _, e := range st.Engagements {
			row(tw, e.Pod, when(e.Since), orDash(e.Actor), e.Reason)
		}
		tw.Flush()
	} else if len(st.Pods) <= 1 {
		// A server without engagements: since and reason are the one
		// pod's own only when one pod is killed.
		if st.Since != nil && !st.Since.IsZero() {
			fmt.Fprintf(w, "since:       %s\n", when(*st.Since))
		}
		if st.Reason != "" {
			fmt.Fprintf(w, "reason:      %s\n", st.Reason)
		}
	}
	for _, r := range st.Refused {
		fmt.Fprintf(w, "refused:     %s: %s\n", r.Pod, r.Reason)
	}
}

func printDivergences(w io.Writer, ds []tandem.ExplainedDivergence) {
	if len(ds) == 0 {
		fmt.Fprintln(w, "no divergences")
		return
	}
	tw := newTable(w, "ID", "AT", "POD", "OP", "KIND", "SHOP", "POSITION", "CART", "SOT", "PRIMARY", "SHADOW", "DETAIL")
	for _, d := range ds {
		shop := "-"
		if d.ShopID != 0 {
			shop = strconv.FormatInt(d.ShopID, 10)
		}
		row(tw, strconv.FormatInt(d.ID, 10), when(d.At), d.Pod, string(d.Op), string(d.Kind), shop,
			positionText(tandem.PositionOf(d.Divergence)), orDash(d.CartToken),
			d.SourceOfTruth, outcome(d.Primary), outcome(d.Shadow), orDash(cmp.Or(d.Explanation, divergenceDetail(d.Divergence))))
	}
	tw.Flush()
}

// positionText is "item 300 group 1", or "-" when no item is known.
func positionText(p tandem.DivergencePosition) string {
	if p.ItemID == 0 && p.GroupID == 0 {
		return "-"
	}
	return fmt.Sprintf("item %d group %d", p.ItemID, p.GroupID)
}

func printDivergenceGroups(w io.Writer, s divergenceSummary) {
	if len(s.Groups) == 0 {
		fmt.Fprintln(w, "no divergences")
		return
	}
	tw := newTable(w, "COUNT", "POD", "KIND", "OP", "SHOP", "POSITION", "FIRST", "LAST", "EXAMPLE")
	for _, g := range s.Groups {
		row(tw, strconv.Itoa(g.Count), g.Pod, string(g.Kind), string(g.Op), strconv.FormatInt(g.Position.ShopID, 10),
			positionText(g.Position), when(g.FirstSeen), when(g.LastSeen),
			fmt.Sprintf("#%d %s", g.Example.ID, g.Example.Explanation))
	}
	tw.Flush()
	if s.Truncated {
		fmt.Fprintf(w, "grouped the newest %d divergences only; narrow with --pod, --kind or --since for exact counts\n", s.Sampled)
	}
}

// printConfig prints the effective configuration as YAML, the way the
// config file reads.
func printConfig(w io.Writer, cfg map[string]any) error {
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(cfg); err != nil {
		return fmt.Errorf("print the config: %w", err)
	}
	return enc.Close()
}

// divergenceDetail says in words what a divergence is about: a drifted
// position's item, group, the ledger's figure and each store's, with the
// cause and fix; else the shadow's message (why a difference is not
// contention, what an error said).
func divergenceDetail(d tandem.Divergence) string {
	if d.Position != nil {
		return tandem.DriftMessage(*d.Position)
	}
	if d.Shadow.Message != "" {
		return d.Shadow.Message
	}
	return orDash(d.Primary.Message)
}

// outcome formats a store's answer as "redis reserved 100x2@1,101x1@2".
func outcome(o tandem.Outcome) string {
	s := orDash(o.Store) + " " + orDash(string(o.Status))
	if len(o.Lines) > 0 {
		parts := make([]string, len(o.Lines))
		for i, l := range o.Lines {
			parts[i] = fmt.Sprintf("%dx%d@%d", l.ItemID, l.Quantity, l.GroupID)
		}
		s += " " + strings.Join(parts, ",")
	}
	return s
}

func printReport(w io.Writer, rs []tandem.Report) {
	if len(rs) == 0 {
		fmt.Fprintln(w, "no pods")
		return
	}
	tw := newTable(w, "POD", "MODE", "WINDOW", "COMPARISONS", "MATCHES", "DIV_RATE", "CONTENTION",
		"REDIS_P50", "REDIS_P99", "MYSQL_P50", "MYSQL_P99", "DIVERGENCES")
	for _, r := range rs {
		var kinds []string
		for _, k := range tandem.DivergenceKinds {
			if n := r.Divergences[k]; n > 0 {
				kinds = append(kinds, fmt.Sprintf("%s=%d", k, n))
			}
		}
		row(tw, r.Pod, string(r.Mode), orDash(r.Window), strconv.FormatInt(r.Comparisons, 10),
			strconv.FormatInt(r.Matches, 10), rateOf(r.DivergenceRate, r.Comparisons),
			contention(r), latency(r, tandem.StoreRedis, false), latency(r, tandem.StoreRedis, true),
			latency(r, tandem.StoreMySQL, false), latency(r, tandem.StoreMySQL, true),
			listOr(kinds, "none"))
	}
	tw.Flush()
}

// contention formats a report's explained contention: how many of the
// matches differed only at the sold-out boundary, and their share.
func contention(r tandem.Report) string {
	if r.Comparisons == 0 {
		return notApplicable
	}
	return fmt.Sprintf("%d (%s)", r.Contention, rateOf(r.ContentionRate, r.Comparisons))
}

// latency formats a store's p50 or p99 in a report: n/a when the window
// holds no sample of it (no comparison, or a store the mode does not use:
// both percentiles read 0).
func latency(r tandem.Report, store string, p99 bool) string {
	s, ok := r.LatencyMS[store]
	if !ok || (s.P50 == 0 && s.P99 == 0) {
		return notApplicable
	}
	v := s.P50
	if p99 {
		v = s.P99
	}
	return millis(v)
}

func printAudit(w io.Writer, a tandem.Audit) {
	verdict := "clean"
	if !a.Clean {
		verdict = fmt.Sprintf("DRIFT in %d positions", len(a.Drifted))
	}
	fmt.Fprintf(w, "audit of %s at %s: %s (%d positions checked)\n", a.Pod, when(a.At), verdict, a.Checked)
	if len(a.Drifted) == 0 {
		return
	}
	tw := newTable(w, "SHOP", "ITEM", "GROUP", "LEDGER_ON_HAND", "REDIS_AVAILABLE", "MYSQL_AVAILABLE")
	for _, d := range a.Drifted {
		row(tw, strconv.FormatInt(d.ShopID, 10), strconv.FormatInt(d.ItemID, 10), strconv.FormatInt(d.GroupID, 10),
			strconv.FormatInt(d.LedgerOnHand, 10), optInt(d.RedisAvailable), optInt(d.MySQLAvailable))
	}
	tw.Flush()
}

func printAuditLog(w io.Writer, es []tandem.AuditLogEntry) {
	if len(es) == 0 {
		fmt.Fprintln(w, "no entries")
		return
	}
	tw := newTable(w, "AT", "ACTOR", "ACTION", "POD", "BEFORE", "AFTER", "REASON")
	for _, e := range es {
		row(tw, when(e.At), orDash(e.Actor), e.Action, orDash(e.Pod), orDash(e.Before), orDash(e.After), e.Reason)
	}
	tw.Flush()
}

func printInstances(w io.Writer, is []tandem.Instance) {
	if len(is) == 0 {
		fmt.Fprintln(w, "no instances")
		return
	}
	tw := newTable(w, "ID", "ADDR", "STARTED", "LAST_SEEN", "CONTROL_VERSION", "STALE")
	for _, in := range is {
		row(tw, in.ID, orDash(in.Addr), when(in.StartedAt), when(in.LastSeen),
			strconv.FormatInt(in.ControlVersion, 10), onOff(in.Stale, "STALE", "no"))
	}
	tw.Flush()
}

// when formats a time in UTC, unambiguous across an on-call rota's zones.
func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02T15:04:05Z")
}

// rate formats a divergence rate as a percentage.
func rate(r float64) string {
	return strconv.FormatFloat(r*100, 'f', 3, 64) + "%"
}

func optInt(p *int64) string {
	if p == nil {
		return "-"
	}
	return strconv.FormatInt(*p, 10)
}

func onOff(b bool, yes, no string) string {
	if b {
		return yes
	}
	return no
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func listOr(xs []string, none string) string {
	if len(xs) == 0 {
		return none
	}
	return strings.Join(xs, ",")
}
