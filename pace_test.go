package tandem_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tandemhq/tandem"
)

// TestPace checks, on synctest's clock, that a paced reader rests after a
// page for the page's time times (1-duty)/duty, that an unpaced one never
// rests, and that a rest ends with the context.
func TestPace(t *testing.T) {
	for _, tc := range []struct {
		name string
		duty float64
		page time.Duration
		want time.Duration
	}{
		{"Quarter", 0.25, 40 * time.Millisecond, 120 * time.Millisecond},
		{"Half", 0.5, 40 * time.Millisecond, 40 * time.Millisecond},
		{"FullSpeed", 1, 40 * time.Millisecond, 0},
		{"NoPace", 0, 40 * time.Millisecond, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := tandem.WithPace(context.Background(), tc.duty)
				if got := tandem.Paced(ctx); got != (tc.want > 0) {
					t.Fatalf("Paced = %v", got)
				}
				start := time.Now()
				time.Sleep(tc.page) // the page's work
				rested := time.Now()
				if err := tandem.Pace(ctx, start); err != nil {
					t.Fatal(err)
				}
				if got := time.Since(rested); got != tc.want {
					t.Fatalf("rested %v after a page of %v, want %v", got, tc.page, tc.want)
				}
			})
		})
	}
	t.Run("EndsWithTheContext", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(tandem.WithPace(context.Background(), 0.1), 100*time.Millisecond)
			defer cancel()
			start := time.Now()
			time.Sleep(40 * time.Millisecond) // a page of 40 ms asks for a rest of 360 ms
			if err := tandem.Pace(ctx, start); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("got %v, want the context's deadline", err)
			}
			if got := time.Since(start); got != 100*time.Millisecond {
				t.Fatalf("the rest ended %v after the page began, want at the deadline (100ms)", got)
			}
		})
	})
}
