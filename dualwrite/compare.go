package dualwrite

import (
	"fmt"
	"strings"

	"github.com/tandemhq/tandem"
)

// The comparison of a dual-written operation: the SoT's and the shadow's
// outcomes, classified as a match or a divergence kind and handed to the
// Recorder.

func (r *Router) record(mode tandem.Mode, op tandem.Op, shopID int64, token string, primary, shadow tandem.Outcome, timedOut bool, v verdict) {
	if r.Recorder == nil {
		return
	}
	r.Recorder.Record(r.comparison(mode, op, shopID, token, primary, shadow, timedOut, v))
}

// recordSoTFailure records an operation the SoT failed (unavailable or
// internal) as a comparison without a divergence: the shadow was not asked,
// and the comparator counts it among the SoT's errors.
func (r *Router) recordSoTFailure(o *op, op tandem.Op, p tandem.Outcome) {
	if r.Recorder == nil {
		return
	}
	r.Recorder.Record(tandem.Comparison{
		At: r.Now(), Pod: r.Pod, Op: op, ShopID: o.ck.shop, CartToken: o.ck.token,
		SourceOfTruth: o.mode.SourceOfTruth(), Primary: p,
		Shadow: tandem.Outcome{Store: o.shadow.Name(), Status: tandem.OutcomeSkipped},
	})
}

// comparison is one comparison as recorded: a match when the answers
// agreed or their difference was contention (v), else its divergence,
// with the drift that explains it, if any.
func (r *Router) comparison(mode tandem.Mode, op tandem.Op, shopID int64, token string, primary, shadow tandem.Outcome, timedOut bool, v verdict) tandem.Comparison {
	var kind tandem.DivergenceKind
	if !v.contention {
		kind = Classify(primary, shadow, timedOut)
	}
	if kind != "" && len(v.drift) > 0 {
		shadow.Message = strings.TrimPrefix(shadow.Message+"; ", "; ") + "not contention: " + driftCauses(v.drift)
	}
	return tandem.Comparison{
		At: r.Now(), Pod: r.Pod, Op: op, ShopID: shopID, CartToken: token,
		SourceOfTruth: mode.SourceOfTruth(), Primary: primary, Shadow: shadow,
		Kind: kind, Contention: v.contention, Repaired: v.contention, Drift: v.drift,
	}
}

// driftCauses lists the drifted positions and their causes in words.
func driftCauses(drift []tandem.Drift) string {
	parts := make([]string, len(drift))
	for i, d := range drift {
		parts[i] = fmt.Sprintf("item %d group %d drifted (%s)", d.ItemID, d.GroupID, d.Cause)
	}
	return strings.Join(parts, ", ")
}

// Classify returns "" when the shadow reached the primary's outcome, else
// the divergence kind.
func Classify(primary, shadow tandem.Outcome, timedOut bool) tandem.DivergenceKind {
	switch {
	case shadow.Status == tandem.OutcomeDropped:
		return tandem.KindShadowDropped
	case timedOut || shadow.Status == tandem.OutcomeTimeout:
		return tandem.KindShadowTimeout
	case shadow.Status == tandem.EUNAVAILABLE || shadow.Status == tandem.EINTERNAL:
		return tandem.KindShadowError
	case primary.Status != shadow.Status:
		return tandem.KindOutcomeMismatch
	case !sameLines(primary.Lines, shadow.Lines):
		return tandem.KindLocationMismatch
	}
	return ""
}

func sameLines(a, b []tandem.Line) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
