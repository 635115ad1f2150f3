package bench

import "time"

// cpuTime is CPU time used by the process.
type cpuTime struct{ user, sys time.Duration }

// perOp sets the result's CPU time per operation from the process's CPU
// time before and after the measured load of ops operations.
func (r *Result) perOp(before, after cpuTime, ops int64) {
	if ops <= 0 {
		return
	}
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 / float64(ops) }
	r.CPUUserUSPerOp, r.CPUSysUSPerOp = us(after.user-before.user), us(after.sys-before.sys)
	r.CPUUSPerOp = r.CPUUserUSPerOp + r.CPUSysUSPerOp
}
