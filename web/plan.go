package web

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/tandemhq/tandem"
)

// PlanStatus is the rollout plan as the admin API answers it (GET
// /admin/plan and every plan change).
type PlanStatus struct {
	// Phase is one of idle, running, paused, aborted, done.
	Phase string `json:"phase"`
	// Order is every pod in rollout order, smallest first.
	Order []string `json:"order"`
	// Promoted lists the pods the plan moved to mysql, in order.
	Promoted []string `json:"promoted"`
	// SoakUntil is when the last promoted pod has soaked long enough.
	SoakUntil *time.Time `json:"soak_until,omitempty"`
	// Waiting says why the plan does not advance, or why it stopped.
	Waiting string `json:"waiting,omitempty"`
}

// PlanService runs the pod-by-pod rollout plan. It is declared here, by
// its one consumer, so that web does not depend on rollout; cmd/tandem
// adapts the rollout controller to it.
//
// The changes return EINVALID (bad change), ECONFLICT (the plan's phase
// does not allow it: start while running, pause or abort while not
// running) and EUNAVAILABLE. With ECONFLICT they may also return the
// plan's current status, which the answer reports as details.phase.
type PlanService interface {
	// PlanStatus returns the plan's current state.
	PlanStatus(ctx context.Context) (*PlanStatus, error)
	// StartPlan starts the plan, or resumes a paused one.
	StartPlan(ctx context.Context, ch tandem.Change) (*PlanStatus, error)
	// PausePlan stops a running plan from advancing until StartPlan.
	PausePlan(ctx context.Context, ch tandem.Change) (*PlanStatus, error)
	// AbortPlan stops a running or paused plan for good.
	AbortPlan(ctx context.Context, ch tandem.Change) (*PlanStatus, error)
}

// planHandler serves /admin/plan over an optional PlanService.
type planHandler struct {
	*adminHandler
	plan PlanService
}

// available answers 404 not_found when this server runs no plan.
func (h *planHandler) available(w http.ResponseWriter, r *http.Request) bool {
	if h.plan == nil {
		writeError(w, r, h.logger, tandem.Errorf(tandem.ENOTFOUND, "this server runs no rollout plan"))
		return false
	}
	return true
}

func (h *planHandler) status(w http.ResponseWriter, r *http.Request) {
	if !h.available(w, r) {
		return
	}
	st, err := h.plan.PlanStatus(r.Context())
	h.answer(w, r, "PlanStatus", st, err)
}

func (h *planHandler) start(w http.ResponseWriter, r *http.Request) {
	h.change(w, r, "StartPlan", func(s PlanService) func(context.Context, tandem.Change) (*PlanStatus, error) {
		return s.StartPlan
	})
}

func (h *planHandler) pause(w http.ResponseWriter, r *http.Request) {
	h.change(w, r, "PausePlan", func(s PlanService) func(context.Context, tandem.Change) (*PlanStatus, error) {
		return s.PausePlan
	})
}

func (h *planHandler) abort(w http.ResponseWriter, r *http.Request) {
	h.change(w, r, "AbortPlan", func(s PlanService) func(context.Context, tandem.Change) (*PlanStatus, error) {
		return s.AbortPlan
	})
}

// change decodes a change body and applies it with the method that pick
// selects (picked only once the service is known to exist).
func (h *planHandler) change(w http.ResponseWriter, r *http.Request, method string,
	pick func(PlanService) func(context.Context, tandem.Change) (*PlanStatus, error)) {
	if !h.available(w, r) {
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
	st, err := pick(h.plan)(r.Context(), ch)
	h.answer(w, r, method, st, err)
}

// answer writes the plan or the error; a conflict names the phase that
// caused it, so that a script can tell "already running" from "done".
func (h *planHandler) answer(w http.ResponseWriter, r *http.Request, method string, st *PlanStatus, err error) {
	switch {
	case err != nil:
		var te *tandem.Error
		if st != nil && errors.As(err, &te) && te.Code == tandem.ECONFLICT {
			err = te.WithDetail("phase", st.Phase)
		}
		writeError(w, r, h.logger, err)
	case st == nil:
		writeError(w, r, h.logger, errBadAnswer(method))
	default:
		writeJSON(w, http.StatusOK, planJSON(st))
	}
}

// planJSON never shows order or promoted as null.
func planJSON(st *PlanStatus) *PlanStatus {
	c := *st
	c.Order = nonNil(c.Order)
	c.Promoted = nonNil(c.Promoted)
	return &c
}
