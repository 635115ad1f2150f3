package web

import (
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/tandemhq/tandem"
)

// captureHandler serves /admin/pods/{pod}/capture and /admin/captures over
// an optional tandem.CaptureService.
type captureHandler struct {
	*adminHandler
	captures tandem.CaptureService
}

// captureBody is the body of POST /admin/pods/{pod}/capture.
type captureBody struct {
	Reason   string `json:"reason"`
	Actor    string `json:"actor"`
	Duration string `json:"duration"`
	MaxOps   *int64 `json:"max_ops"`
	// KeepTokens records cart tokens as they are (default: hashed).
	KeepTokens bool `json:"keep_tokens"`
}

// available answers 404 not_found when this server records no captures.
func (h *captureHandler) available(w http.ResponseWriter, r *http.Request) bool {
	if h.captures == nil {
		writeError(w, r, h.logger, tandem.Errorf(tandem.ENOTFOUND, "this server records no captures"))
		return false
	}
	return true
}

func (h *captureHandler) start(w http.ResponseWriter, r *http.Request) {
	pod, err := podParam(r)
	if err != nil {
		writeError(w, r, h.logger, err)
		return
	}
	var body captureBody
	if err := decodeJSON(w, r, &body); err != nil {
		writeError(w, r, h.logger, err)
		return
	}
	ch, err := changeBody{Reason: body.Reason, Actor: body.Actor}.change(r)
	if err != nil {
		writeError(w, r, h.logger, err)
		return
	}
	d, err := time.ParseDuration(body.Duration)
	if err != nil || d <= 0 || d > tandem.MaxCaptureDuration {
		writeError(w, r, h.logger, invalid("duration must be a duration like \"10m\", above 0 and at most %s, got %q", tandem.MaxCaptureDuration, body.Duration))
		return
	}
	req := tandem.CaptureRequest{Change: ch, Duration: d, KeepTokens: body.KeepTokens}
	if body.MaxOps != nil {
		if *body.MaxOps < 1 || *body.MaxOps > tandem.MaxCaptureMaxOps {
			writeError(w, r, h.logger, invalid("max_ops must be an integer in 1..%d", tandem.MaxCaptureMaxOps))
			return
		}
		req.MaxOps = *body.MaxOps
	}
	if !h.available(w, r) {
		return
	}
	info, err := h.captures.StartCapture(r.Context(), pod, req)
	if err != nil {
		writeError(w, r, h.logger, err)
		return
	}
	writeJSON(w, http.StatusOK, info)
}

func (h *captureHandler) list(w http.ResponseWriter, r *http.Request) {
	if !h.available(w, r) {
		return
	}
	list, err := h.captures.Captures(r.Context())
	if err != nil {
		writeError(w, r, h.logger, err)
		return
	}
	if list == nil {
		list = []tandem.CaptureInfo{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"captures": list})
}

// validCaptureID accepts the ids a recorder makes: letters, digits, '-'.
func validCaptureID(id string) bool {
	if id == "" || len(id) > 100 {
		return false
	}
	return strings.IndexFunc(id, func(c rune) bool {
		return !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-')
	}) < 0
}

// download answers the capture's file as an attachment.
func (h *captureHandler) download(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	if !validCaptureID(id) {
		writeError(w, r, h.logger, invalid("capture id must be letters, digits and '-'"))
		return
	}
	if !h.available(w, r) {
		return
	}
	rc, _, err := h.captures.OpenCapture(r.Context(), id)
	if err != nil {
		writeError(w, r, h.logger, err)
		return
	}
	defer rc.Close()
	hd := w.Header()
	hd.Set("Content-Type", "application/zstd")
	hd.Set("Content-Disposition", `attachment; filename="`+id+`.tcap"`)
	hd.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	// A copy error means the client went away; nobody is left to tell.
	_, _ = io.Copy(w, rc)
}
