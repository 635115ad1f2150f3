package replay

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/capture"
)

// Run is one replay's raw outcomes; Result summarises it.
type Run struct {
	Speed float64
	// Offered is how long sending every op took, Elapsed until the last
	// answer, MaxLag the most an op was sent after its time (the
	// replayer's own lag: it should stay near zero).
	Offered, Elapsed, MaxLag time.Duration

	ops       []capture.Op
	outcomes  []outcome
	started   time.Time
	cancelled int
}

// Result is a replay's report: per op, throughput, latency, errors and
// the outcome diff against the capture; the engine's connection holds,
// retries and slow-path share; its invariants at the end; latency and
// throughput over time.
type Result struct {
	Capture        string  `json:"capture"`
	Pod            string  `json:"pod"`
	Speed          float64 `json:"speed"`
	Ops            int     `json:"ops"`
	Cancelled      int     `json:"cancelled,omitempty"`
	ElapsedSeconds float64 `json:"elapsed_seconds"`
	// CaptureSeconds is the capture's span, ScheduleSeconds that span
	// divided by the speed.
	CaptureSeconds  float64   `json:"capture_seconds"`
	ScheduleSeconds float64   `json:"schedule_seconds"`
	MaxLagMS        float64   `json:"max_schedule_lag_ms"`
	PerOp           []OpStats `json:"per_op"`
	Errors          int       `json:"errors"`
	Diff            Diff      `json:"outcome_diff"`
	// ConnHoldMS is, per conn_tag, the mean and p99 time a flow of the
	// engine held a connection (mysqlres' histogram; p99 to its bucket).
	ConnHoldMS map[string]Hold `json:"conn_hold_ms,omitempty"`
	// Retries counts the engine's transactions retried after a deadlock
	// or lock-wait timeout, per conn_tag.
	Retries map[string]float64 `json:"retries,omitempty"`
	// SlowPathShare is the share of reserves that left the SKIP LOCKED
	// fast path for the ledger-locked slow path.
	SlowPathShare float64 `json:"slow_path_share"`
	// Violations are the engine's broken invariants at the end (none in
	// a sound engine).
	Violations []tandem.Violation `json:"violations"`
	Timeline   []Point            `json:"timeline"`
	// P99MaxMS and Held: with a p99 limit, whether every op's p99 stayed
	// under it with no errors and no broken invariant.
	P99MaxMS float64 `json:"p99_max_ms,omitempty"`
	Held     bool    `json:"held"`
}

// OpStats is one kind of operation's figures.
type OpStats struct {
	Op              tandem.Op `json:"op"`
	Count           int       `json:"count"`
	OfferedPerSec   float64   `json:"offered_per_s"`
	AchievedPerSec  float64   `json:"achieved_per_s"`
	P50MS           float64   `json:"p50_ms"`
	P99MS           float64   `json:"p99_ms"`
	P999MS          float64   `json:"p999_ms"`
	MaxMS           float64   `json:"max_ms"`
	Errors          int       `json:"errors"`
	Captured        statusMap `json:"captured"`
	Replayed        statusMap `json:"replayed"`
	SameAsCaptured  int       `json:"same_as_captured"`
	GrantedRefused  int       `json:"granted_then_refused"`
	RefusedGranted  int       `json:"refused_then_granted"`
	OtherDifference int       `json:"other_difference"`
}

type statusMap map[tandem.OutcomeStatus]int

// Diff is the outcome diff against the capture, over every op.
type Diff struct {
	// GrantedThenRefused counts ops the capture's SoT granted (reserved,
	// claimed, released, stock set) that the replay refused, and
	// RefusedThenGranted the reverse. At equal speed a sound engine gives
	// the capture's answers.
	GrantedThenRefused int `json:"granted_then_refused"`
	RefusedThenGranted int `json:"refused_then_granted"`
	// Changes counts every "captured -> replayed" pair of statuses that
	// differ.
	Changes map[string]int `json:"changes"`
	// Examples are the first differing ops.
	Examples []DiffExample `json:"examples,omitempty"`
}

// DiffExample is one op whose replayed answer differs from the capture's.
type DiffExample struct {
	OffsetMS  float64              `json:"offset_ms"`
	Op        tandem.Op            `json:"op"`
	ShopID    int64                `json:"shop_id"`
	CartToken string               `json:"cart_token,omitempty"`
	Captured  tandem.OutcomeStatus `json:"captured"`
	Replayed  tandem.OutcomeStatus `json:"replayed"`
}

// Hold is a conn_tag's connection hold.
type Hold struct {
	Count  uint64  `json:"count"`
	MeanMS float64 `json:"mean_ms"`
	P99MS  float64 `json:"p99_ms"`
}

// Point is one slice of the replay's time: answers per second and their
// latency.
type Point struct {
	AtSeconds float64 `json:"at_s"`
	OpsPerSec float64 `json:"ops_per_s"`
	P50MS     float64 `json:"p50_ms"`
	P99MS     float64 `json:"p99_ms"`
}

// opOrder is the order of the per-op table.
var opOrder = []tandem.Op{tandem.OpReserve, tandem.OpClaim, tandem.OpRelease, tandem.OpSetOnHand}

// granted reports whether a status is a store's yes to the op.
func granted(op tandem.Op, st tandem.OutcomeStatus) bool {
	switch op {
	case tandem.OpReserve:
		return st.Is(tandem.StatusReserved)
	case tandem.OpClaim:
		return st.Is(tandem.StatusClaimed)
	case tandem.OpRelease:
		return st.Is(tandem.StatusReleased)
	}
	return st == tandem.OutcomeOK
}

// failed reports whether a status is the store failing, not answering.
func failed(st tandem.OutcomeStatus) bool {
	return st == tandem.EUNAVAILABLE || st == tandem.EINTERNAL || st == "" || len(st) > 11 && st[:11] == "unknown_op:"
}

// maxExamples bounds Diff.Examples.
const maxExamples = 20

// Summarise computes the result of a run (the engine's figures are the
// caller's).
func (r *Run) Summarise() *Result {
	res := &Result{Speed: r.Speed, Ops: len(r.ops), Cancelled: r.cancelled, ElapsedSeconds: r.Elapsed.Seconds(),
		MaxLagMS: ms(r.MaxLag), Diff: Diff{Changes: map[string]int{}}, Violations: []tandem.Violation{}}
	if len(r.ops) > 0 {
		span := r.ops[len(r.ops)-1].Offset - r.ops[0].Offset
		res.CaptureSeconds = span.Seconds()
		res.ScheduleSeconds = span.Seconds() / r.Speed
	}
	byOp := map[tandem.Op]*OpStats{}
	lat := map[tandem.Op][]time.Duration{}
	sent := len(r.ops) - r.cancelled
	for i := range sent {
		op, o := &r.ops[i], r.outcomes[i]
		s := byOp[op.Op]
		if s == nil {
			s = &OpStats{Op: op.Op, Captured: statusMap{}, Replayed: statusMap{}}
			byOp[op.Op] = s
		}
		s.Count++
		s.Captured[op.Status]++
		s.Replayed[o.status]++
		lat[op.Op] = append(lat[op.Op], o.latency)
		if failed(o.status) {
			s.Errors++
			res.Errors++
		}
		if o.status == op.Status {
			s.SameAsCaptured++
			continue
		}
		res.Diff.Changes[string(op.Status)+" -> "+string(o.status)]++
		switch g, h := granted(op.Op, op.Status), granted(op.Op, o.status); {
		case g && !h:
			s.GrantedRefused++
			res.Diff.GrantedThenRefused++
		case !g && h:
			s.RefusedGranted++
			res.Diff.RefusedThenGranted++
		default:
			s.OtherDifference++
		}
		if len(res.Diff.Examples) < maxExamples {
			res.Diff.Examples = append(res.Diff.Examples, DiffExample{OffsetMS: ms(op.Offset), Op: op.Op, ShopID: op.ShopID,
				CartToken: op.CartToken, Captured: op.Status, Replayed: o.status})
		}
	}
	for _, name := range orderedOps(byOp) {
		s := byOp[name]
		l := lat[name]
		sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
		s.P50MS, s.P99MS, s.P999MS, s.MaxMS = ms(quantile(l, .5)), ms(quantile(l, .99)), ms(quantile(l, .999)), ms(l[len(l)-1])
		if res.ScheduleSeconds > 0 {
			s.OfferedPerSec = float64(s.Count) / res.ScheduleSeconds
		}
		if r.Elapsed > 0 {
			s.AchievedPerSec = float64(s.Count) / r.Elapsed.Seconds()
		}
		res.PerOp = append(res.PerOp, *s)
	}
	res.Timeline = r.timeline(sent)
	return res
}

func orderedOps(m map[tandem.Op]*OpStats) []tandem.Op {
	var out []tandem.Op
	for _, op := range opOrder {
		if m[op] != nil {
			out = append(out, op)
		}
	}
	var rest []tandem.Op
	for op := range m {
		if m[op] != nil && !contains(opOrder, op) {
			rest = append(rest, op)
		}
	}
	sort.Slice(rest, func(i, j int) bool { return rest[i] < rest[j] })
	return append(out, rest...)
}

func contains(ops []tandem.Op, op tandem.Op) bool {
	for _, o := range ops {
		if o == op {
			return true
		}
	}
	return false
}

// timeline buckets the answers by when they came, about 60 buckets.
func (r *Run) timeline(sent int) []Point {
	if sent == 0 || r.Elapsed <= 0 {
		return []Point{}
	}
	width := max(r.Elapsed/60, 50*time.Millisecond)
	n := int(r.Elapsed/width) + 1
	buckets := make([][]time.Duration, n)
	for i := range sent {
		o := r.outcomes[i]
		b := min(int(o.done/width), n-1)
		buckets[b] = append(buckets[b], o.latency)
	}
	out := make([]Point, 0, n)
	for i, l := range buckets {
		sort.Slice(l, func(a, b int) bool { return l[a] < l[b] })
		p := Point{AtSeconds: (time.Duration(i) * width).Seconds(), OpsPerSec: float64(len(l)) / width.Seconds()}
		if len(l) > 0 {
			p.P50MS, p.P99MS = ms(quantile(l, .5)), ms(quantile(l, .99))
		}
		out = append(out, p)
	}
	return out
}

// quantile returns the q-quantile of sorted (nearest rank).
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// judge sets Held against a p99 limit (0: no limit).
func (res *Result) judge(p99Max time.Duration) {
	res.P99MaxMS = ms(p99Max)
	res.Held = res.Errors == 0 && len(res.Violations) == 0 && res.Cancelled == 0
	for _, s := range res.PerOp {
		if p99Max > 0 && s.P99MS > ms(p99Max) {
			res.Held = false
		}
	}
}

// Verdict says in words whether the replay held.
func (res *Result) Verdict() string {
	switch {
	case len(res.Violations) > 0:
		return fmt.Sprintf("BROKEN: %d invariant violations", len(res.Violations))
	case res.Errors > 0:
		return fmt.Sprintf("did not hold: %d errors", res.Errors)
	case !res.Held:
		return fmt.Sprintf("did not hold: a p99 above %.1f ms", res.P99MaxMS)
	}
	return "held"
}

func statusOf(s string) tandem.OutcomeStatus { return tandem.OutcomeStatus(s) }
