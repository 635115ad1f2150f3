//go:build unix

package web_test

import (
	"syscall"
	"testing"
	"time"
)

// reportCPU reports the process's CPU time per operation (getrusage: user
// + system, GC included) beside ns/op: on a machine shared with other work
// the wall time per op moves with the machine's load, the CPU time much
// less. Call it as `defer reportCPU(b)()` before the loop.
func reportCPU(b *testing.B) func() {
	cpu := func() time.Duration {
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	start := cpu()
	return func() {
		if b.N > 0 {
			b.ReportMetric(float64((cpu()-start).Nanoseconds())/float64(b.N), "cpu-ns/op")
		}
	}
}
