package comparator

import (
	"time"

	"github.com/tandemhq/tandem"
)

// The automatic abort's recent window, and Reset. The abort judges the
// last AbortWindow (a minute by default) rather than the gates' window:
// a pod re-killed on a rate of fifteen minutes ago could never be
// unkilled. After an unkill (Reset) only what comes next counts.

// recentSlice counts one slice of the recent window.
type recentSlice struct {
	used        bool
	index       int64
	comparisons int64
	divergences int64
	mysqlErrors int64
}

// resetMark is a pod's last Reset: when, the bucket it fell in and what
// that bucket held before it.
type resetMark struct {
	at     time.Time
	index  int64
	before counts
}

// mysqlFailed reports whether MySQL failed in cmp: as source of truth
// (unavailable, internal), or as shadow (an error or a timeout).
func mysqlFailed(cmp tandem.Comparison) bool {
	if cmp.Primary.Store == tandem.StoreMySQL && cmp.Primary.StoreFailed() {
		return true
	}
	return cmp.Shadow.Store == tandem.StoreMySQL && (cmp.Kind == tandem.KindShadowError || cmp.Kind == tandem.KindShadowTimeout)
}

func (c *Comparator) sliceWidth() time.Duration {
	return max(c.cfg.AbortWindow/abortSlices, time.Millisecond)
}

func (c *Comparator) sliceIndex(t time.Time) int64 {
	return t.UnixNano() / int64(c.sliceWidth())
}

// recordRecent counts one comparison in the recent slice index (under p.mu).
func (p *podCounts) recordRecent(index int64, diverged, mysqlError bool) {
	if p.recent == nil {
		p.recent = make([]recentSlice, abortSlices)
	}
	s := &p.recent[int(index%abortSlices)]
	if !s.used || s.index != index {
		*s = recentSlice{used: true, index: index}
	}
	s.comparisons++
	if diverged {
		s.divergences++
	}
	if mysqlError {
		s.mysqlErrors++
	}
	if diverged || mysqlError {
		p.bad++
	}
}

// Reset makes pod's GateStats, ErrorStats and AbortStats count only the
// comparisons recorded after it: the rollout controller calls it when the
// pod's kill switch is disengaged, so that an unkill is judged on what
// MySQL does from then on, not on what got the pod killed. Report keeps
// the whole window.
func (c *Comparator) Reset(pod string) {
	now := c.cfg.Now()
	p := c.pod(pod)
	p.mu.Lock()
	defer p.mu.Unlock()
	idx := c.bucketIndex(now)
	r := &resetMark{at: now, index: idx}
	if b := &p.buckets[int(idx%int64(c.nBuckets))]; b.used && b.index == idx {
		r.before = b.counts
	}
	p.reset = r
	p.recent = nil
	p.bad = 0
}

// AbortStats returns pod's comparisons in the recent window (AbortWindow
// ending now) recorded after its last Reset.
func (c *Comparator) AbortStats(pod string) tandem.RecentComparisons {
	out := tandem.RecentComparisons{Window: c.cfg.AbortWindow}
	p := c.lookup(pod)
	if p == nil {
		return out
	}
	now := c.sliceIndex(c.cfg.Now())
	oldest := now - abortSlices + 1
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reset != nil {
		out.Since = p.reset.at
	}
	out.Bad = p.bad
	for _, s := range p.recent {
		if !s.used || s.index < oldest || s.index > now {
			continue
		}
		out.Comparisons += s.comparisons
		out.Divergences += s.divergences
		out.MySQLErrors += s.mysqlErrors
	}
	return out
}
