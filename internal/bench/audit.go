package bench

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/tandemhq/tandem"
)

// AuditResult is the drift audit of the backfill bench's pod in shadow,
// after the copy: once quiet, for its time and the rows it examined, then
// under the buyers, for their p99 during it.
type AuditResult struct {
	Holds     int     `json:"holds"`
	Positions int     `json:"positions"`
	Seconds   float64 `json:"seconds"`
	Clean     bool    `json:"clean"`
	// RowsExaminedPerHold is the server's Handler_read_* counters' rise
	// during the quiet audit over the holds: an upper bound, since the
	// counters are the whole server's and other work may run.
	RowsExaminedPerHold float64 `json:"rows_examined_per_hold"`
	// UnderBuyersSeconds is the audit's time with buyers at the rate.
	UnderBuyersSeconds float64 `json:"under_buyers_seconds"`
	BeforeP99MS        float64 `json:"before_p99_ms"`
	DuringP99MS        float64 `json:"during_p99_ms"`
	DuringOps          int     `json:"during_ops"`
	BuyerErrors        int64   `json:"buyer_errors"`
	// ThrottledSeconds is how long the audit under buyers waited for the
	// throttle, by reason.
	ThrottledSeconds map[string]float64 `json:"throttled_seconds,omitempty"`
	// ConnHoldMeanMS and ConnHoldP99MS are the connection hold of each of
	// the audit's MySQL flows (audit: one page or check), by conn_tag.
	ConnHoldMeanMS map[string]float64 `json:"conn_hold_mean_ms,omitempty"`
	ConnHoldP99MS  map[string]float64 `json:"conn_hold_p99_ms,omitempty"`
}

const handlerReadSQL = "/* conn_tag='bench' */ SHOW GLOBAL STATUS LIKE 'Handler_read%'"

// handlerReads sums the server's Handler_read_* counters.
func handlerReads(ctx context.Context, db *sql.DB) (int64, error) {
	rows, err := db.QueryContext(ctx, handlerReadSQL)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var sum int64
	for rows.Next() {
		var name, v string
		if err := rows.Scan(&name, &v); err != nil {
			return 0, err
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		sum += n
	}
	return sum, rows.Err()
}

// audit runs the audit of s's pod quiet, then under buyers at b.Rate.
func (b *Backfill) audit(ctx context.Context, s *backfillStores) (AuditResult, error) {
	var res AuditResult
	db, err := sql.Open("mysql", s.env.dsn)
	if err != nil {
		return res, err
	}
	defer db.Close()
	before, err := handlerReads(ctx, db)
	if err != nil {
		return res, err
	}
	start := time.Now()
	a, err := s.router.Audit(ctx)
	if err != nil {
		return res, fmt.Errorf("audit: %w", err)
	}
	res.Seconds = time.Since(start).Seconds()
	after, err := handlerReads(ctx, db)
	if err != nil {
		return res, err
	}
	holds, err := s.my.ActiveHolds(ctx)
	if err != nil {
		return res, err
	}
	res.Holds, res.Positions, res.Clean = len(holds), a.Checked, a.Clean
	if len(holds) > 0 {
		res.RowsExaminedPerHold = float64(after-before) / float64(len(holds))
	}
	if b.Rate == 0 {
		return res, nil
	}
	l := &backfillBuyers{prefix: "audit-"}
	l.run(ctx, s.router, b.Rate, b.Shops)
	time.Sleep(b.Warmup)
	l.phase.Store(1)
	throttledBefore := throttledByReason(s.reg, tandem.JobAudit)
	holdsBefore := gatherHolds(s.reg)
	start = time.Now()
	_, aerr := s.router.Audit(ctx)
	res.UnderBuyersSeconds = time.Since(start).Seconds()
	auditHolds := gatherHolds(s.reg).since(holdsBefore)
	l.halt()
	if aerr != nil {
		return res, fmt.Errorf("audit under buyers: %w", aerr)
	}
	res.BeforeP99MS, res.DuringP99MS = ms(quantileOf(l.lat[0], 0.99)), ms(quantileOf(l.lat[1], 0.99))
	res.DuringOps, res.BuyerErrors = len(l.lat[1]), l.errs.Load()
	res.ThrottledSeconds = throttledByReason(s.reg, tandem.JobAudit)
	for k, v := range throttledBefore {
		res.ThrottledSeconds[k] -= v
	}
	res.ConnHoldMeanMS, res.ConnHoldP99MS = auditHolds.meansMS(), auditHolds.quantilesMS(0.99)
	return res, nil
}

func printAudit(w io.Writer, a AuditResult) {
	fmt.Fprintf(w, "audit of %d holds (%d positions): %.2fs quiet, clean %v, %.1f rows examined per hold (the server's Handler_read_*, an upper bound)\n",
		a.Holds, a.Positions, a.Seconds, a.Clean, a.RowsExaminedPerHold)
	if a.DuringOps > 0 {
		fmt.Fprintf(w, "audit under buyers: %.2fs; buyers' p99 %.2f ms before, %.2f ms during (%.2fx, %d ops, %d errors); throttled %s\n",
			a.UnderBuyersSeconds, a.BeforeP99MS, a.DuringP99MS, a.DuringP99MS/max(a.BeforeP99MS, 1e-9), a.DuringOps, a.BuyerErrors,
			reasonsText(a.ThrottledSeconds))
		fmt.Fprintf(w, "audit connection hold per page: %s\n", holdText(a.ConnHoldMeanMS, a.ConnHoldP99MS))
	}
}

// throttledByReason is tandem_throttled_seconds_total of job, by reason.
func throttledByReason(g prometheus.Gatherer, job string) map[string]float64 {
	out := map[string]float64{}
	mfs, err := g.Gather()
	if err != nil {
		return out
	}
	for _, mf := range mfs {
		if mf.GetName() != "tandem_throttled_seconds_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label(m, "job") == job {
				out[label(m, "reason")] += m.GetCounter().GetValue()
			}
		}
	}
	return out
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// reasonsText is "1.25s (buyer_p99 1.00s, threads_running 0.25s)", or
// "not at all".
func reasonsText(by map[string]float64) string {
	var total float64
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(by)) {
		if by[k] > 0 {
			total += by[k]
			parts = append(parts, fmt.Sprintf("%s %.2fs", k, by[k]))
		}
	}
	if total == 0 {
		return "not at all"
	}
	return fmt.Sprintf("%.2fs (%s)", total, strings.Join(parts, ", "))
}

// holdText is "rebuild mean 41.2 ms p99 98.0 ms; audit ...".
func holdText(mean, p99 map[string]float64) string {
	var parts []string
	for _, tag := range slices.Sorted(maps.Keys(mean)) {
		parts = append(parts, fmt.Sprintf("%s mean %.1f ms p99 %.1f ms", tag, mean[tag], p99[tag]))
	}
	return strings.Join(parts, "; ")
}
