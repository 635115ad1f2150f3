package redisres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/tandemhq/tandem"
)

// Counters implements tandem.ReservationStore: OnHand is available + held as
// Redis sees them; a key Redis does not have is all zeros.
func (s *Store) Counters(ctx context.Context, key tandem.Key) (res *tandem.Counters, err error) {
	defer s.observe("counters", time.Now(), &err)
	if err := validateKey(key); err != nil {
		return nil, err
	}
	vals, err := s.rdb.HMGet(ctx, s.counterKey(key), "available", "held", "on_hand").Result()
	if err != nil {
		return nil, translate("counters", err)
	}
	c, err := parseCounter(vals)
	if err != nil {
		return nil, err
	}
	out := c.counters(key)
	return &out, nil
}

// Records implements tandem.Recounter: the counter hash's available, held
// and recorded on_hand, read in one HMGET.
func (s *Store) Records(ctx context.Context, key tandem.Key) (res *tandem.Records, err error) {
	defer s.observe("records", time.Now(), &err)
	if err := validateKey(key); err != nil {
		return nil, err
	}
	vals, err := s.rdb.HMGet(ctx, s.counterKey(key), "available", "held", "on_hand").Result()
	if err != nil {
		return nil, translate("records", err)
	}
	c, err := parseCounter(vals)
	if err != nil {
		return nil, err
	}
	return &tandem.Records{Counters: c.counters(key), Sellable: c.onHand - c.held}, nil
}

// Repair implements tandem.Recounter: available set again from the
// counter's own on_hand and held, in one script.
func (s *Store) Repair(ctx context.Context, key tandem.Key) (res *tandem.Records, err error) {
	defer s.observe("repair", time.Now(), &err)
	if err := validateKey(key); err != nil {
		return nil, err
	}
	out, err := s.scripts.repair.Run(ctx, s.rdb, []string{s.counterKey(key)}).StringSlice()
	if err != nil {
		return nil, translate("repair", err)
	}
	if len(out) != 3 {
		return nil, tandem.Errorf(tandem.EUNAVAILABLE, "redis has no counter for %s: resync it from MySQL", key)
	}
	a, err1 := strconv.ParseInt(out[0], 10, 64)
	h, err2 := strconv.ParseInt(out[1], 10, 64)
	o, err3 := strconv.ParseInt(out[2], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, fmt.Errorf("redisres: repair answer %q: %w", out, err)
	}
	return &tandem.Records{Counters: tandem.Counters{Key: key, OnHand: a + h, Reserved: h, Available: a}, Sellable: o - h}, nil
}

// SetOnHand implements tandem.ReservationStore: in one script it refuses a
// count below what Redis holds or sets available = on_hand - held, then it
// writes the ledger (see the package doc for the window in between).
func (s *Store) SetOnHand(ctx context.Context, key tandem.Key, onHand int64) (res *tandem.Counters, err error) {
	defer s.observe("set_on_hand", time.Now(), &err)
	if err := validateKey(key); err != nil {
		return nil, err
	}
	if onHand < 0 || onHand > tandem.MaxOnHand {
		return nil, tandem.Errorf(tandem.EINVALID, "on_hand must be 0..%d", tandem.MaxOnHand)
	}
	if err := s.rdb.SAdd(ctx, s.shopsKey(), key.ShopID).Err(); err != nil {
		return nil, translate("set on_hand", err)
	}
	// Redis first, checked and set in one script, so that no reserve can
	// slip between the check and the update; then the ledger. Should the
	// ledger write fail, or the script's answer be lost (a read timeout:
	// it may have run), Redis is put back to the count the ledger still
	// has: the legacy two-system window is that short compensation, which
	// the drift audit covers.
	c, prev, err := s.applyOnHand(ctx, key, onHand)
	if err != nil {
		if tandem.ErrorCode(err) != tandem.ECONFLICT {
			s.putBack(ctx, key, onHand, "")
		}
		return nil, err
	}
	if err := s.ledger.SetOnHand(ctx, key, onHand); err != nil {
		s.putBack(ctx, key, onHand, prev)
		return nil, fmt.Errorf("%w: %w", tandem.Errorf(tandem.EUNAVAILABLE, "the inventory ledger is unavailable"), err)
	}
	c.Before, _ = strconv.ParseInt(prev, 10, 64)
	return c, nil
}

// putBackAttempts and putBackTimeout bound the compensation of a stock
// count that did not reach the ledger (each attempt is an absolute set,
// safe to repeat): a Redis that does not answer still gets its caller a
// fast 503.
const (
	putBackAttempts = 3
	putBackTimeout  = time.Second
)

// putBack sets Redis's on_hand for key back to the ledger's after a stock
// count that may have reached Redis but not the ledger (its write failed,
// or the script's answer was lost and it was never sent), or to prev, the
// count Redis had, when the ledger cannot be read. A legacy claim between
// its ledger step and its Redis step then leaves Redis a few units short
// (undersell) until the next count or the sweep's recount; one that lands
// between the ledger's read and the put-back makes it read again (the
// counter's seq), or Redis would get back units the claim sold. When Redis
// cannot be put back, it may count units the ledger does not have: the
// window is counted and logged, and the drift audit flags the position.
func (s *Store) putBack(ctx context.Context, key tandem.Key, onHand int64, prev string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), putBackTimeout)
	defer cancel()
	var err error
	for range putBackAttempts {
		// As a recount: the counter's seq, then the ledger, and the
		// counter set only if its on_hand did not move in between (a
		// claim that landed meanwhile, or the count's own script, run
		// late); then the next attempt reads both again.
		var seq string
		if seq, err = s.counterSeq(ctx, key); err != nil {
			continue
		} else if seq == "" {
			return // no counter: the count never reached Redis
		}
		was, lerr := s.ledger.OnHand(ctx, key)
		if err = lerr; err != nil && prev != "" {
			was, err = strconv.ParseInt(prev, 10, 64)
		}
		if err != nil {
			continue
		}
		if _, err = s.recountTo(ctx, key, was, seq, true); err == nil {
			return
		}
	}
	s.countWindow("set_on_hand")
	s.Logger.Warn("stock count may have reached Redis but not the ledger, and Redis could not be put back; the drift audit will flag it",
		zap.Stringer("key", key), zap.Int64("on_hand", onHand), zap.Error(err))
}

// applyOnHand runs the set-on-hand script: it refuses (ECONFLICT, nothing
// changed) an on_hand below what Redis holds. It returns the counters and
// the previous on_hand ("" when the position was new).
func (s *Store) applyOnHand(ctx context.Context, key tandem.Key, onHand int64) (*tandem.Counters, string, error) {
	keys := []string{s.counterKey(key), s.positionsKey(key.ShopID)}
	out, err := s.scripts.setOnHand.Run(ctx, s.rdb, keys, onHand, positionMember(key)).StringSlice()
	if err != nil {
		return nil, "", translate("set on_hand", err)
	}
	if len(out) == 2 && out[0] == "conflict" {
		return nil, "", tandem.Errorf(tandem.ECONFLICT, "on_hand %d is below the %s units held for %s", onHand, out[1], key)
	}
	return countersAnswer(key, "set on_hand", out)
}

// countersAnswer parses a script's {held, available, previous on_hand}.
func countersAnswer(key tandem.Key, op string, out []string) (*tandem.Counters, string, error) {
	if len(out) != 3 {
		return nil, "", fmt.Errorf("redisres: unexpected %s answer %q", op, out)
	}
	h, err1 := strconv.ParseInt(out[0], 10, 64)
	a, err2 := strconv.ParseInt(out[1], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return nil, "", fmt.Errorf("redisres: %s answer %q: %w", op, out, err)
	}
	return &tandem.Counters{Key: key, OnHand: a + h, Reserved: h, Available: a}, out[2], nil
}
