package web

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/tandemhq/tandem"
)

// SummarySample bounds the divergences GET /admin/divergences/summary
// groups: the newest this many matching the filter. Grouping happens in Go
// over this bounded sample rather than in SQL, because a divergence's
// position (item and group) lives inside its JSON outcomes; the answer says
// when the sample was full ("truncated"), so the counts are then a floor.
const SummarySample = maxLimit

// HistorySource keeps recent REPORT samples per pod (GET /admin/history).
type HistorySource interface {
	// History returns the pod's samples, oldest first; all pods' when pod
	// is "".
	History(pod string) []tandem.ReportSample
}

// divergenceFilter reads the pod, kind and since query parameters of the
// divergence routes. since is an RFC 3339 time or a duration back from now
// ("1h").
func divergenceFilter(r *http.Request, now time.Time) (tandem.DivergenceFilter, error) {
	var f tandem.DivergenceFilter
	if pod, ok, err := queryParam(r, "pod"); err != nil {
		return f, err
	} else if ok && pod != "" {
		if err := validatePodName(pod); err != nil {
			return f, err
		}
		f.Pod = pod
	}
	if kind, ok, err := queryParam(r, "kind"); err != nil {
		return f, err
	} else if ok && kind != "" {
		if !slices.Contains(tandem.DivergenceKinds, tandem.DivergenceKind(kind)) {
			return f, invalid("kind must be one of %s", tandem.KindNames(", "))
		}
		f.Kind = tandem.DivergenceKind(kind)
	}
	if since, ok, err := queryParam(r, "since"); err != nil {
		return f, err
	} else if ok && since != "" {
		if d, err := time.ParseDuration(since); err == nil && d > 0 {
			f.Since = now.Add(-d)
		} else if t, err := time.Parse(time.RFC3339Nano, since); err == nil {
			f.Since = t
		} else {
			return f, invalid("since must be an RFC 3339 time (2026-01-02T15:04:05Z) or a duration back from now (1h), got %q", truncate(since, 64))
		}
	}
	return f, nil
}

// divergenceFormat reads the format query parameter: json (default), csv
// or jsonl.
func divergenceFormat(r *http.Request) (string, error) {
	format, _, err := queryParam(r, "format")
	if err != nil {
		return "", err
	}
	switch format {
	case "", "json":
		return "json", nil
	case "csv", "jsonl":
		return format, nil
	}
	return "", invalid("format must be json, csv or jsonl, got %q", truncate(format, 32))
}

// writeDivergences answers GET /admin/divergences in the format asked for;
// every divergence carries its explanation (an extension).
func writeDivergences(w http.ResponseWriter, format string, divs []tandem.Divergence) {
	out := make([]tandem.ExplainedDivergence, len(divs))
	for i, d := range divs {
		out[i] = tandem.Explain(d)
	}
	h := w.Header()
	h["Cache-Control"] = noStore
	switch format {
	case "jsonl":
		h.Set("Content-Type", "application/jsonl; charset=utf-8")
		h.Set("Content-Disposition", `attachment; filename="divergences.jsonl"`)
		bw := bufio.NewWriter(w)
		enc := json.NewEncoder(bw)
		for _, d := range out {
			_ = enc.Encode(d)
		}
		_ = bw.Flush()
	case "csv":
		h.Set("Content-Type", "text/csv; charset=utf-8")
		h.Set("Content-Disposition", `attachment; filename="divergences.csv"`)
		cw := csv.NewWriter(w)
		_ = cw.Write(divergenceCSVHeader)
		for _, d := range out {
			_ = cw.Write(divergenceCSVRow(d))
		}
		cw.Flush()
	default:
		writeJSON(w, http.StatusOK, map[string]any{"divergences": out})
	}
}

var divergenceCSVHeader = []string{"id", "at", "pod", "op", "kind", "cart_token", "shop_id",
	"inventory_item_id", "group_id", "source_of_truth", "primary_store", "primary_status", "primary_message",
	"shadow_store", "shadow_status", "shadow_message", "explanation"}

func divergenceCSVRow(d tandem.ExplainedDivergence) []string {
	p := tandem.PositionOf(d.Divergence)
	return []string{strconv.FormatInt(d.ID, 10), d.At.UTC().Format(time.RFC3339Nano), d.Pod, string(d.Op), string(d.Kind),
		d.CartToken, strconv.FormatInt(p.ShopID, 10), strconv.FormatInt(p.ItemID, 10), strconv.FormatInt(p.GroupID, 10),
		d.SourceOfTruth, d.Primary.Store, string(d.Primary.Status), d.Primary.Message,
		d.Shadow.Store, string(d.Shadow.Status), d.Shadow.Message, d.Explanation}
}

// divergenceSummary answers GET /admin/divergences/summary.
func (h *adminHandler) divergenceSummary(w http.ResponseWriter, r *http.Request) {
	f, err := divergenceFilter(r, time.Now())
	if err != nil {
		writeError(w, r, h.logger, err)
		return
	}
	f.Limit = SummarySample
	divs, err := h.svc.Divergences(r.Context(), f)
	if err != nil {
		writeError(w, r, h.logger, err)
		return
	}
	body := map[string]any{
		"groups":    tandem.GroupDivergences(divs),
		"sampled":   len(divs),
		"truncated": len(divs) >= SummarySample,
	}
	if !f.Since.IsZero() {
		body["since"] = f.Since.UTC()
	}
	writeJSON(w, http.StatusOK, body)
}

// config answers GET /admin/config: the effective configuration, secrets
// redacted.
func (h *adminHandler) config(w http.ResponseWriter, r *http.Request) {
	if h.effectiveConfig == nil {
		writeError(w, r, h.logger, tandem.Errorf(tandem.ENOTFOUND, "this server does not publish its configuration"))
		return
	}
	writeJSON(w, http.StatusOK, h.effectiveConfig())
}

// history answers GET /admin/history?pod=: the REPORT samples of the last
// hour, oldest first.
func (h *adminHandler) history(w http.ResponseWriter, r *http.Request) {
	pod, _, err := queryParam(r, "pod")
	if err != nil {
		writeError(w, r, h.logger, err)
		return
	}
	if pod != "" {
		if err := validatePodName(pod); err != nil {
			writeError(w, r, h.logger, err)
			return
		}
	}
	if h.historySource == nil {
		writeJSON(w, http.StatusOK, map[string]any{"samples": []tandem.ReportSample{}})
		return
	}
	samples := nonNil(h.historySource.History(pod))
	for i := range samples {
		// As in REPORT, the maps are objects, never null.
		if samples[i].LatencyMS == nil {
			samples[i].LatencyMS = map[string]tandem.LatencyStats{}
		}
		if samples[i].Divergences == nil {
			samples[i].Divergences = map[tandem.DivergenceKind]int64{}
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"samples": samples})
}
