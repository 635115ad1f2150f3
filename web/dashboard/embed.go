// Package dashboard holds the admin dashboard: one static page (HTML, CSS
// and plain JavaScript, no build step, nothing fetched from elsewhere) that
// the admin listener serves at GET /. The page holds no data: it asks the
// operator for the admin token, keeps it in sessionStorage and calls the
// admin API of the same origin with it as a bearer token.
package dashboard

import "embed"

// FS holds index.html, its scripts (ui.js, charts.js, watch.js, triage.js, app.js)
// and style.css at its root, ready for http.FileServerFS.
//
//go:embed index.html app.js ui.js charts.js watch.js triage.js style.css
var FS embed.FS
