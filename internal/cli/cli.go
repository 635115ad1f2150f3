// Package cli holds what tandem's two commands, tandem and tandemctl, say
// the same way: their version line and the flag list of their help.
package cli

import (
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
)

// Version returns the version line of program: the module version and the
// VCS commit it was built from (as the go command stamps them into the
// binary), and the Go version. A binary built outside a checkout (go run,
// go test) says "commit unknown".
func Version(program string) string {
	return version(program, debug.ReadBuildInfo)
}

func version(program string, read func() (*debug.BuildInfo, bool)) string {
	mod, commit, at, dirty := "(devel)", "unknown", "", false
	if bi, ok := read(); ok {
		if v := bi.Main.Version; v != "" {
			mod = v
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value
			case "vcs.time":
				at = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s (commit %s", program, mod, commit)
	if at != "" {
		fmt.Fprintf(&b, ", %s", at)
	}
	if dirty {
		b.WriteString(", modified")
	}
	fmt.Fprintf(&b, ") %s %s/%s", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return b.String()
}

// PrintFlags lists every flag of fs, sorted, as "--name VALUE" followed by
// its usage and default, the way a command's help shows them.
func PrintFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if name != "" {
			line += " " + name
		}
		fmt.Fprintln(w, line)
		fmt.Fprintf(w, "        %s", strings.ReplaceAll(usage, "\n", "\n        "))
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" {
			fmt.Fprintf(w, " (default %s)", f.DefValue)
		}
		fmt.Fprintln(w)
	})
}
