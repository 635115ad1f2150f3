package bench

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// RunInfo says how a bench run was made: its command line and how busy
// the machine was (the 1-minute load average at its start and end), so
// that a report can tell a quiet machine's figures from a loaded one's.
type RunInfo struct {
	Command    string    `json:"command"`
	StartedAt  time.Time `json:"started_at"`
	Seconds    float64   `json:"seconds"`
	Load1Start float64   `json:"load1_start"`
	Load1End   float64   `json:"load1_end"`
	CPUs       int       `json:"cpus"`
}

// StartRun records the start of a run of command.
func StartRun(command string) *RunInfo {
	return &RunInfo{Command: command, StartedAt: time.Now().UTC().Truncate(time.Second),
		Load1Start: load1(), CPUs: runtime.NumCPU()}
}

// End records the end of the run.
func (r *RunInfo) End() {
	r.Seconds = time.Since(r.StartedAt).Round(time.Second).Seconds()
	r.Load1End = load1()
}

// CommandLine returns the command line of program and args as a shell
// would read it back.
func CommandLine(program string, args []string) string {
	parts := []string{program}
	for _, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\$*?;&|<>()") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		parts = append(parts, a)
	}
	return strings.Join(parts, " ")
}

// load1 reads the 1-minute load average from /proc/loadavg; -1 where
// there is none.
func load1() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return -1
	}
	return v
}
