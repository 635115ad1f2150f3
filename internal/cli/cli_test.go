package cli

import (
	"bytes"
	"flag"
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersion(t *testing.T) {
	tests := []struct {
		name string
		bi   *debug.BuildInfo
		want string
	}{
		{"Stamped", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0d294ae1"}, {Key: "vcs.time", Value: "2026-11-30T10:00:00Z"}, {Key: "vcs.modified", Value: "true"}}},
			"tandem v1.2.3 (commit 0d294ae1, 2026-11-30T10:00:00Z, modified) go"},
		{"Clean", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.modified", Value: "false"}}},
			"tandem v1.2.3 (commit abc) go"},
		{"NoVCS", &debug.BuildInfo{}, "tandem (devel) (commit unknown) go"},
		{"NoBuildInfo", nil, "tandem (devel) (commit unknown) go"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := version("tandem", func() (*debug.BuildInfo, bool) { return tt.bi, tt.bi != nil })
			if !strings.HasPrefix(got, tt.want) {
				t.Errorf("got %q, want it to start with %q", got, tt.want)
			}
		})
	}
}

func TestPrintFlags(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.String("config", "", "YAML `FILE`")
	fs.Duration("duration", 0, "how long")
	fs.Int("items", 1, "items")
	fs.Bool("json", false, "print JSON")
	var out bytes.Buffer
	PrintFlags(&out, fs)
	want := "  --config FILE\n        YAML FILE\n" +
		"  --duration duration\n        how long\n" +
		"  --items int\n        items (default 1)\n" +
		"  --json\n        print JSON\n"
	if got := out.String(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}
