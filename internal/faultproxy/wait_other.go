//go:build !linux

package faultproxy

import "time"

// preciseWaiter returns a function that sleeps until a deadline; outside
// Linux it is Go's timer, whose wake-up may come a millisecond late.
func preciseWaiter() func(until time.Time) {
	return func(until time.Time) {
		if d := time.Until(until); d > 0 {
			time.Sleep(d)
		}
	}
}
