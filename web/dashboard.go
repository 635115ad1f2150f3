package web

import (
	"bytes"
	"io"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/web/dashboard"
)

// defaultDashboard is the dashboard embedded in the binary.
func defaultDashboard() fs.FS { return dashboard.FS }

// dashboardPage serves the dashboard page at / and its static assets at their
// paths under the directory that holds index.html. The page and assets
// hold no data (the page asks the operator for the admin token), so they
// are public.
type dashboardPage struct {
	root fs.FS // nil when there is no index.html
}

func newDashboard(fsys fs.FS) *dashboardPage {
	d := &dashboardPage{}
	if fsys == nil {
		return d
	}
	// The page may sit at the root of the FS or in a directory of it
	// (//go:embed static); the shallowest index.html wins.
	best := ""
	_ = fs.WalkDir(fsys, ".", func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if !e.IsDir() && path.Base(p) == "index.html" {
			if best == "" || strings.Count(p, "/") < strings.Count(best, "/") {
				best = p
			}
		}
		return nil
	})
	if best == "" {
		return d
	}
	if dir := path.Dir(best); dir != "." {
		sub, err := fs.Sub(fsys, dir)
		if err != nil {
			return d
		}
		d.root = sub
		return d
	}
	d.root = fsys
	return d
}

func (d *dashboardPage) index(w http.ResponseWriter, r *http.Request) {
	if !d.serve(w, r, "index.html") {
		writeError(w, r, zap.NewNop(), tandem.Errorf(tandem.ENOTFOUND, "the dashboard is not built into this binary"))
	}
}

// asset serves a static file for GET and HEAD, and answers anything else
// that no route matched with 404 not_found.
func (d *dashboardPage) asset(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		name := strings.TrimPrefix(path.Clean("/"+r.URL.Path), "/")
		if name != "" && !strings.HasSuffix(name, ".go") && d.serve(w, r, name) {
			return
		}
	}
	notFound(w, r)
}

// serve writes the regular file name of the dashboard, and reports whether
// there was one.
func (d *dashboardPage) serve(w http.ResponseWriter, r *http.Request, name string) bool {
	if d.root == nil || !fs.ValidPath(name) {
		return false
	}
	// ReadFile fails for a directory too: there are no listings.
	b, err := fs.ReadFile(d.root, name)
	if err != nil {
		return false
	}
	h := w.Header()
	h.Set("Cache-Control", "no-cache")
	h.Set("Content-Security-Policy", "frame-ancestors 'none'")
	http.ServeContent(w, r, name, time.Time{}, io.ReadSeeker(bytes.NewReader(b)))
	return true
}
