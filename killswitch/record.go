package killswitch

import (
	"context"
	"time"

	"github.com/tandemhq/tandem"
)

// Record is one copy of the kill-switch state. The Switch keeps two: the
// control Redis (the Channel, which also fans changes out) and the control
// MySQL (Durable). A pod is engaged when either copy says so, so that the
// switch survives the loss of one copy and only ever errs toward Redis.
type Record interface {
	// Engage marks each entry's pod engaged, keeping the entry (when, who,
	// why) of a pod that already is.
	Engage(ctx context.Context, entries []tandem.AuditLogEntry) error
	// Disengage clears the pods and remembers that they were cleared at
	// at, so that a stale copy of an older engagement is never written
	// back over the disengagement.
	Disengage(ctx context.Context, pods []string, at time.Time) error
	// Load returns the entry that engaged each engaged pod, and when each
	// pod was last cleared (missing: never, or the copy lost that memory).
	Load(ctx context.Context) (engaged []tandem.AuditLogEntry, cleared map[string]time.Time, err error)
	// Restore writes back entries this copy lost (a Redis restart or
	// FLUSHDB, an engagement made while it could not be reached): each
	// entry's pod is engaged unless it already is or was cleared at or
	// after the entry's At.
	Restore(ctx context.Context, entries []tandem.AuditLogEntry) error
}

// RecordState is what one Record holds.
type RecordState struct {
	// Engaged holds, per engaged pod, the entry that engaged it.
	Engaged map[string]tandem.AuditLogEntry
	// Cleared holds, per pod, when it was last disengaged; a pod missing
	// here was never disengaged, or the copy lost that memory.
	Cleared map[string]time.Time
}

// load reads rec into a RecordState.
func load(ctx context.Context, rec Record) (RecordState, error) {
	engaged, cleared, err := rec.Load(ctx)
	if err != nil {
		return RecordState{}, err
	}
	st := RecordState{Engaged: make(map[string]tandem.AuditLogEntry, len(engaged)), Cleared: cleared}
	for _, e := range engaged {
		st.Engaged[e.Pod] = e
	}
	return st, nil
}

// view is what this instance knows of one Record: the last state it read,
// and the engagements it found missing without a disengagement (lost
// data), which it keeps engaged and writes back.
type view struct {
	engaged map[string]tandem.AuditLogEntry
}

// clearedSince reports whether the state cleared pod at or after at.
func (st RecordState) clearedSince(pod string, at time.Time) bool {
	c, ok := st.Cleared[pod]
	return ok && !c.Before(at)
}

// next returns the view after a successful read of st: the pods st says
// engaged, plus those the old view held that st lost (missing, with no
// disengagement since their engagement in st or in other, the other copy
// when it was read). lost lists the latter.
func (v view) next(st RecordState, other *RecordState) (view, []tandem.AuditLogEntry) {
	out := view{engaged: make(map[string]tandem.AuditLogEntry, len(st.Engaged))}
	for pod, e := range st.Engaged {
		out.engaged[pod] = e
	}
	var lost []tandem.AuditLogEntry
	for pod, e := range v.engaged {
		if _, ok := out.engaged[pod]; ok || st.clearedSince(pod, e.At) || other != nil && other.clearedSince(pod, e.At) {
			continue
		}
		out.engaged[pod] = e
		lost = append(lost, e)
	}
	return out, lost
}

// union returns the engaged pods of both views, with the earliest entry of
// a pod both hold.
func union(a, b view) map[string]tandem.AuditLogEntry {
	out := make(map[string]tandem.AuditLogEntry, len(a.engaged)+len(b.engaged))
	for _, v := range []view{a, b} {
		for pod, e := range v.engaged {
			if old, ok := out[pod]; !ok || e.At.Before(old.At) {
				out[pod] = e
			}
		}
	}
	return out
}

// missing returns the engaged entries, engaged before before, that st does
// not hold and has not cleared since: what a Restore of that copy must
// write back.
func missing(engaged map[string]tandem.AuditLogEntry, st RecordState, before time.Time) []tandem.AuditLogEntry {
	var out []tandem.AuditLogEntry
	for pod, e := range engaged {
		if _, ok := st.Engaged[pod]; ok || st.clearedSince(pod, e.At) || e.At.After(before) {
			continue
		}
		out = append(out, e)
	}
	return out
}

// with returns the view with entries engaged, keeping the entry of a pod
// already engaged.
func (v view) with(entries []tandem.AuditLogEntry) view {
	out := view{engaged: make(map[string]tandem.AuditLogEntry, len(v.engaged)+len(entries))}
	for pod, e := range v.engaged {
		out.engaged[pod] = e
	}
	for _, e := range entries {
		if _, ok := out.engaged[e.Pod]; !ok {
			out.engaged[e.Pod] = e
		}
	}
	return out
}

// without returns the view with pods cleared.
func (v view) without(pods []string) view {
	out := view{engaged: make(map[string]tandem.AuditLogEntry, len(v.engaged))}
	for pod, e := range v.engaged {
		out.engaged[pod] = e
	}
	for _, p := range pods {
		delete(out.engaged, p)
	}
	return out
}
