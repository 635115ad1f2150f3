package server_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestE2ETandemctlVersion checks the version line of a built tandemctl:
// it needs no token, and in a checkout with a .git directory (where the go
// command stamps the commit) it names the commit it was built from.
func TestE2ETandemctlVersion(t *testing.T) {
	bin := mustBuildTandemctl(t)
	r := runCtl(t, bin, "http://127.0.0.1:1", "", "version")
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("got exit %d, stderr %q; want 0 and nothing", r.code, r.stderr)
	}
	if !regexp.MustCompile(`^tandemctl \S+ \(commit \S+.*\) go1\.`).MatchString(r.stdout) {
		t.Fatalf("got %q, want 'tandemctl VERSION (commit ...) goVERSION'", r.stdout)
	}
	root, err := filepath.Abs(filepath.Join("..", "..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	// A git worktree's .git is a file; the go command stamps no commit there.
	if fi, err := os.Stat(filepath.Join(root, ".git")); err != nil || !fi.IsDir() {
		return
	}
	cmd := exec.Command("git", "rev-parse", "HEAD")
	cmd.Dir = root
	head, err := cmd.Output()
	if err != nil {
		t.Fatalf("git rev-parse HEAD: %v", err)
	}
	if want := "(commit " + strings.TrimSpace(string(head)); !strings.Contains(r.stdout, want) {
		t.Errorf("got %q, want it to contain %q", r.stdout, want)
	}
}
