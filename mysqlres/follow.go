package mysqlres

import (
	"context"

	"github.com/tandemhq/tandem"
)

var _ tandem.Follower = (*Store)(nil)

// FollowOnHand implements tandem.Follower. The ledger is this store's own
// table: the source of truth's write (Ledger.SetOnHand) already moved the
// unpooled count in the same transaction, so following is reading back,
// and a conflict is a position whose holds exceed the new on_hand. delta is
// not needed: the count is the ledger's own.
func (s *Store) FollowOnHand(ctx context.Context, key tandem.Key, onHand, delta int64) (*tandem.Counters, error) {
	c, err := s.Counters(ctx, key)
	if err != nil {
		return nil, err
	}
	if c.Reserved > c.OnHand {
		return c, tandem.Errorf(tandem.ECONFLICT, "MySQL holds %d units of %s, more than on_hand %d", c.Reserved, key, c.OnHand)
	}
	return c, nil
}
