package web

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/tandemhq/tandem"
)

// planHandler serves /admin/plan over an optional tandem.PlanService.
type planHandler struct {
	*adminHandler
	plan tandem.PlanService
}

// planStartBody is the body of POST /admin/plan/start.
type planStartBody struct {
	Reason     string       `json:"reason"`
	Actor      string       `json:"actor"`
	ShadowSoak *string      `json:"shadow_soak"`
	MySQLSoak  *string      `json:"mysql_soak"`
	FinalMode  *tandem.Mode `json:"final_mode"`
	Parallel   *int         `json:"parallel"`
	Approval   *bool        `json:"approval"`
	// ConfirmWebhooks replaces the configured ones ([] asks none).
	ConfirmWebhooks *[]string `json:"confirm_webhooks"`
	ConfirmTimeout  *string   `json:"confirm_timeout"`
	// Rehearsal replaces the configured rehearsal gate's settings
	// ({"speed": 0} turns it off).
	Rehearsal *planRehearsalBody `json:"rehearsal"`
}

// planRehearsalBody is the rehearsal gate of POST /admin/plan/start.
type planRehearsalBody struct {
	Speed  *float64 `json:"speed"`
	P99Max *string  `json:"p99_max"`
}

// planPodBody is the body of POST /admin/plan/approve and /skip.
type planPodBody struct {
	Reason string `json:"reason"`
	Actor  string `json:"actor"`
	Pod    string `json:"pod"`
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
	if !h.available(w, r) {
		return
	}
	var body planStartBody
	if err := decodeJSON(w, r, &body); err != nil {
		writeError(w, r, h.logger, err)
		return
	}
	ch, err := changeBody{Reason: body.Reason, Actor: body.Actor}.change(r)
	if err != nil {
		writeError(w, r, h.logger, err)
		return
	}
	st := tandem.PlanStart{Change: ch, FinalMode: body.FinalMode, Parallel: body.Parallel, Approval: body.Approval}
	if body.ConfirmWebhooks != nil {
		st.ConfirmWebhooks = nonNil(*body.ConfirmWebhooks)
	}
	var rehearsalP99Max *string
	if body.Rehearsal != nil {
		st.RehearsalSpeed, rehearsalP99Max = body.Rehearsal.Speed, body.Rehearsal.P99Max
	}
	for _, d := range []struct {
		in   *string
		out  **time.Duration
		name string
	}{{body.ShadowSoak, &st.ShadowSoak, "shadow_soak"}, {body.MySQLSoak, &st.MySQLSoak, "mysql_soak"},
		{body.ConfirmTimeout, &st.ConfirmTimeout, "confirm_timeout"}, {rehearsalP99Max, &st.RehearsalP99Max, "rehearsal.p99_max"}} {
		if d.in == nil {
			continue
		}
		v, err := time.ParseDuration(*d.in)
		if err != nil || v < 0 {
			writeError(w, r, h.logger, invalid("%s must be a duration like \"30m\", got %q", d.name, *d.in))
			return
		}
		*d.out = &v
	}
	plan, err := h.plan.StartPlan(r.Context(), st)
	h.answer(w, r, "StartPlan", plan, err)
}

func (h *planHandler) pause(w http.ResponseWriter, r *http.Request) {
	h.change(w, r, "PausePlan", func(s tandem.PlanService) func(context.Context, tandem.Change) (*tandem.Plan, error) {
		return s.PausePlan
	})
}

func (h *planHandler) resume(w http.ResponseWriter, r *http.Request) {
	h.change(w, r, "ResumePlan", func(s tandem.PlanService) func(context.Context, tandem.Change) (*tandem.Plan, error) {
		return s.ResumePlan
	})
}

func (h *planHandler) abort(w http.ResponseWriter, r *http.Request) {
	h.change(w, r, "AbortPlan", func(s tandem.PlanService) func(context.Context, tandem.Change) (*tandem.Plan, error) {
		return s.AbortPlan
	})
}

func (h *planHandler) approve(w http.ResponseWriter, r *http.Request) {
	h.podChange(w, r, "ApprovePlan", func(s tandem.PlanService) func(context.Context, tandem.Change, string) (*tandem.Plan, error) {
		return s.ApprovePlan
	})
}

func (h *planHandler) skip(w http.ResponseWriter, r *http.Request) {
	h.podChange(w, r, "SkipPlan", func(s tandem.PlanService) func(context.Context, tandem.Change, string) (*tandem.Plan, error) {
		return s.SkipPlan
	})
}

// change decodes a change body and applies it with the method that pick
// selects (picked only once the service is known to exist).
func (h *planHandler) change(w http.ResponseWriter, r *http.Request, method string,
	pick func(tandem.PlanService) func(context.Context, tandem.Change) (*tandem.Plan, error)) {
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

// podChange is change for the bodies that name a pod.
func (h *planHandler) podChange(w http.ResponseWriter, r *http.Request, method string,
	pick func(tandem.PlanService) func(context.Context, tandem.Change, string) (*tandem.Plan, error)) {
	if !h.available(w, r) {
		return
	}
	var body planPodBody
	if err := decodeJSON(w, r, &body); err != nil {
		writeError(w, r, h.logger, err)
		return
	}
	ch, err := changeBody{Reason: body.Reason, Actor: body.Actor}.change(r)
	if err != nil {
		writeError(w, r, h.logger, err)
		return
	}
	if body.Pod == "" {
		writeError(w, r, h.logger, invalid("pod is required"))
		return
	}
	st, err := pick(h.plan)(r.Context(), ch, body.Pod)
	h.answer(w, r, method, st, err)
}

// answer writes the plan or the error; a conflict names the phase that
// caused it, so that a script can tell "already running" from "done".
func (h *planHandler) answer(w http.ResponseWriter, r *http.Request, method string, st *tandem.Plan, err error) {
	switch {
	case err != nil:
		var te *tandem.Error
		if st != nil && errors.As(err, &te) && te.Code == tandem.ECONFLICT {
			err = te.WithDetail("phase", string(st.Phase))
		}
		writeError(w, r, h.logger, err)
	case st == nil:
		writeError(w, r, h.logger, errBadAnswer(method))
	default:
		writeJSON(w, http.StatusOK, planJSON(st))
	}
}

// planJSON never shows a list as null.
func planJSON(st *tandem.Plan) *tandem.Plan {
	c := *st
	c.Order = nonNil(c.Order)
	c.Promoted = nonNil(c.Promoted)
	c.Pods = nonNil(c.Pods)
	c.Settings.ConfirmWebhooks = nonNil(c.Settings.ConfirmWebhooks)
	for i := range c.Pods {
		c.Pods[i].Gates.Checks = nonNil(c.Pods[i].Gates.Checks)
	}
	return &c
}
