package redisres

import (
	"context"
	"fmt"
	"time"

	"github.com/tandemhq/tandem"
)

var _ tandem.Discarder = (*Store)(nil)

// Discard implements tandem.Discarder: the router calls it on a shadow hold
// that the source of truth refused.
func (s *Store) Discard(ctx context.Context, shopID int64, token string) (err error) {
	defer s.observe("discard", time.Now(), &err)
	if err := validateCart(shopID, token); err != nil {
		return err
	}
	for attempt := 0; attempt < 3; attempt++ {
		c, err := s.readCart(ctx, shopID, token)
		if err != nil || c == nil {
			return err
		}
		lines, err := decodeLines(c.lines)
		if err != nil {
			return err
		}
		out, err := s.scripts.discard.Run(ctx, s.rdb, s.lineKeys(shopID, token, lines), token, c.lines).StringSlice()
		if err != nil {
			return translate("discard", err)
		}
		switch {
		case len(out) == 1 && out[0] == "stale":
			continue
		case len(out) == 1 && (out[0] == "discarded" || out[0] == "notfound"):
			return nil
		case len(out) == 1 && out[0] == "claimed":
			return tandem.Errorf(tandem.ECONFLICT, "cart %s is claimed and cannot be discarded", token)
		}
		return fmt.Errorf("redisres: unexpected discard answer %q", out)
	}
	return tandem.Errorf(tandem.EUNAVAILABLE, "cart %s kept changing during discard", token)
}
