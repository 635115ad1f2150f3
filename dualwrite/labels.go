package dualwrite

import (
	"context"
	"runtime/pprof"
)

// The router's background work is labelled for CPU profiles (label
// tandem_work): a profile of a running server (tandem bench http
// --cpuprofile, or the admin API's pprof) then tells, with `go tool pprof
// -tags`, what the shadow jobs, the dirty-cart worker and the sweep cost
// beside the buyers' requests, which carry no label. Goroutines started by
// labelled work inherit its label.
const (
	workShadow = iota
	workDirty
	workSweep
)

// workLabels are the label sets, made once: setting a goroutine's labels
// from them allocates nothing, so the shadow path can afford it per job.
var workLabels = [...]context.Context{
	workShadow: pprof.WithLabels(context.Background(), pprof.Labels("tandem_work", "shadow")),
	workDirty:  pprof.WithLabels(context.Background(), pprof.Labels("tandem_work", "dirty_worker")),
	workSweep:  pprof.WithLabels(context.Background(), pprof.Labels("tandem_work", "sweep")),
}
