// Package web serves tandem over HTTP: the checkout API (reservations and
// inventory, on `listen`) and the admin API (rollout, kill switch,
// divergences, audits, metrics and the dashboard, on `admin_listen`). It
// speaks the HTTP contract of docs/api.md (web/openapi.yaml) and is the only
// place where error codes are
// mapped to HTTP statuses.
package web

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5/middleware"
	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"go.uber.org/zap"

	"github.com/tandemhq/tandem"
)

// MaxBodyBytes is the largest request body either API reads (64 KiB);
// a larger one answers 413 payload_too_large.
const MaxBodyBytes = 64 << 10

// codes maps every error code of the contract to its HTTP status. Codes
// missing here are answered as internal errors.
var codes = map[string]int{
	tandem.EINVALID:              http.StatusBadRequest,
	tandem.EUNAUTHORIZED:         http.StatusUnauthorized,
	tandem.EFORBIDDEN:            http.StatusForbidden,
	tandem.ENOTFOUND:             http.StatusNotFound,
	tandem.EUNKNOWNSHOP:          http.StatusNotFound,
	tandem.EUNKNOWNPOD:           http.StatusNotFound,
	tandem.EINSUFFICIENT:         http.StatusConflict,
	tandem.ECONFLICT:             http.StatusConflict,
	tandem.ETRANSITIONREFUSED:    http.StatusConflict,
	tandem.EALREADYCLAIMED:       http.StatusConflict,
	tandem.EGONE:                 http.StatusGone,
	tandem.EPAYLOADTOOLARGE:      http.StatusRequestEntityTooLarge,
	tandem.EUNSUPPORTEDMEDIATYPE: http.StatusUnsupportedMediaType,
	tandem.EUNAVAILABLE:          http.StatusServiceUnavailable,
	tandem.EINTERNAL:             http.StatusInternalServerError,
}

// ErrorStatusCode returns the HTTP status of an error code; unknown codes
// are internal errors (500).
func ErrorStatusCode(code string) int {
	if s, ok := codes[code]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// errorBody is the error JSON of every non-2xx answer:
// {"error": {"code", "message", "details"}}.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code    string         `json:"code"`
	Message string         `json:"message"`
	Details map[string]any `json:"details"`
}

// maxMessageLen bounds an error message that may echo client input.
const maxMessageLen = 300

// writeError answers err as the error JSON. Internal errors (and codes the
// contract does not know) are logged with the request id and answered with
// a generic message; nothing else is logged as an error.
func writeError(w http.ResponseWriter, r *http.Request, logger *zap.Logger, err error) {
	code, msg, details := tandem.ErrorCode(err), tandem.ErrorMessage(err), tandem.ErrorDetails(err)
	switch {
	case code == tandem.EINTERNAL && r.Context().Err() != nil && errors.Is(err, r.Context().Err()):
		// The client went away or its deadline passed: nobody reads the
		// answer, and it is not a fault of ours.
		logger.Debug("request abandoned", zap.String("request_id", middleware.GetReqID(r.Context())), zap.Error(err))
		code, msg, details = tandem.EUNAVAILABLE, "request cancelled", nil
	case code == tandem.EINTERNAL && errors.Is(err, context.DeadlineExceeded):
		code, msg, details = tandem.EUNAVAILABLE, "the source of truth did not answer in time", nil
	case code == tandem.EINTERNAL || codes[code] == 0:
		logger.Error("internal error",
			zap.String("request_id", middleware.GetReqID(r.Context())),
			zap.String("method", r.Method),
			zap.String("path", r.URL.Path),
			zap.Error(err))
		code, msg, details = tandem.EINTERNAL, "internal error", nil
	}
	if details == nil {
		details = map[string]any{}
	}
	if len(msg) > maxMessageLen {
		msg = truncate(msg, maxMessageLen)
	}
	writeJSON(w, ErrorStatusCode(code), errorBody{Error: errorDetail{Code: code, Message: msg, Details: details}})
}

// The header values of every JSON answer, shared by all of them (net/http
// copies a handler's header when it writes it, and nothing changes these).
var (
	jsonContentType = []string{"application/json; charset=utf-8"}
	noStore         = []string{"no-store"}
	noSniff         = []string{"nosniff"}
)

// writeJSON answers v as JSON with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	h := w.Header()
	h["Content-Type"] = jsonContentType
	h["Cache-Control"] = noStore
	h["X-Content-Type-Options"] = noSniff
	w.WriteHeader(status)
	// An encoding error here means the client went away mid-answer; there
	// is nobody left to tell.
	_ = json.NewEncoder(w).Encode(v)
}

// invalid returns an EINVALID error.
func invalid(format string, args ...any) error {
	return tandem.Errorf(tandem.EINVALID, format, args...)
}

// decodeJSON reads the request body into v strictly: Content-Type must be
// application/json, the body at most MaxBodyBytes, one JSON value whose
// member names match the fields exactly (case included: `CART_TOKEN` is
// not `cart_token`), no unknown or repeated members, valid UTF-8, and
// numbers that fit their fields. encoding/json matches names without case
// even with DisallowUnknownFields, so the body is decoded with the
// case-sensitive v2 semantics of go-json-experiment/json.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	if err := checkJSONBody(r); err != nil {
		return err
	}
	return decodeStrict(w, r.Body, v)
}

// checkJSONBody checks what decodeJSON checks before reading the body: its
// Content-Type, and its Content-Length when the client sent one.
func checkJSONBody(r *http.Request) error {
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		// The exact type needs no parsing; anything else (parameters, case,
		// spaces) is parsed.
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || mt != "application/json" {
			return tandem.Errorf(tandem.EUNSUPPORTEDMEDIATYPE, "request body must have Content-Type: application/json")
		}
	}
	if r.ContentLength > MaxBodyBytes {
		return tooLarge()
	}
	return nil
}

// decodeStrict reads body into v as decodeJSON does, after its checks.
func decodeStrict(w http.ResponseWriter, body io.ReadCloser, v any) error {
	data, err := io.ReadAll(http.MaxBytesReader(w, body, MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return tooLarge()
		}
		return invalid("request body could not be read")
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return invalid("request body is empty; want a JSON object")
	}
	if err := jsonv2.Unmarshal(data, v, jsonv2.RejectUnknownMembers(true)); err != nil {
		return decodeError(err)
	}
	return nil
}

func tooLarge() error {
	return tandem.Errorf(tandem.EPAYLOADTOOLARGE, "request body is over %d bytes", MaxBodyBytes)
}

// decodeError translates a JSON decoding error into a contract error.
func decodeError(err error) error {
	var (
		se  *jsontext.SyntacticError
		sem *jsonv2.SemanticError
	)
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF):
		return invalid("request body is truncated JSON")
	case errors.As(err, &se):
		if errors.Is(se.Err, jsontext.ErrDuplicateName) {
			return invalid("member %s appears twice", memberName(se.JSONPointer))
		}
		return invalid("malformed JSON at offset %d", se.ByteOffset)
	case errors.As(err, &sem):
		field := memberName(sem.JSONPointer)
		switch {
		case errors.Is(sem.Err, jsonv2.ErrUnknownName):
			return invalid("unknown field %s", strconv.Quote(field))
		case field == "":
			return invalid("request body must be a JSON object")
		case sem.GoType != nil && strings.HasPrefix(sem.GoType.Kind().String(), "int"):
			return invalid("%s must be an integer in range", field)
		}
		return invalid("%s has the wrong type (got %s)", field, sem.JSONKind)
	}
	return invalid("invalid JSON body")
}

// memberName names the member at a JSON pointer the way encoding/json did:
// the object member names joined by dots, array indexes left out
// (/lines/0/quantity is lines.quantity).
func memberName(p jsontext.Pointer) string {
	var names []string
	for tok := range p.Tokens() {
		if tok == "" || strings.Trim(tok, "0123456789") != "" {
			names = append(names, tok)
		}
	}
	return strings.Join(names, ".")
}

// parseID parses a decimal id > 0 strictly: digits only, no sign, no
// leading zero, within int64.
func parseID(name, s string) (int64, error) {
	if s == "" || len(s) > 19 || s[0] == '0' {
		return 0, invalid("%s must be an integer > 0", name)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, invalid("%s must be an integer > 0", name)
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, invalid("%s must be an integer > 0", name)
	}
	return n, nil
}

// queryParam returns the single value of a query parameter, "" when absent;
// repeating it is invalid.
func queryParam(r *http.Request, name string) (string, bool, error) {
	vs, ok := r.URL.Query()[name]
	if !ok {
		return "", false, nil
	}
	if len(vs) != 1 {
		return "", true, invalid("query parameter %s must be given once", name)
	}
	return vs[0], true, nil
}

// parseLimit reads an optional limit query parameter in 1..1000.
func parseLimit(r *http.Request) (int, error) {
	s, ok, err := queryParam(r, "limit")
	if err != nil {
		return 0, err
	} else if !ok {
		return defaultLimit, nil
	}
	n, err := parseID("limit", s)
	if err != nil || n > maxLimit {
		return 0, invalid("limit must be an integer in 1..%d", maxLimit)
	}
	return int(n), nil
}

// Limits of list queries of the admin API.
const (
	defaultLimit = 100
	maxLimit     = 1000
)

// truncate cuts s to at most n bytes on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// utc returns t in UTC, or nil for the zero time.
func utc(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}
