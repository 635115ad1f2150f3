package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

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
	tw := newTable(w, "POD", "MODE", "SOT", "SHADOW", "KILL", "SHOPS", "COMPARISONS", "DIV_RATE", "AUDIT", "GATES", "UPDATED")
	for _, p := range pods {
		gates := "pass"
		if !p.Gates.Passing {
			gates = "fail: " + listOr(p.Gates.FailedGates, "?")
		}
		row(tw, p.Pod, string(p.Mode), p.SourceOfTruth, orDash(p.Shadow), onOff(p.KillSwitch, "ENGAGED", "off"),
			orDash(p.Shops), strconv.FormatInt(p.Gates.Comparisons, 10), rate(p.Gates.DivergenceRate),
			onOff(p.Gates.LastAuditClean, "clean", "not clean"), gates, when(p.UpdatedAt))
	}
	tw.Flush()
	for _, p := range pods {
		if t := p.Transition; t != nil {
			fmt.Fprintf(w, "%s: -> %s running: %s\n", p.Pod, t.To, transitionProgress(*t))
		}
	}
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
		value, threshold := strconv.FormatFloat(c.Value, 'f', -1, 64), ">= "+strconv.FormatFloat(c.Threshold, 'f', -1, 64)
		switch c.Gate {
		case tandem.GateDivergenceRate:
			value, threshold = rate(c.Value), "<= "+rate(c.Threshold)
		case tandem.GateAudit:
			value, threshold = onOff(c.Value >= c.Threshold, "clean", "none clean"), "clean in window"
		}
		row(tw, c.Gate, value, threshold, onOff(c.Passing, "pass", "FAIL"), orDash(c.Missing))
	}
	tw.Flush()
}

func printKillSwitch(w io.Writer, st tandem.KillSwitchState) {
	if st.Engaged {
		fmt.Fprintf(w, "kill switch: ENGAGED for %s\n", listOr(st.Pods, "no pod"))
	} else {
		fmt.Fprintln(w, "kill switch: off")
	}
	if st.Since != nil && !st.Since.IsZero() {
		fmt.Fprintf(w, "since:       %s\n", when(*st.Since))
	}
	if st.Reason != "" {
		fmt.Fprintf(w, "reason:      %s\n", st.Reason)
	}
	for _, r := range st.Refused {
		fmt.Fprintf(w, "refused:     %s: %s\n", r.Pod, r.Reason)
	}
}

func printDivergences(w io.Writer, ds []tandem.Divergence) {
	if len(ds) == 0 {
		fmt.Fprintln(w, "no divergences")
		return
	}
	tw := newTable(w, "ID", "AT", "POD", "OP", "KIND", "SHOP", "CART", "SOT", "PRIMARY", "SHADOW")
	for _, d := range ds {
		shop := "-"
		if d.ShopID != 0 {
			shop = strconv.FormatInt(d.ShopID, 10)
		}
		row(tw, strconv.FormatInt(d.ID, 10), when(d.At), d.Pod, string(d.Op), string(d.Kind), shop, orDash(d.CartToken),
			d.SourceOfTruth, outcome(d.Primary), outcome(d.Shadow))
	}
	tw.Flush()
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
	tw := newTable(w, "POD", "MODE", "WINDOW", "COMPARISONS", "MATCHES", "DIV_RATE",
		"REDIS_P50", "REDIS_P99", "MYSQL_P50", "MYSQL_P99", "DIVERGENCES")
	for _, r := range rs {
		var kinds []string
		for _, k := range tandem.DivergenceKinds {
			if n := r.Divergences[k]; n > 0 {
				kinds = append(kinds, fmt.Sprintf("%s=%d", k, n))
			}
		}
		row(tw, r.Pod, string(r.Mode), orDash(r.Window), strconv.FormatInt(r.Comparisons, 10),
			strconv.FormatInt(r.Matches, 10), rate(r.DivergenceRate),
			latency(r.LatencyMS, tandem.StoreRedis, false), latency(r.LatencyMS, tandem.StoreRedis, true),
			latency(r.LatencyMS, tandem.StoreMySQL, false), latency(r.LatencyMS, tandem.StoreMySQL, true),
			listOr(kinds, "none"))
	}
	tw.Flush()
}

func latency(m map[string]tandem.LatencyStats, store string, p99 bool) string {
	s, ok := m[store]
	if !ok {
		return "-"
	}
	v := s.P50
	if p99 {
		v = s.P99
	}
	return strconv.FormatFloat(v, 'f', 2, 64) + "ms"
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
