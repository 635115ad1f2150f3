package mysqlres

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// TestAdmission_FirstInFirstOut queues flows behind a full admission one at
// a time and checks that freed slots go to them in arrival order, and that
// a newcomer never passes the queue.
func TestAdmission_FirstInFirstOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newAdmission(2)
		ctx := context.Background()
		for range 2 {
			if _, err := a.enter(ctx); err != nil {
				t.Fatal(err)
			}
		}
		const waiters = 8
		admitted := make(chan int, waiters+1)
		for i := range waiters {
			go func() {
				if _, err := a.enter(ctx); err != nil {
					t.Error(err)
					return
				}
				admitted <- i
			}()
			synctest.Wait() // waiter i is queued before i+1 arrives
		}
		for want := range waiters {
			a.leave()
			synctest.Wait()
			if want == 3 {
				// A newcomer finds every slot taken while others queue.
				if _, err := tryEnter(a); err == nil {
					t.Fatal("a newcomer entered ahead of the queue")
				}
			}
			select {
			case got := <-admitted:
				if got != want {
					t.Fatalf("slot %d went to waiter %d, want %d (first in, first out)", want, got, want)
				}
			default:
				t.Fatalf("a freed slot went to nobody (waiter %d still queued)", want)
			}
		}
	})
}

// TestAdmission_GiveUp checks that a flow whose context ends while it
// queues leaves the queue without a slot, and that the slots it never took
// still serve the next flow.
func TestAdmission_GiveUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newAdmission(1)
		if _, err := a.enter(context.Background()); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := a.enter(ctx)
			done <- err
		}()
		synctest.Wait()
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want context.Canceled", err)
		}
		a.leave()
		if _, err := tryEnter(a); err != nil {
			t.Fatalf("the freed slot is lost: %v", err)
		}
		if len(a) != 1 {
			t.Fatalf("%d slots taken, want 1", len(a))
		}
	})
}

// tryEnter enters a without waiting: with its context already ended, enter
// takes a free slot or gives up at once.
func tryEnter(a admission) (time.Duration, error) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return a.enter(ctx)
}
