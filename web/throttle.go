package web

import (
	"net/http"

	"github.com/tandemhq/tandem"
)

// throttleHandler serves PUT /admin/pods/{pod}/throttle over an optional
// tandem.ThrottleService.
type throttleHandler struct {
	*adminHandler
	svc tandem.ThrottleService
}

// throttleBody is the body of PUT /admin/pods/{pod}/throttle.
type throttleBody struct {
	changeBody
	// Throttled turns the manual throttle on (true) or off (false).
	Throttled *bool `json:"throttled"`
}

func (h *throttleHandler) set(w http.ResponseWriter, r *http.Request) {
	pod, err := podParam(r)
	if err != nil {
		writeError(w, r, h.logger, err)
		return
	}
	var body throttleBody
	if err := decodeJSON(w, r, &body); err != nil {
		writeError(w, r, h.logger, err)
		return
	}
	if body.Throttled == nil {
		writeError(w, r, h.logger, invalid("throttled is required: true turns the pod's manual throttle on, false turns it off"))
		return
	}
	ch, err := body.change(r)
	if err != nil {
		writeError(w, r, h.logger, err)
		return
	}
	if h.svc == nil {
		writeError(w, r, h.logger, tandem.Errorf(tandem.ENOTFOUND, "this server keeps no throttles"))
		return
	}
	st, err := h.svc.SetThrottle(r.Context(), pod, *body.Throttled, ch)
	switch {
	case err != nil:
		writeError(w, r, h.logger, err)
	case st == nil:
		writeError(w, r, h.logger, errBadAnswer("SetThrottle"))
	default:
		writeJSON(w, http.StatusOK, podJSON(st))
	}
}
