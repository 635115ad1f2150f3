package web

import (
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
)

// Routes lists the routes of a handler built by Server.Handler or
// AdminServer.Handler as "METHOD /pattern" (chi patterns, such as
// "GET /admin/pods/{pod}"), sorted; nil for any other handler.
func Routes(h http.Handler) []string {
	rs, ok := h.(chi.Routes)
	if !ok {
		return nil
	}
	seen := map[string]bool{}
	_ = chi.Walk(rs, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		if len(route) > 1 {
			route = strings.TrimSuffix(route, "/")
		}
		seen[method+" "+route] = true
		return nil
	})
	out := make([]string, 0, len(seen))
	for r := range seen {
		out = append(out, r)
	}
	sort.Strings(out)
	return out
}

// Timeouts and limits of the HTTP servers of both APIs.
const (
	ReadHeaderTimeout = 5 * time.Second
	ReadTimeout       = 15 * time.Second
	WriteTimeout      = 30 * time.Second
	IdleTimeout       = 120 * time.Second
	MaxHeaderBytes    = 64 << 10
)

// NewHTTPServer returns a server for h on addr whose every timeout and the
// header size are bounded, so that slow or hostile clients cannot hold
// connections open.
func NewHTTPServer(addr string, h http.Handler) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
	}
}
