//go:build !unix

package bench

// processCPU is not measured here: the figures stay 0.
func processCPU() cpuTime { return cpuTime{} }
