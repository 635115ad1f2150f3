package web

import (
	"context"
	"encoding/json"
	"io/fs"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/tandemhq/tandem"
)

// Limits of the admin API's change bodies.
const (
	MaxReasonLen = 500
	MaxActorLen  = 128
	MaxPodLen    = 128
)

// DefaultReadyTimeout bounds how long /readyz waits for its dependencies.
const DefaultReadyTimeout = 2 * time.Second

// AdminServer is the admin API (docs/api.md), served on
// `admin_listen`: rollout, kill switch, divergences, audits, metrics and
// the dashboard.
type AdminServer struct {
	// Admin answers every /admin request.
	Admin tandem.AdminService
	// Token is required of every request but /healthz, /readyz,
	// /openapi.yaml and the dashboard's static files, as
	// "Authorization: Bearer <token>". An empty token refuses them all.
	Token string
	// ViewerToken, when set, is accepted for reading: GET (and HEAD) of
	// every admin route, /metrics and the dashboard's views. A change sent
	// with it is answered 403 forbidden.
	ViewerToken string
	// Ready reports readiness and the status of each dependency for
	// /readyz; nil means ready with no dependencies to report. Its
	// statuses are shown without a token, so they must hold no secrets.
	Ready func(ctx context.Context) (ok bool, deps map[string]string)
	// Gatherer is served at /metrics; nil serves an empty registry.
	Gatherer prometheus.Gatherer
	// Logger defaults to zap.NewNop().
	Logger *zap.Logger
	// Metrics defaults to unregistered metrics.
	Metrics *Metrics
	// Dashboard holds the dashboard page (index.html) and its assets;
	// nil serves the embedded dashboard.FS.
	Dashboard fs.FS
	// Plan runs the pod-by-pod rollout plan behind /admin/plan; nil
	// answers those routes 404 not_found (after the token check).
	Plan tandem.PlanService
	// Captures records pods' traffic behind /admin/pods/{pod}/capture and
	// /admin/captures; nil answers those routes 404 not_found.
	Captures tandem.CaptureService
	// Config returns the effective configuration for GET /admin/config,
	// secrets already redacted; nil answers 404 not_found.
	Config func() any
	// History keeps recent REPORT samples per pod for GET /admin/history;
	// nil answers no samples.
	History HistorySource
	// Throttle turns the pods' manual throttles on and off behind PUT
	// /admin/pods/{pod}/throttle; nil answers it 404 not_found.
	Throttle tandem.ThrottleService
}

// MetricsHandler serves GET /metrics alone, without a token, for the
// optional `metrics_listen` address (a private network a scraper reaches);
// every other path answers 404 not_found.
func (s *AdminServer) MetricsHandler() http.Handler {
	gatherer := s.Gatherer
	if gatherer == nil {
		gatherer = prometheus.NewRegistry()
	}
	r := chi.NewRouter()
	r.NotFound(notFound)
	r.MethodNotAllowed(methodNotAllowed)
	r.Get("/metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}).ServeHTTP)
	return r
}

// Handler returns the admin API's router.
func (s *AdminServer) Handler() http.Handler {
	logger := s.Logger
	if logger == nil {
		logger = zap.NewNop()
	}
	m := s.Metrics
	if m == nil {
		m = NewMetrics(nil)
	}
	gatherer := s.Gatherer
	if gatherer == nil {
		gatherer = prometheus.NewRegistry()
	}
	dash := s.Dashboard
	if dash == nil {
		dash = defaultDashboard()
	}
	h := &adminHandler{svc: s.Admin, ready: s.Ready, logger: logger, dashboard: newDashboard(dash),
		effectiveConfig: s.Config, historySource: s.History}
	toks := newTokens(s.Token, s.ViewerToken)
	known := func(r *http.Request) bool { return toks.role(r) != RoleNone }

	r := chi.NewRouter()
	r.Use(requestID, instrument("admin", m, logger), recoverer(logger), securityHeaders)
	// Unmatched paths may be dashboard assets (public); under /admin/ they
	// answer 401 without the token, so that probing reveals nothing.
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/admin/") && !known(r) {
			unauthorized(w, r)
			return
		}
		h.dashboard.asset(w, r)
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		if !publicPath(r.URL.Path) && !known(r) {
			unauthorized(w, r)
			return
		}
		methodNotAllowed(w, r)
	})

	// Public: probes, the dashboard page and the OpenAPI document, which
	// hold no data.
	r.Get("/healthz", h.healthz)
	r.Get("/readyz", h.readyz)
	r.Get("/", h.dashboard.index)
	r.Get("/openapi.yaml", openAPIDocument)

	r.Group(func(r chi.Router) {
		r.Use(toks.requireRole)
		s.routeAdmin(r, h, gatherer)
	})
	return r
}

// routeAdmin mounts the endpoints that need a token (/metrics and
// /admin/...) on r.
func (s *AdminServer) routeAdmin(r chi.Router, h *adminHandler, gatherer prometheus.Gatherer) {
	plan := &planHandler{adminHandler: h, plan: s.Plan}
	capt := &captureHandler{adminHandler: h, captures: s.Captures}
	throttle := &throttleHandler{adminHandler: h, svc: s.Throttle}
	r.Get("/metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}).ServeHTTP)
	r.Get("/admin/whoami", whoami)
	r.Get("/admin/pods", h.pods)
	r.Get("/admin/pods/{pod}", h.pod)
	r.Put("/admin/pods/{pod}/mode", h.setMode)
	r.Post("/admin/pods/{pod}/audit", h.audit)
	r.Post("/admin/pods/{pod}/resync", h.resync)
	r.Post("/admin/pods/{pod}/capture", capt.start)
	r.Get("/admin/captures", capt.list)
	r.Get("/admin/captures/{id}", capt.download)
	r.Put("/admin/pods/{pod}/throttle", throttle.set)
	r.Get("/admin/killswitch", h.killSwitch)
	r.Post("/admin/killswitch", h.engage)
	r.Delete("/admin/killswitch", h.disengage)
	r.Post("/admin/alerts/killswitch", h.alertKillSwitch)
	r.Get("/admin/divergences", h.divergences)
	r.Get("/admin/divergences/summary", h.divergenceSummary)
	r.Get("/admin/config", h.config)
	r.Get("/admin/history", h.history)
	r.Get("/admin/report", h.report)
	r.Get("/admin/audit-log", h.auditLog)
	r.Get("/admin/instances", h.instances)
	r.Get("/admin/plan", plan.status)
	r.Post("/admin/plan/start", plan.start)
	r.Post("/admin/plan/pause", plan.pause)
	r.Post("/admin/plan/resume", plan.resume)
	r.Post("/admin/plan/abort", plan.abort)
	r.Post("/admin/plan/approve", plan.approve)
	r.Post("/admin/plan/skip", plan.skip)
}

func publicPath(p string) bool {
	return p == "/healthz" || p == "/readyz" || p == "/" || p == "/openapi.yaml"
}

// securityHeaders keeps the admin answers out of frames and referrers.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Content-Type-Options", "nosniff")
		next.ServeHTTP(w, r)
	})
}

type adminHandler struct {
	svc       tandem.AdminService
	ready     func(ctx context.Context) (bool, map[string]string)
	logger    *zap.Logger
	dashboard *dashboardPage
	// effectiveConfig and historySource serve GET /admin/config and
	// /admin/history (triage.go).
	effectiveConfig func() any
	historySource   HistorySource
}

func (h *adminHandler) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// readyBody answers /readyz; when not ready it also carries the error
// object, so that every non-2xx answer is the error JSON.
type readyBody struct {
	Status       string            `json:"status"`
	Dependencies map[string]string `json:"dependencies"`
	Error        *errorDetail      `json:"error,omitempty"`
}

func (h *adminHandler) readyz(w http.ResponseWriter, r *http.Request) {
	ok, deps := true, map[string]string{}
	if h.ready != nil {
		ctx, cancel := context.WithTimeout(r.Context(), DefaultReadyTimeout)
		defer cancel()
		var got map[string]string
		ok, got = h.ready(ctx)
		for k, v := range got {
			deps[truncate(k, 100)] = truncate(v, 200)
		}
	}
	if ok {
		writeJSON(w, http.StatusOK, readyBody{Status: "ok", Dependencies: deps})
		return
	}
	writeJSON(w, http.StatusServiceUnavailable, readyBody{
		Status:       "unavailable",
		Dependencies: deps,
		Error: &errorDetail{
			Code:    tandem.EUNAVAILABLE,
			Message: "not ready",
			Details: map[string]any{"dependencies": deps},
		},
	})
}

// podParam reads and checks the {pod} path parameter.
func podParam(r *http.Request) (string, error) {
	pod := chi.URLParam(r, "pod")
	if err := validatePodName(pod); err != nil {
		return "", err
	}
	return pod, nil
}

func validatePodName(pod string) error {
	if pod == "" || len(pod) > MaxPodLen {
		return invalid("pod name must be 1..%d characters", MaxPodLen)
	}
	for i := 0; i < len(pod); i++ {
		if c := pod[i]; c <= ' ' || c == 0x7f || c == '%' || c == '/' {
			return invalid("pod name holds a character it cannot hold")
		}
	}
	return nil
}

// changeBody is the who-and-why part of every change.
type changeBody struct {
	Reason string `json:"reason"`
	Actor  string `json:"actor"`
}

// change checks a change body and fills its actor: the body's actor, else
// the X-Actor header, else the token's role and the client's address.
func (c changeBody) change(r *http.Request) (tandem.Change, error) {
	if strings.TrimSpace(c.Reason) == "" || utf8.RuneCountInString(c.Reason) > MaxReasonLen {
		return tandem.Change{}, invalid("reason is required, 1..%d characters", MaxReasonLen)
	}
	actor := c.Actor
	if actor == "" {
		actor = r.Header.Get("X-Actor")
	}
	actor = strings.TrimSpace(actor)
	if actor == "" {
		actor = defaultActor(r)
	}
	if utf8.RuneCountInString(actor) > MaxActorLen || !utf8.ValidString(actor) {
		return tandem.Change{}, invalid("actor must be at most %d characters of UTF-8", MaxActorLen)
	}
	if a := accessFrom(r.Context()); a != nil {
		a.actor = actor
	}
	return tandem.Change{Actor: actor, Reason: c.Reason}, nil
}

func (h *adminHandler) pods(w http.ResponseWriter, r *http.Request) {
	pods, err := h.svc.Pods(r.Context())
	if err != nil {
		writeError(w, r, h.logger, err)
		return
	}
	out := make([]*tandem.PodStatus, len(pods))
	for i := range pods {
		out[i] = podJSON(&pods[i])
	}
	writeJSON(w, http.StatusOK, map[string]any{"pods": out})
}

func (h *adminHandler) pod(w http.ResponseWriter, r *http.Request) {
	name, err := podParam(r)
	if err != nil {
		writeError(w, r, h.logger, err)
		return
	}
	p, err := h.svc.Pod(r.Context(), name)
	if err != nil {
		writeError(w, r, h.logger, err)
		return
	}
	writeJSON(w, http.StatusOK, podJSON(p))
}

// podJSON never shows failed_gates or checks as null.
func podJSON(p *tandem.PodStatus) *tandem.PodStatus {
	if p.Gates.FailedGates == nil || p.Gates.Checks == nil {
		c := *p
		c.Gates.FailedGates = nonNil(c.Gates.FailedGates)
		c.Gates.Checks = nonNil(c.Gates.Checks)
		return &c
	}
	return p
}

type modeBody struct {
	changeBody
	Mode   tandem.Mode `json:"mode"`
	Force  bool        `json:"force"`
	DryRun bool        `json:"dry_run"`
}

func (h *adminHandler) setMode(w http.ResponseWriter, r *http.Request) {
	pod, err := podParam(r)
	if err != nil {
		writeError(w, r, h.logger, err)
		return
	}
	var body modeBody
	if err := decodeJSON(w, r, &body); err != nil {
		writeError(w, r, h.logger, err)
		return
	}
	if !body.Mode.Valid() {
		writeError(w, r, h.logger, invalid("mode must be one of redis, shadow, mysql, mysql_only"))
		return
	}
	ch, err := body.change(r)
	if err != nil {
		writeError(w, r, h.logger, err)
		return
	}
	status, dry, err := h.svc.SetMode(r.Context(), pod, tandem.ModeChange{
		Change: ch, Mode: body.Mode, Force: body.Force, DryRun: body.DryRun,
	})
	switch {
	case err != nil:
		writeError(w, r, h.logger, err)
	case body.DryRun && dry != nil:
		d := *dry
		d.FailedGates, d.Allowed = nonNil(d.FailedGates), nonNil(d.Allowed)
		writeJSON(w, http.StatusOK, d)
	case status != nil && status.Transition != nil:
		// The copy runs in the background; the mode applies when it is done.
		writeJSON(w, http.StatusAccepted, podJSON(status))
	case status != nil:
		writeJSON(w, http.StatusOK, podJSON(status))
	default:
		writeError(w, r, h.logger, errBadAnswer("SetMode"))
	}
}

// errBadAnswer is an internal error: a service broke its own contract.
func errBadAnswer(method string) error {
	return &badAnswerError{method: method}
}

type badAnswerError struct{ method string }

func (e *badAnswerError) Error() string {
	return "admin service " + e.method + " returned neither a result nor an error"
}

// killSwitchBody is the body of POST and DELETE /admin/killswitch. Pods
// stays raw so that an absent list (every pod) is told from an empty or
// null one (invalid).
type killSwitchBody struct {
	changeBody
	Pods json.RawMessage `json:"pods"`
}

// targets returns the pods a kill-switch change names: nil when the body
// leaves pods out (every pod), else a non-empty list of distinct, plain
// names. Whether they are known is the service's to say.
func (b killSwitchBody) targets() ([]string, error) {
	if b.Pods == nil {
		return nil, nil
	}
	var pods []string
	if err := json.Unmarshal(b.Pods, &pods); err != nil {
		return nil, invalid("pods must be a list of pod names")
	}
	if len(pods) == 0 {
		return nil, invalid("pods must name at least one pod (leave it out for every pod)")
	}
	seen := make(map[string]bool, len(pods))
	for _, p := range pods {
		if err := validatePodName(p); err != nil {
			return nil, invalid("pods: %s", tandem.ErrorMessage(err))
		}
		if seen[p] {
			return nil, invalid("pods must be distinct, %q repeats", p)
		}
		seen[p] = true
	}
	return pods, nil
}

func (h *adminHandler) killSwitchChange(w http.ResponseWriter, r *http.Request,
	fn func(context.Context, []string, tandem.Change) (*tandem.KillSwitchState, error)) {
	var body killSwitchBody
	if err := decodeJSON(w, r, &body); err != nil {
		writeError(w, r, h.logger, err)
		return
	}
	pods, err := body.targets()
	if err != nil {
		writeError(w, r, h.logger, err)
		return
	}
	ch, err := body.change(r)
	if err != nil {
		writeError(w, r, h.logger, err)
		return
	}
	st, err := fn(r.Context(), pods, ch)
	if err != nil {
		writeError(w, r, h.logger, err)
		return
	}
	writeJSON(w, http.StatusOK, killSwitchJSON(st))
}

func (h *adminHandler) engage(w http.ResponseWriter, r *http.Request) {
	h.killSwitchChange(w, r, h.svc.EngageKillSwitch)
}

func (h *adminHandler) disengage(w http.ResponseWriter, r *http.Request) {
	h.killSwitchChange(w, r, h.svc.DisengageKillSwitch)
}

func (h *adminHandler) killSwitch(w http.ResponseWriter, r *http.Request) {
	st, err := h.svc.KillSwitch(r.Context())
	if err != nil {
		writeError(w, r, h.logger, err)
		return
	}
	writeJSON(w, http.StatusOK, killSwitchJSON(st))
}

func killSwitchJSON(st *tandem.KillSwitchState) *tandem.KillSwitchState {
	if st.Pods == nil {
		c := *st
		c.Pods = []string{}
		return &c
	}
	return st
}

func (h *adminHandler) divergences(w http.ResponseWriter, r *http.Request) {
	limit, err := parseLimit(r)
	if err != nil {
		writeError(w, r, h.logger, err)
		return
	}
	f, err := divergenceFilter(r, time.Now())
	if err != nil {
		writeError(w, r, h.logger, err)
		return
	}
	f.Limit = limit
	format, err := divergenceFormat(r)
	if err != nil {
		writeError(w, r, h.logger, err)
		return
	}
	divs, err := h.svc.Divergences(r.Context(), f)
	if err != nil {
		writeError(w, r, h.logger, err)
		return
	}
	writeDivergences(w, format, divs)
}

func (h *adminHandler) report(w http.ResponseWriter, r *http.Request) {
	reports, err := h.svc.Report(r.Context())
	if err != nil {
		writeError(w, r, h.logger, err)
		return
	}
	for i := range reports {
		// REPORT's maps are objects, never null (a pod with no store timed yet).
		if reports[i].LatencyMS == nil {
			reports[i].LatencyMS = map[string]tandem.LatencyStats{}
		}
		if reports[i].Divergences == nil {
			reports[i].Divergences = map[tandem.DivergenceKind]int64{}
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"pods": nonNil(reports)})
}

func (h *adminHandler) audit(w http.ResponseWriter, r *http.Request) {
	pod, err := podParam(r)
	if err != nil {
		writeError(w, r, h.logger, err)
		return
	}
	var body changeBody
	if err := decodeJSON(w, r, &body); err != nil {
		writeError(w, r, h.logger, err)
		return
	}
	ch, err := body.change(r)
	if err != nil {
		writeError(w, r, h.logger, err)
		return
	}
	a, err := h.svc.Audit(r.Context(), pod, ch)
	if err != nil {
		writeError(w, r, h.logger, err)
		return
	}
	if a.Drifted == nil {
		c := *a
		c.Drifted = []tandem.Drift{}
		a = &c
	}
	writeJSON(w, http.StatusOK, a)
}

type resyncBody struct {
	changeBody
	From string `json:"from"`
}

func (h *adminHandler) resync(w http.ResponseWriter, r *http.Request) {
	pod, err := podParam(r)
	if err != nil {
		writeError(w, r, h.logger, err)
		return
	}
	var body resyncBody
	if err := decodeJSON(w, r, &body); err != nil {
		writeError(w, r, h.logger, err)
		return
	}
	if body.From != tandem.StoreMySQL {
		writeError(w, r, h.logger, invalid(`from must be "mysql"`))
		return
	}
	ch, err := body.change(r)
	if err != nil {
		writeError(w, r, h.logger, err)
		return
	}
	n, err := h.svc.Resync(r.Context(), pod, body.From, ch)
	if err != nil {
		writeError(w, r, h.logger, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"pod": pod, "keys_rewritten": n})
}

func (h *adminHandler) auditLog(w http.ResponseWriter, r *http.Request) {
	limit, err := parseLimit(r)
	if err != nil {
		writeError(w, r, h.logger, err)
		return
	}
	entries, err := h.svc.AuditLog(r.Context(), limit)
	if err != nil {
		writeError(w, r, h.logger, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"entries": nonNil(entries)})
}

func (h *adminHandler) instances(w http.ResponseWriter, r *http.Request) {
	in, err := h.svc.Instances(r.Context())
	if err != nil {
		writeError(w, r, h.logger, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"instances": nonNil(in)})
}

// nonNil makes an empty list answer [] rather than null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
