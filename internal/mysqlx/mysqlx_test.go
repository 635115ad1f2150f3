package mysqlx_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/internal/mysqlx"
)

func TestRetry(t *testing.T) {
	deadlock := &mysql.MySQLError{Number: mysqlx.ErrDeadlock, Message: "Deadlock found"}

	t.Run("RerunsRetryableUpToMaxAttempts", func(t *testing.T) {
		var calls, told int
		err := mysqlx.Retry(context.Background(), func() error { calls++; return deadlock }, func(int, error) { told++ })
		if !errors.Is(err, deadlock) || calls != mysqlx.MaxAttempts || told != mysqlx.MaxAttempts-1 {
			t.Errorf("got %v after %d calls, %d retries told, want the deadlock after %d calls", err, calls, told, mysqlx.MaxAttempts)
		}
	})

	t.Run("StopsAtSuccess", func(t *testing.T) {
		calls := 0
		err := mysqlx.Retry(context.Background(), func() error {
			calls++
			if calls == 1 {
				return fmt.Errorf("insert: %w", mysqlx.ErrRetry)
			}
			return nil
		}, nil)
		if err != nil || calls != 2 {
			t.Errorf("got %v after %d calls, want nil after 2", err, calls)
		}
	})

	t.Run("StopsAtOtherErrors", func(t *testing.T) {
		calls := 0
		other := errors.New("syntax error")
		err := mysqlx.Retry(context.Background(), func() error { calls++; return other }, nil)
		if !errors.Is(err, other) || calls != 1 {
			t.Errorf("got %v after %d calls, want the error after 1", err, calls)
		}
	})

	t.Run("IdempotentRerunsALostConnectionOnce", func(t *testing.T) {
		for _, lost := range []error{mysql.ErrInvalidConn, fmt.Errorf("write: %w", syscall.ECONNRESET), io.ErrUnexpectedEOF} {
			calls := 0
			err := mysqlx.RetryIdempotent(context.Background(), func() error {
				calls++
				if calls == 1 {
					return lost
				}
				return nil
			}, nil)
			if err != nil || calls != 2 {
				t.Errorf("%v: got %v after %d calls, want nil after 2", lost, err, calls)
			}
			calls = 0
			err = mysqlx.RetryIdempotent(context.Background(), func() error { calls++; return lost }, nil)
			if !errors.Is(err, lost) || calls != 2 {
				t.Errorf("%v twice: got %v after %d calls, want it after 2", lost, err, calls)
			}
			calls = 0
			err = mysqlx.Retry(context.Background(), func() error { calls++; return lost }, nil)
			if !errors.Is(err, lost) || calls != 1 {
				t.Errorf("%v without RetryIdempotent: got %v after %d calls, want it after 1", lost, err, calls)
			}
		}
		calls := 0
		refused := fmt.Errorf("dial: %w", syscall.ECONNREFUSED)
		if err := mysqlx.RetryIdempotent(context.Background(), func() error { calls++; return refused }, nil); !errors.Is(err, refused) || calls != 1 {
			t.Errorf("refused: got %v after %d calls, want it after 1", err, calls)
		}
	})

	t.Run("HonoursContext", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		calls := 0
		err := mysqlx.Retry(ctx, func() error { calls++; cancel(); return deadlock }, nil)
		if !errors.Is(err, context.Canceled) || calls != 1 {
			t.Errorf("got %v after %d calls, want context.Canceled after 1", err, calls)
		}
	})
}

func TestTranslate(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		code string
	}{
		{"Nil", nil, ""},
		{"LockContention", &mysql.MySQLError{Number: mysqlx.ErrLockWaitTimeout}, tandem.EUNAVAILABLE},
		{"Deadline", fmt.Errorf("read: %w", context.DeadlineExceeded), tandem.EUNAVAILABLE},
		{"BadConnection", mysql.ErrInvalidConn, tandem.EUNAVAILABLE},
		{"ContractError", tandem.Errorf(tandem.ECONFLICT, "changed meanwhile"), tandem.ECONFLICT},
		{"Other", &mysql.MySQLError{Number: 1064, Message: "syntax"}, tandem.EINTERNAL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := mysqlx.Translate("test", tc.err)
			if tc.err == nil {
				if err != nil {
					t.Errorf("got %v, want nil", err)
				}
				return
			}
			if got := tandem.ErrorCode(err); got != tc.code {
				t.Errorf("got code %s (%v), want %s", got, err, tc.code)
			}
		})
	}
}
