package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tandemhq/tandem"
)

// TestPrintReportContention: the report shows explained contention apart
// from the divergences, with its share, and n/a without comparisons.
func TestPrintReportContention(t *testing.T) {
	var b bytes.Buffer
	printReport(&b, []tandem.Report{
		{Pod: "pod-a", Mode: tandem.ModeShadow, Window: "15m", Comparisons: 200, Matches: 200, Contention: 5, ContentionRate: 0.025},
		{Pod: "pod-b", Mode: tandem.ModeRedis, Window: "15m"},
	})
	out := b.String()
	if !strings.Contains(out, "CONTENTION") {
		t.Fatalf("got report without a CONTENTION column:\n%s", out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.Contains(lines[1], "5 (2.500%)") || !strings.Contains(lines[2], "n/a") {
		t.Errorf("got report\n%s\nwant pod-a's contention as 5 (2.500%%) and pod-b's as n/a", out)
	}
}
