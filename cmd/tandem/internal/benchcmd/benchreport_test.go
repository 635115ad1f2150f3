package benchcmd

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tandemhq/tandem/internal/cli"
)

func TestBenchReport(t *testing.T) {
	fixtures, err := filepath.Glob(filepath.Join("..", "..", "..", "..", "internal", "bench", "testdata", "*.json"))
	if err != nil || len(fixtures) == 0 {
		t.Fatalf("got fixtures %v (%v), want the bench's testdata", fixtures, err)
	}
	t.Run("Update", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "BENCHMARKS.md")
		doc := "# Benchmarks\n\nprose\n\n<!-- bench:begin -->\nstale\n<!-- bench:end -->\n\nmore prose\n"
		if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		stdout, stderr, err := runBench(context.Background(), append([]string{"report", "--update", path}, fixtures...)...)
		if err != nil || stdout != "" {
			t.Fatalf("got %v, stdout %q, stderr %q; want success and nothing", err, stdout, stderr)
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
		if _, stderr, err := runBench(context.Background(), "report"); !errors.Is(err, cli.ErrUsage) {
			t.Errorf("got %v, want a usage error (exit 2); stderr %q", err, stderr)
		}
	})
}
