//go:build unix

package bench

import (
	"syscall"
	"time"
)

// processCPU returns the CPU time the process has used so far, in user
// and system mode (getrusage RUSAGE_SELF).
func processCPU() cpuTime {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return cpuTime{}
	}
	return cpuTime{user: time.Duration(ru.Utime.Nano()), sys: time.Duration(ru.Stime.Nano())}
}
