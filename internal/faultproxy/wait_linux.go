package faultproxy

import (
	"runtime"
	"syscall"
	"time"
)

// prSetTimerSlack is prctl's PR_SET_TIMERSLACK.
const prSetTimerSlack = 29

// preciseWaiter returns a function that sleeps until a deadline with the
// kernel's high-resolution timers, within tens of microseconds.
//
// Go's own timers (time.Sleep, time.Timer) wake through the runtime's
// network poller, whose epoll wait has a millisecond resolution: a 0.5 ms
// sleep lasts 1.1 ms or more, which made the proxy add 1.2 ms each way when
// asked for 0.5 ms. Spinning for the last part of the delay would be
// exact, but it burns a CPU for as long as a chunk waits, which on a small
// machine takes the CPU from the servers being measured. So the waiting
// goroutine locks its OS thread, lowers that thread's timer slack from the
// default 50 µs to 1 ns, and sleeps in nanosleep: a blocking system call
// that costs the thread, not a CPU. The thread is never unlocked, so it
// ends with the goroutine and no other goroutine inherits its slack.
func preciseWaiter() func(until time.Time) {
	runtime.LockOSThread()
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetTimerSlack, 1, 0)
	return func(until time.Time) {
		for {
			d := time.Until(until)
			if d <= 0 {
				return
			}
			ts := syscall.NsecToTimespec(int64(d))
			_ = syscall.Nanosleep(&ts, nil) // EINTR: the loop sleeps the rest
		}
	}
}
