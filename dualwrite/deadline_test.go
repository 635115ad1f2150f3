package dualwrite

import (
	"context"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
)

// socketDeadline is a context whose deadline has passed while its own timer
// has not marked it done yet: what a shadow call sees when the MySQL
// driver's socket deadline fires first.
type socketDeadline struct {
	context.Context
	deadline time.Time
}

func (c socketDeadline) Deadline() (time.Time, bool) { return c.deadline, true }
func (c socketDeadline) Err() error                  { return nil }

func TestPastDeadline(t *testing.T) {
	unavailable := tandem.Errorf(tandem.EUNAVAILABLE, "mysql is unavailable: connection failed")
	now := time.Now()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		err  error
		want bool
	}{
		{"Succeeded", socketDeadline{context.Background(), now.Add(-time.Millisecond)}, nil, false},
		{"FailedBeforeTheDeadline", socketDeadline{context.Background(), now.Add(time.Hour)}, unavailable, false},
		{"SocketDeadlineFirst", socketDeadline{context.Background(), now.Add(-time.Millisecond)}, unavailable, true},
		{"ContextDeadline", context.Background(), context.DeadlineExceeded, true},
		{"NoDeadline", context.Background(), unavailable, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := pastDeadline(tc.ctx, tc.err); got != tc.want {
				t.Errorf("pastDeadline = %v, want %v", got, tc.want)
			}
		})
	}
}
