package tandem_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

var (
	mdLink    = regexp.MustCompile(`\[[^\]]*\]\(([^)\s]+)\)`)
	mdHeading = regexp.MustCompile(`(?m)^#{1,6} (.+)$`)
	slugDrop  = regexp.MustCompile(`[^a-z0-9 _-]`)
)

// proseLines returns the lines of a markdown file outside its fenced code
// blocks.
func proseLines(md string) []string {
	var out []string
	fenced := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			out = append(out, line)
		}
	}
	return out
}

// anchors returns the anchors of a markdown file's headings as GitHub
// makes them: lower case, punctuation dropped, spaces as hyphens, a
// repeated heading numbered.
func anchors(md string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, m := range mdHeading.FindAllStringSubmatch(strings.Join(proseLines(md), "\n"), -1) {
		slug := strings.ReplaceAll(slugDrop.ReplaceAllString(strings.ToLower(strings.TrimSpace(m[1])), ""), " ", "-")
		if n := seen[slug]; n > 0 {
			out[slug+"-"+strconv.Itoa(n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}

// TestDocsLinks checks that the README and docs/ are self-contained: every
// relative link leads to a file of the repository (and to a heading of it
// when it names one), none leaves the repository, and the README links
// every page of docs/.
func TestDocsLinks(t *testing.T) {
	pages, err := filepath.Glob("docs/*.md")
	if err != nil || len(pages) < 5 {
		t.Fatalf("got docs %v (%v), want the pages of docs/", pages, err)
	}
	files := append([]string{"README.md", "BENCHMARKS.md"}, pages...)
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	linked := map[string]bool{}
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(raw), "../shared") {
			t.Errorf("%s: got a reference to ../shared, a directory outside the repository", file)
		}
		for _, line := range proseLines(string(raw)) {
			for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.HasPrefix(target, "http://") || strings.HasPrefix(target, "https://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				path, anchor, _ := strings.Cut(target, "#")
				dest := file
				if path != "" {
					dest = filepath.Join(filepath.Dir(file), path)
				}
				abs, _ := filepath.Abs(dest)
				if rel, err := filepath.Rel(root, abs); err != nil || strings.HasPrefix(rel, "..") {
					t.Errorf("%s: link %s leaves the repository", file, target)
					continue
				}
				b, err := os.ReadFile(dest)
				if err != nil {
					if fi, serr := os.Stat(dest); serr == nil && fi.IsDir() {
						continue
					}
					t.Errorf("%s: link %s: %v", file, target, err)
					continue
				}
				if file == "README.md" {
					linked[filepath.ToSlash(filepath.Clean(dest))] = true
				}
				if anchor != "" && !anchors(string(b))[anchor] {
					t.Errorf("%s: link %s: %s has no heading #%s", file, target, dest, anchor)
				}
			}
		}
	}
	for _, page := range pages {
		if !linked[filepath.ToSlash(page)] {
			t.Errorf("README.md: got no link to %s, want every page of docs/", page)
		}
	}
}
