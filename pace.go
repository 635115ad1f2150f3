package tandem

import (
	"context"
	"time"
)

type paceKey struct{}

// WithPace returns ctx asking the stores to spread the long reads made
// under it (the anti-entropy sweep's listing of every hold) so that they
// are busy at most duty of the wall time, 0 < duty <= 1: after each page
// the reader rests for as long as the page took times (1-duty)/duty. A
// read of every hold at once is a burst that the buyers served by the same
// servers and process wait behind; paced, it takes longer and they do not.
// A duty of 1 or more (or none at all) reads at full speed.
func WithPace(ctx context.Context, duty float64) context.Context {
	if duty <= 0 || duty >= 1 {
		return ctx
	}
	return context.WithValue(ctx, paceKey{}, duty)
}

// Paced reports whether ctx asks for paced reads (WithPace).
func Paced(ctx context.Context) bool {
	_, ok := ctx.Value(paceKey{}).(float64)
	return ok
}

// Pace is called by a store between the pages of a long read, with the
// time the page started: it rests as ctx's pace asks (WithPace), then asks
// ctx's throttle (WithThrottle) for the next page, and returns early with
// ctx's error if ctx ends meanwhile, or the throttle's when the pod's load
// is critical.
func Pace(ctx context.Context, pageStart time.Time) error {
	if err := rest(ctx, pageStart); err != nil {
		return err
	}
	return WaitThrottle(ctx)
}

func rest(ctx context.Context, pageStart time.Time) error {
	duty, ok := ctx.Value(paceKey{}).(float64)
	if !ok {
		return nil
	}
	rest := time.Duration(float64(time.Since(pageStart)) * (1 - duty) / duty)
	if rest <= 0 {
		return nil
	}
	t := time.NewTimer(rest)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
