package web

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"net/http"
	"runtime/debug"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/tandemhq/tandem"
)

// requestID gives every request an id (the client's X-Request-Id when it is
// short and plain, else a generated one), puts it in the context for the
// logs and echoes it as the X-Request-Id response header.
func requestID(next http.Handler) http.Handler {
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(middleware.RequestIDHeader, middleware.GetReqID(r.Context()))
		next.ServeHTTP(w, r)
	})
	withID := middleware.RequestID(echo)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id := r.Header.Get(middleware.RequestIDHeader); id != "" && !plainRequestID(id) {
			// An id that could forge log lines or bloat them is replaced.
			r.Header.Del(middleware.RequestIDHeader)
		}
		withID.ServeHTTP(w, r)
	})
}

func plainRequestID(id string) bool {
	if len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-_.:/+=", c) >= 0) {
			return false
		}
	}
	return true
}

// recoverer turns a panic in a handler into a logged 500 internal answer.
func recoverer(logger *zap.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer func() {
				v := recover()
				if v == nil {
					return
				}
				if v == http.ErrAbortHandler {
					// net/http's way to abort a response on purpose.
					panic(v)
				}
				logger.Error("panic serving request",
					zap.String("request_id", middleware.GetReqID(r.Context())),
					zap.String("method", r.Method),
					zap.String("path", r.URL.Path),
					zap.Any("panic", v),
					zap.ByteString("stack", debug.Stack()))
				if r.Header.Get("Connection") != "Upgrade" {
					writeJSON(w, http.StatusInternalServerError, errorBody{Error: errorDetail{
						Code: tandem.EINTERNAL, Message: "internal error", Details: map[string]any{},
					}})
				}
			}()
			next.ServeHTTP(w, r)
		})
	}
}

// accessInfo collects what the access log says of a request beyond its
// line: who made a change and with which role. Handlers fill it through
// the request's context.
type accessInfo struct {
	actor string
	role  Role
}

type accessKey struct{}

// noAccess is the access info of an API that fills none: never written.
var noAccess = &accessInfo{}

func accessFrom(ctx context.Context) *accessInfo {
	a, _ := ctx.Value(accessKey{}).(*accessInfo)
	return a
}

// instrument records the latency of every request by route pattern and
// status. It writes the admin API's access log (method, route, status,
// duration, actor and role) at info level for changes and refusals and
// debug level for reads answered 2xx or 3xx, and the checkout API's at debug level; never with the headers,
// which may hold tokens.
func instrument(api string, m *Metrics, logger *zap.Logger) func(http.Handler) http.Handler {
	level := zapcore.DebugLevel
	if api == "admin" {
		level = zapcore.InfoLevel
	}
	// Only the admin API says who made a change (its handlers fill the
	// access info); the checkout API's log line takes X-Actor as it comes.
	withAccess := api == "admin"
	inFlight := m.inFlight.WithLabelValues(api)
	durations := &durations{api: api, vec: m.requestDuration}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
			inFlight.Inc()
			info := noAccess
			if withAccess {
				info = &accessInfo{}
				r = r.WithContext(context.WithValue(r.Context(), accessKey{}, info))
			}
			defer func() {
				inFlight.Dec()
				status := ww.Status()
				if status == 0 {
					status = http.StatusOK
				}
				route := "unmatched"
				if rc := chi.RouteContext(r.Context()); rc != nil && rc.RoutePattern() != "" {
					route = rc.RoutePattern()
				}
				d := time.Since(start)
				durations.observer(r.Method, route, status).Observe(d.Seconds())
				// Reads are the dashboard's and the watchers' polling:
				// debug, unless refused or failed; a change is info.
				lvl := level
				if status < 400 && (r.Method == http.MethodGet || r.Method == http.MethodHead || r.Method == http.MethodOptions) {
					lvl = zapcore.DebugLevel
				}
				ce := logger.Check(lvl, "request")
				if ce == nil {
					return
				}
				actor := info.actor
				if actor == "" {
					actor = plainActor(r.Header.Get("X-Actor"))
				}
				ce.Write(
					zap.String("api", api),
					zap.String("request_id", middleware.GetReqID(r.Context())),
					zap.String("method", r.Method),
					zap.String("route", route),
					zap.Int("status", status),
					zap.Duration("duration", d),
					zap.String("actor", actor),
					zap.String("role", string(info.role)),
					zap.String("remote", r.RemoteAddr))
			}()
			next.ServeHTTP(ww, r)
		})
	}
}

// plainActor bounds an X-Actor header for the log.
func plainActor(s string) string {
	s = strings.TrimSpace(s)
	if !utf8.ValidString(s) {
		return ""
	}
	return truncate(s, MaxActorLen)
}

// bearerAuth requires "Authorization: Bearer <token>", compared in
// constant time. An empty token refuses every request: a misconfigured
// server fails closed.
func bearerAuth(token string) func(http.Handler) http.Handler {
	want := sha256.Sum256([]byte(token))
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !authorized(r, token, want) {
				unauthorized(w, r)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// authorized compares hashes so that the comparison takes the same time
// whatever the length of the token presented.
func authorized(r *http.Request, token string, want [32]byte) bool {
	if token == "" {
		return false
	}
	scheme, got, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(got)))
	return subtle.ConstantTimeCompare(sum[:], want[:]) == 1
}

func unauthorized(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="tandem"`)
	writeError(w, r, zap.NewNop(), tandem.Errorf(tandem.EUNAUTHORIZED, "missing or wrong bearer token"))
}

// limiter bounds the requests served at once: up to inFlight run, up to
// backlog more wait for a slot for at most wait, and the rest are refused
// at once with 503 unavailable, so that a burst from one client cannot
// queue without bound in front of everyone's checkout.
type limiter struct {
	api     string
	tokens  chan struct{}
	backlog chan struct{}
	wait    time.Duration
	metrics *Metrics
	logger  *zap.Logger
}

func newLimiter(api string, inFlight, backlog int, wait time.Duration, m *Metrics, logger *zap.Logger) *limiter {
	return &limiter{
		api:     api,
		tokens:  make(chan struct{}, inFlight),
		backlog: make(chan struct{}, inFlight+backlog),
		wait:    wait,
		metrics: m,
		logger:  logger,
	}
}

var errOverloaded = tandem.Errorf(tandem.EUNAVAILABLE, "too many requests in flight; retry shortly")

func (l *limiter) handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case l.backlog <- struct{}{}:
		default:
			l.shed(w, r)
			return
		}
		defer func() { <-l.backlog }()

		select {
		case l.tokens <- struct{}{}:
		default:
			timer := time.NewTimer(l.wait)
			defer timer.Stop()
			select {
			case l.tokens <- struct{}{}:
			case <-timer.C:
				l.shed(w, r)
				return
			case <-r.Context().Done():
				writeError(w, r, l.logger, r.Context().Err())
				return
			}
		}
		defer func() { <-l.tokens }()
		next.ServeHTTP(w, r)
	})
}

func (l *limiter) shed(w http.ResponseWriter, r *http.Request) {
	l.metrics.shed.WithLabelValues(l.api).Inc()
	w.Header().Set("Retry-After", "1")
	writeError(w, r, l.logger, errOverloaded)
}

// notFound answers unmatched requests with the error JSON.
func notFound(w http.ResponseWriter, r *http.Request) {
	writeError(w, r, zap.NewNop(), tandem.Errorf(tandem.ENOTFOUND, "no route for %s %s", r.Method, truncate(r.URL.Path, 100)))
}

// methodNotAllowed answers a known path asked with the wrong method.
func methodNotAllowed(w http.ResponseWriter, r *http.Request) {
	err := tandem.Errorf(tandem.EINVALID, "method %s is not allowed here", r.Method)
	writeErrorStatus(w, http.StatusMethodNotAllowed, err)
}

// writeErrorStatus answers a contract error with a status outside the code
// map (405 only).
func writeErrorStatus(w http.ResponseWriter, status int, err error) {
	var e *tandem.Error
	if !errors.As(err, &e) {
		e = tandem.Errorf(tandem.EINTERNAL, "internal error")
	}
	writeJSON(w, status, errorBody{Error: errorDetail{Code: e.Code, Message: e.Message, Details: map[string]any{}}})
}
