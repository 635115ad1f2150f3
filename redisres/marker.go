package redisres

import (
	"context"
	"time"

	"github.com/tandemhq/tandem"
)

// The whole marker. A Redis that restarts without persistence, or is
// flushed, loses its counters and holds without a word: a missing counter
// reads as zero available. The store keeps one key, written once its data
// is known whole (by a rebuild from MySQL, or once its counts were found to
// agree with the ledger), that goes with the data: its absence is the
// cheap sign that the data may be gone, which the router then confirms
// against the ledger.

// wholeKey is the marker's key.
func (s *Store) wholeKey() string { return s.Prefix + "whole" }

// Marked reports whether the store's whole marker is present.
func (s *Store) Marked(ctx context.Context) (bool, error) {
	n, err := s.rdb.Exists(ctx, s.wholeKey()).Result()
	if err != nil {
		return false, translate("read the whole marker", err)
	}
	return n == 1, nil
}

// Mark writes the store's whole marker (its value is when).
func (s *Store) Mark(ctx context.Context) error {
	if err := s.rdb.Set(ctx, s.wholeKey(), s.Now().UTC().Format(time.RFC3339Nano), 0).Err(); err != nil {
		return translate("write the whole marker", err)
	}
	return nil
}

// shopsOnHand returns the ledger's on_hand of the positions of the shops
// of only.
func (s *Store) shopsOnHand(ctx context.Context, only map[int64]bool) (map[tandem.Key]int64, error) {
	all, err := s.ledger.ListOnHand(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[tandem.Key]int64)
	for k, v := range all {
		if only[k.ShopID] {
			out[k] = v
		}
	}
	return out, nil
}
