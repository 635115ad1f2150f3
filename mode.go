package tandem

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Mode is a pod's migration stage; it picks the source of truth (SoT), the
// store that answers the buyer, and the shadow, the store compared with it.
type Mode string

// The modes, in rollout order.
const (
	ModeRedis     Mode = "redis"      // Redis only (legacy)
	ModeShadow    Mode = "shadow"     // Redis answers, MySQL shadows
	ModeMySQL     Mode = "mysql"      // MySQL answers, Redis shadows
	ModeMySQLOnly Mode = "mysql_only" // MySQL only; Redis no longer written
)

// Valid reports whether m is one of the four modes.
func (m Mode) Valid() bool {
	switch m {
	case ModeRedis, ModeShadow, ModeMySQL, ModeMySQLOnly:
		return true
	}
	return false
}

// Effective returns the mode a pod runs in: while its kill switch is
// engaged, mysql serves as shadow (Redis answers). mysql_only cannot fall
// back, since its Redis is stale, and stays as it is.
func (m Mode) Effective(killed bool) Mode {
	if killed && m == ModeMySQL {
		return ModeShadow
	}
	return m
}

// SourceOfTruth returns the store that answers the buyer in mode m.
func (m Mode) SourceOfTruth() string {
	switch m {
	case ModeMySQL, ModeMySQLOnly:
		return StoreMySQL
	}
	return StoreRedis
}

// Shadow returns the store compared with the source of truth in mode m, or
// "" when there is none.
func (m Mode) Shadow() string {
	switch m {
	case ModeShadow:
		return StoreMySQL
	case ModeMySQL:
		return StoreRedis
	}
	return ""
}

// CanTransition reports whether a pod may go from one mode to
// another: redis<->shadow, shadow<->mysql, mysql->mysql_only and
// mysql_only->mysql (the latter only after a resync, checked by rollout).
func CanTransition(from, to Mode) bool {
	switch from {
	case ModeRedis:
		return to == ModeShadow
	case ModeShadow:
		return to == ModeRedis || to == ModeMySQL
	case ModeMySQL:
		return to == ModeShadow || to == ModeMySQLOnly
	case ModeMySQLOnly:
		return to == ModeMySQL
	}
	return false
}

// ShopSet is a set of shop ids given as ids and inclusive ranges.
type ShopSet struct {
	ranges [][2]int64 // sorted, disjoint
}

// ParseShopSet parses items such as "1", "7" and "100-199".
func ParseShopSet(items []string) (ShopSet, error) {
	var s ShopSet
	for _, it := range items {
		it = strings.TrimSpace(it)
		lo, hi, isRange := strings.Cut(it, "-")
		a, err := strconv.ParseInt(lo, 10, 64)
		if err != nil || a <= 0 {
			return ShopSet{}, fmt.Errorf("shop %q: want an id > 0 or a range lo-hi", it)
		}
		b := a
		if isRange {
			if b, err = strconv.ParseInt(hi, 10, 64); err != nil || b < a {
				return ShopSet{}, fmt.Errorf("shop range %q: want lo-hi with lo <= hi", it)
			}
		}
		s.ranges = append(s.ranges, [2]int64{a, b})
	}
	sort.Slice(s.ranges, func(i, j int) bool { return s.ranges[i][0] < s.ranges[j][0] })
	merged := s.ranges[:0]
	for _, r := range s.ranges {
		if n := len(merged); n > 0 && r[0] <= merged[n-1][1]+1 {
			merged[n-1][1] = max(merged[n-1][1], r[1])
			continue
		}
		merged = append(merged, r)
	}
	s.ranges = merged
	return s, nil
}

// Contains reports whether shop is in the set.
func (s ShopSet) Contains(shop int64) bool {
	i := sort.Search(len(s.ranges), func(i int) bool { return s.ranges[i][1] >= shop })
	return i < len(s.ranges) && s.ranges[i][0] <= shop
}

// Overlaps reports whether the sets share a shop.
func (s ShopSet) Overlaps(o ShopSet) bool {
	for _, a := range s.ranges {
		for _, b := range o.ranges {
			if a[0] <= b[1] && b[0] <= a[1] {
				return true
			}
		}
	}
	return false
}

// Size returns how many shops the set holds.
func (s ShopSet) Size() int64 {
	var n int64
	for _, r := range s.ranges {
		n += r[1] - r[0] + 1
	}
	return n
}

// String formats the set as "1-3,7".
func (s ShopSet) String() string {
	parts := make([]string, len(s.ranges))
	for i, r := range s.ranges {
		if r[0] == r[1] {
			parts[i] = strconv.FormatInt(r[0], 10)
		} else {
			parts[i] = fmt.Sprintf("%d-%d", r[0], r[1])
		}
	}
	return strings.Join(parts, ",")
}

// Pod is a shard of shops with its own MySQL and Redis, the unit of rollout.
type Pod struct {
	Name       string
	Shops      ShopSet
	Mode       Mode
	KillSwitch bool
	UpdatedAt  time.Time
}

// Effective returns the mode the pod runs in, given its kill switch.
func (p Pod) Effective() Mode { return p.Mode.Effective(p.KillSwitch) }
