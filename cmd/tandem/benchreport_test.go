package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestBenchReport(t *testing.T) {
	fixtures, err := filepath.Glob(filepath.Join("..", "..", "internal", "bench", "testdata", "*.json"))
	if err != nil || len(fixtures) == 0 {
		t.Fatalf("got fixtures %v (%v), want the bench's testdata", fixtures, err)
	}
	t.Run("Update", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "BENCHMARKS.md")
		doc := "# Benchmarks\n\nprose\n\n<!-- bench:begin -->\nstale\n<!-- bench:end -->\n\nmore prose\n"
		if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		code, stdout, stderr := runArgs(t, append([]string{"bench", "report", "--update", path}, fixtures...)...)
		if code != 0 || stdout != "" {
			t.Fatalf("got exit %d, stdout %q, stderr %q; want 0 and nothing", code, stdout, stderr)
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"# Benchmarks\n\nprose\n\n<!-- bench:begin -->\n", "### Figures", "<!-- bench:end -->\n\nmore prose\n"} {
			if !strings.Contains(string(got), want) {
				t.Errorf("got no %q in the updated file:\n%s", want, got)
			}
		}
		if strings.Contains(string(got), "stale") {
			t.Errorf("got the stale section still in the file:\n%s", got)
		}
	})
	t.Run("NoFiles", func(t *testing.T) {
		if code, _, stderr := runArgs(t, "bench", "report"); code != 2 {
			t.Errorf("got exit %d, want 2 (usage); stderr %q", code, stderr)
		}
	})
}
