package tandem

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// DivergencePosition is where a divergence happened, as the triage groups
// it: the shop and, when the outcomes name one, the first line's item and
// group (0 when unknown).
type DivergencePosition struct {
	ShopID  int64 `json:"shop_id"`
	ItemID  int64 `json:"inventory_item_id"`
	GroupID int64 `json:"group_id"`
}

// PositionOf returns where a divergence happened: a state_drift's drifted
// position, else the shop and the first line either outcome names (the
// source of truth's first).
func PositionOf(d Divergence) DivergencePosition {
	if d.Position != nil {
		return DivergencePosition{ShopID: d.Position.ShopID, ItemID: d.Position.ItemID, GroupID: d.Position.GroupID}
	}
	p := DivergencePosition{ShopID: d.ShopID}
	for _, o := range []Outcome{d.Primary, d.Shadow} {
		if len(o.Lines) > 0 {
			p.ItemID, p.GroupID = o.Lines[0].ItemID, o.Lines[0].GroupID
			break
		}
	}
	return p
}

// DivergenceGroup is the divergences of one pod, kind, op and position
// (GET /admin/divergences/summary).
type DivergenceGroup struct {
	Pod       string             `json:"pod"`
	Kind      DivergenceKind     `json:"kind"`
	Op        Op                 `json:"op"`
	Position  DivergencePosition `json:"position"`
	Count     int                `json:"count"`
	FirstSeen time.Time          `json:"first_seen"`
	LastSeen  time.Time          `json:"last_seen"`
	// Example is the group's newest divergence, with its explanation.
	Example ExplainedDivergence `json:"example"`
}

// ExplainedDivergence is a divergence with its one-line explanation, as the
// admin API serves it (the explanation is an extension of DIVERGENCE).
type ExplainedDivergence struct {
	Divergence
	Explanation string `json:"explanation"`
}

// Explain returns the divergence with its explanation.
func Explain(d Divergence) ExplainedDivergence {
	return ExplainedDivergence{Divergence: d, Explanation: Explanation(d)}
}

// GroupDivergences groups divergences by pod, kind, op and position, the
// largest groups first (then the most recently seen). Each group's example
// is its newest divergence.
func GroupDivergences(ds []Divergence) []DivergenceGroup {
	type key struct {
		pod  string
		kind DivergenceKind
		op   Op
		pos  DivergencePosition
	}
	idx := map[key]int{}
	var out []DivergenceGroup
	for _, d := range ds {
		k := key{d.Pod, d.Kind, d.Op, PositionOf(d)}
		i, ok := idx[k]
		if !ok {
			idx[k] = len(out)
			out = append(out, DivergenceGroup{Pod: d.Pod, Kind: d.Kind, Op: d.Op, Position: k.pos,
				FirstSeen: d.At, LastSeen: d.At, Example: Explain(d)})
			i = len(out) - 1
		}
		g := &out[i]
		g.Count++
		if d.At.Before(g.FirstSeen) {
			g.FirstSeen = d.At
		}
		if d.At.After(g.LastSeen) || (d.At.Equal(g.LastSeen) && d.ID > g.Example.ID) {
			g.LastSeen, g.Example = d.At, Explain(d)
		}
	}
	slices.SortStableFunc(out, func(a, b DivergenceGroup) int {
		if c := cmp.Compare(b.Count, a.Count); c != 0 {
			return c
		}
		return b.LastSeen.Compare(a.LastSeen)
	})
	if out == nil {
		out = []DivergenceGroup{}
	}
	return out
}

// Explanation says in one line, in the operator's words, what a divergence
// means: what each store answered, the source of truth first.
func Explanation(d Divergence) string {
	sot, shadow := d.Primary, d.Shadow
	switch d.Kind {
	case KindStateDrift:
		if d.Position != nil {
			return "state drift: " + DriftMessage(*d.Position)
		}
		if msg := cmp.Or(sot.Message, shadow.Message); msg != "" {
			return "state drift: " + msg
		}
		return fmt.Sprintf("state drift: %s %s, %s %s", sot.Store, sot.Status, shadow.Store, shadow.Status)
	case KindShadowTimeout:
		return fmt.Sprintf("%s gave no answer within shadow.timeout (its work may have landed); %s %s",
			storeName(shadow, "shadow"), storeName(sot, "source of truth"), answered(sot))
	case KindShadowDropped:
		return fmt.Sprintf("%s did not run it: the shadow's in-flight cap was reached (the cart is converged later); %s %s",
			storeName(shadow, "shadow"), storeName(sot, "source of truth"), answered(sot))
	case KindShadowError:
		return fmt.Sprintf("%s %s; %s %s", storeName(shadow, "shadow"), answered(shadow),
			storeName(sot, "source of truth"), answered(sot))
	case KindLocationMismatch:
		return fmt.Sprintf("both %s, from different groups: %s took %s, %s took %s", sot.Status,
			storeName(sot, "source of truth"), linesText(sot.Lines), storeName(shadow, "shadow"), linesText(shadow.Lines))
	}
	// outcome_mismatch, and any kind added later: the two answers side by side.
	return fmt.Sprintf("%s %s, but %s %s", storeName(sot, "source of truth"), answered(sot),
		storeName(shadow, "shadow"), answered(shadow))
}

func storeName(o Outcome, role string) string {
	if o.Store == "" {
		return role
	}
	return o.Store
}

// answered is what a store answered, in words: refused or failed with its
// code and message, or the status it reached.
func answered(o Outcome) string {
	var s string
	switch {
	case o.Status == "":
		s = "gave no answer"
	case o.Status == OutcomeTimeout:
		s = "timed out"
	case o.Status == OutcomeDropped:
		s = "did not run it"
	case o.Status == OutcomeSkipped:
		s = "skipped it"
	case o.StoreFailed():
		s = "failed (" + string(o.Status) + ")"
	case isErrorCode(o.Status):
		s = "refused (" + string(o.Status) + ")"
	default:
		s = string(o.Status)
		if len(o.Lines) > 0 {
			s += " " + linesText(o.Lines)
		}
	}
	if o.Replayed {
		s += " (replayed)"
	}
	if o.Message != "" {
		s += ": " + o.Message
	}
	return s
}

// isErrorCode reports whether a status is an error code: neither a
// reservation status nor one of the Outcome statuses.
func isErrorCode(s OutcomeStatus) bool {
	switch s {
	case StatusOf(StatusReserved), StatusOf(StatusClaimed), StatusOf(StatusReleased), StatusOf(StatusExpired),
		OutcomeOK, OutcomeTimeout, OutcomeDropped, OutcomeSkipped, OutcomeNoHold, OutcomeMissing:
		return false
	}
	return !strings.HasPrefix(string(s), "available=")
}

func linesText(ls []Line) string {
	if len(ls) == 0 {
		return "nothing"
	}
	parts := make([]string, len(ls))
	for i, l := range ls {
		parts[i] = fmt.Sprintf("%d x item %d group %d", l.Quantity, l.ItemID, l.GroupID)
	}
	return strings.Join(parts, ", ")
}
