package redisres

import (
	"context"
	"fmt"
	"sort"
	"strconv"

	"github.com/tandemhq/tandem"
)

// counter is a counter hash; ok is false when Redis has no such key.
// claiming is read by the audit only.
type counter struct {
	available, held, onHand, claiming int64
	ok                                bool
}

// parseCounter parses an HMGET of available, held, on_hand and, when
// asked for, claiming.
func parseCounter(vals []any) (counter, error) {
	var c counter
	for i, p := range []*int64{&c.available, &c.held, &c.onHand, &c.claiming}[:len(vals)] {
		s, isStr := vals[i].(string)
		if !isStr {
			continue
		}
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return counter{}, fmt.Errorf("redisres: bad counter field %q: %w", s, err)
		}
		*p = v
		c.ok = true
	}
	return c, nil
}

func (c counter) counters(k tandem.Key) tandem.Counters {
	return tandem.Counters{Key: k, OnHand: c.available + c.held, Reserved: c.held, Available: c.available}
}

func validateKey(k tandem.Key) error {
	if k.ShopID <= 0 || k.ItemID <= 0 || k.GroupID <= 0 {
		return tandem.Errorf(tandem.EINVALID, "shop_id, inventory_item_id and group_id must be integers > 0")
	}
	return nil
}

// shops returns every shop the store has counters for, ascending.
func (s *Store) shops(ctx context.Context) ([]int64, error) {
	members, err := s.rdb.SMembers(ctx, s.shopsKey()).Result()
	if err != nil {
		return nil, translate("list shops", err)
	}
	ids := make([]int64, 0, len(members))
	for _, m := range members {
		id, err := strconv.ParseInt(m, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("redisres: bad shop id %q: %w", m, err)
		}
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids, nil
}

func sortKeys(keys []tandem.Key) {
	sort.Slice(keys, func(i, j int) bool { return keyLess(keys[i], keys[j]) })
}

func keyLess(a, b tandem.Key) bool {
	if a.ShopID != b.ShopID {
		return a.ShopID < b.ShopID
	}
	if a.ItemID != b.ItemID {
		return a.ItemID < b.ItemID
	}
	return a.GroupID < b.GroupID
}
