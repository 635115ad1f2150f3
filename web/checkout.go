package web

import (
	"context"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"go.uber.org/zap"

	"github.com/tandemhq/tandem"
)

// Defaults of the checkout API's in-flight limit.
const (
	DefaultMaxInFlight    = 256
	DefaultMaxBacklog     = 1024
	DefaultBacklogTimeout = 2 * time.Second
	DefaultRequestTimeout = 10 * time.Second
)

// Server is the checkout API (docs/api.md), served on `listen`.
type Server struct {
	// Checkout answers every request.
	Checkout tandem.CheckoutService
	// APIToken, when set, is required of every request as
	// "Authorization: Bearer <token>".
	APIToken string
	// Logger defaults to zap.NewNop().
	Logger *zap.Logger
	// Metrics defaults to unregistered metrics.
	Metrics *Metrics

	// MaxInFlight bounds the requests served at once (default
	// DefaultMaxInFlight); MaxBacklog more (default DefaultMaxBacklog, -1
	// for none) wait up to BacklogTimeout (default DefaultBacklogTimeout)
	// for a slot; beyond that requests are refused with 503 unavailable.
	MaxInFlight    int
	MaxBacklog     int
	BacklogTimeout time.Duration
	// RequestTimeout bounds the time the service may take to answer one
	// request (default DefaultRequestTimeout); past it the answer is 503.
	RequestTimeout time.Duration
}

// Handler returns the checkout API's router.
func (s *Server) Handler() http.Handler {
	logger := s.Logger
	if logger == nil {
		logger = zap.NewNop()
	}
	m := s.Metrics
	if m == nil {
		m = NewMetrics(nil)
	}
	inFlight, backlog, wait := s.MaxInFlight, s.MaxBacklog, s.BacklogTimeout
	if inFlight <= 0 {
		inFlight = DefaultMaxInFlight
	}
	if backlog == 0 {
		backlog = DefaultMaxBacklog
	} else if backlog < 0 {
		backlog = 0
	}
	if wait <= 0 {
		wait = DefaultBacklogTimeout
	}
	timeout := s.RequestTimeout
	if timeout <= 0 {
		timeout = DefaultRequestTimeout
	}
	h := &checkoutHandler{svc: s.Checkout, logger: logger, metrics: m, timeout: timeout}

	r := chi.NewRouter()
	r.Use(requestID, instrument("checkout", m, logger), recoverer(logger))
	r.NotFound(notFound)
	r.MethodNotAllowed(methodNotAllowed)
	r.Group(func(r chi.Router) {
		if s.APIToken != "" {
			r.Use(bearerAuth(s.APIToken))
		}
		r.Use(newLimiter("checkout", inFlight, backlog, wait, m, logger).handler)
		r.Post("/v1/reservations", h.reserve)
		r.Get("/v1/reservations/{cart_token}", h.get)
		r.Delete("/v1/reservations/{cart_token}", h.release)
		r.Post("/v1/reservations/{cart_token}/claim", h.claim)
		r.Put("/v1/inventory/{shop_id}/{inventory_item_id}/{group_id}", h.setOnHand)
		r.Get("/v1/inventory/{shop_id}/{inventory_item_id}/{group_id}", h.inventory)
	})
	return r
}

type checkoutHandler struct {
	svc     tandem.CheckoutService
	logger  *zap.Logger
	metrics *Metrics
	timeout time.Duration
}

// reserveBody is the body of POST /v1/reservations.
type reserveBody struct {
	CartToken  string               `json:"cart_token"`
	ShopID     int64                `json:"shop_id"`
	TTLSeconds *int64               `json:"ttl_seconds"`
	Lines      []tandem.LineRequest `json:"lines"`
}

// reservationJSON is a reservation as the checkout API answers it.
type reservationJSON struct {
	CartToken     string        `json:"cart_token"`
	ShopID        int64         `json:"shop_id"`
	Status        tandem.Status `json:"status"`
	Pod           string        `json:"pod"`
	SourceOfTruth string        `json:"source_of_truth"`
	ExpiresAt     *time.Time    `json:"expires_at"`
	Lines         []tandem.Line `json:"lines"`
	Replayed      bool          `json:"replayed"`
}

func toReservationJSON(res *tandem.Reservation) reservationJSON {
	lines := res.Lines
	if lines == nil {
		lines = []tandem.Line{}
	}
	return reservationJSON{
		CartToken:     res.CartToken,
		ShopID:        res.ShopID,
		Status:        res.Status,
		Pod:           res.Pod,
		SourceOfTruth: res.SourceOfTruth,
		ExpiresAt:     utc(res.ExpiresAt),
		Lines:         lines,
		Replayed:      res.Replayed,
	}
}

func (h *checkoutHandler) ctx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), h.timeout)
}

func (h *checkoutHandler) reserve(w http.ResponseWriter, r *http.Request) {
	var body reserveBody
	if err := decodeReserve(w, r, &body); err != nil {
		h.fail(w, r, tandem.OpReserve, err)
		return
	}
	req := tandem.ReserveRequest{CartToken: body.CartToken, ShopID: body.ShopID, Lines: body.Lines}
	if body.TTLSeconds != nil {
		ttl, err := tandem.TTLSeconds(*body.TTLSeconds)
		if err != nil {
			h.fail(w, r, tandem.OpReserve, err)
			return
		}
		req.TTL = ttl
	}
	if err := req.Validate(); err != nil {
		h.fail(w, r, tandem.OpReserve, err)
		return
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	res, err := h.svc.Reserve(ctx, req)
	if err != nil {
		h.fail(w, r, tandem.OpReserve, err)
		return
	}
	status := http.StatusCreated
	if res.Replayed {
		status = http.StatusOK
	}
	h.answer(w, status, tandem.OpReserve, res)
}

// cartTarget reads the cart token from the path and shop_id from the query.
func cartTarget(r *http.Request) (int64, string, error) {
	token := chi.URLParam(r, "cart_token")
	if err := tandem.ValidateCartToken(token); err != nil {
		return 0, "", err
	}
	s, ok, err := queryParam(r, "shop_id")
	if err != nil {
		return 0, "", err
	} else if !ok {
		return 0, "", invalid("query parameter shop_id is required")
	}
	shopID, err := parseID("shop_id", s)
	if err != nil {
		return 0, "", err
	}
	return shopID, token, nil
}

type cartOp func(ctx context.Context, shopID int64, cartToken string) (*tandem.Reservation, error)

func (h *checkoutHandler) cart(w http.ResponseWriter, r *http.Request, op tandem.Op, fn cartOp) {
	shopID, token, err := cartTarget(r)
	if err != nil {
		h.fail(w, r, op, err)
		return
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	res, err := fn(ctx, shopID, token)
	if err != nil {
		h.fail(w, r, op, err)
		return
	}
	h.answer(w, http.StatusOK, op, res)
}

func (h *checkoutHandler) claim(w http.ResponseWriter, r *http.Request) {
	h.cart(w, r, tandem.OpClaim, h.svc.Claim)
}

func (h *checkoutHandler) release(w http.ResponseWriter, r *http.Request) {
	h.cart(w, r, tandem.OpRelease, h.svc.Release)
}

func (h *checkoutHandler) get(w http.ResponseWriter, r *http.Request) {
	h.cart(w, r, "get", h.svc.Get)
}

// inventoryKey reads a position from the path.
func inventoryKey(r *http.Request) (tandem.Key, error) {
	var k tandem.Key
	var err error
	if k.ShopID, err = parseID("shop_id", chi.URLParam(r, "shop_id")); err != nil {
		return k, err
	}
	if k.ItemID, err = parseID("inventory_item_id", chi.URLParam(r, "inventory_item_id")); err != nil {
		return k, err
	}
	if k.GroupID, err = parseID("group_id", chi.URLParam(r, "group_id")); err != nil {
		return k, err
	}
	return k, nil
}

// onHandBody is the body of PUT /v1/inventory/...; a pointer tells a
// missing on_hand from zero.
type onHandBody struct {
	OnHand *int64 `json:"on_hand"`
}

func (h *checkoutHandler) setOnHand(w http.ResponseWriter, r *http.Request) {
	key, err := inventoryKey(r)
	if err != nil {
		writeError(w, r, h.logger, err)
		return
	}
	var body onHandBody
	if err := decodeJSON(w, r, &body); err != nil {
		writeError(w, r, h.logger, err)
		return
	}
	if body.OnHand == nil || *body.OnHand < 0 || *body.OnHand > tandem.MaxOnHand {
		writeError(w, r, h.logger, invalid("on_hand is required, an integer in 0..%d", tandem.MaxOnHand))
		return
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	inv, err := h.svc.SetOnHand(ctx, key, *body.OnHand)
	if err != nil {
		writeError(w, r, h.logger, err)
		return
	}
	writeJSON(w, http.StatusOK, withStoresMap(inv))
}

func (h *checkoutHandler) inventory(w http.ResponseWriter, r *http.Request) {
	key, err := inventoryKey(r)
	if err != nil {
		writeError(w, r, h.logger, err)
		return
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	inv, err := h.svc.Inventory(ctx, key)
	if err != nil {
		writeError(w, r, h.logger, err)
		return
	}
	writeJSON(w, http.StatusOK, withStoresMap(inv))
}

// withStoresMap returns inv with a Stores map that is never nil, so that the
// answer shows "stores": {} rather than null.
func withStoresMap(inv *tandem.Inventory) *tandem.Inventory {
	if inv.Stores == nil {
		c := *inv
		c.Stores = map[string]tandem.StoreCounters{}
		return &c
	}
	return inv
}

// answer writes a reservation and counts it.
func (h *checkoutHandler) answer(w http.ResponseWriter, status int, op tandem.Op, res *tandem.Reservation) {
	outcome := string(res.Status)
	if res.Replayed {
		outcome = "replayed"
	}
	h.metrics.reservation(string(op), outcome, res.Pod, res.SourceOfTruth).Inc()
	writeReservation(w, status, toReservationJSON(res))
}

// fail writes an error and counts it.
func (h *checkoutHandler) fail(w http.ResponseWriter, r *http.Request, op tandem.Op, err error) {
	code := tandem.ErrorCode(err)
	if codes[code] == 0 {
		code = tandem.EINTERNAL
	}
	h.metrics.reservation(string(op), code, "", "").Inc()
	writeError(w, r, h.logger, err)
}
