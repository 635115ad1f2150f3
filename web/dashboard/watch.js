// tandem dashboard: the migration watch (one card per pod: backfill,
// convergence, gates against their thresholds, charts) and the side-by-side
// view of a divergence (window.TandemWatch). app.js gives the data.
"use strict";

window.TandemWatch = (function () {
  const { KINDS, NA, el, badge, when, pct, num, ms, gateUnit, gateNumber, modeBadge, usesStore } = window.TandemUI;
  const Charts = window.TandemCharts;

  // convergenceOf finds shadow convergence info in a REPORT or POD (the
  // field may be absent: null then).
  function convergenceOf(...objs) {
    for (const o of objs) {
      if (!o) continue;
      for (const c of [o.convergence, o.shadow_convergence, o]) {
        if (c && typeof c === "object" && typeof c.dirty_carts === "number") return c;
      }
    }
    return null;
  }

  function fillCard(card, p, r) {
    const mode = p.mode || (r && r.mode);
    const nodes = [el("h3", {}, p.pod + " ", modeBadge(mode), p.kill_switch ? badge("kill switch engaged", "bad") : null)];
    if (p.transition) nodes.push(transitionView(p.transition));
    if (p.throttle && p.throttle.throttled) nodes.push(throttleView(p.throttle));
    const conv = convergenceOf(r, p);
    if (conv) nodes.push(convergenceView(conv));
    nodes.push(gatesView(p));
    if (r) nodes.push(...chartsView(p.pod, mode, r, p));
    else nodes.push(el("p", { class: "empty", text: "No report for this pod yet." }));
    card.replaceChildren(...nodes);
  }

  function transitionView(t) {
    const total = typeof t.total === "number" ? t.total : 0;
    const copied = typeof t.copied === "number" ? t.copied : 0;
    const share = total > 0 ? Math.min(100, (copied / total) * 100) : null;
    return el("div", { class: "transition", "data-field": "transition" },
      el("strong", { text: "Moving to " + (t.to || "–") + ": " }),
      (t.phase || "") + (total ? " · " + num(copied) + " of " + num(total) + (share !== null ? " (" + share.toFixed(0) + "%)" : "") : "") +
        (typeof t.holds_per_sec === "number" && t.holds_per_sec > 0 ? " · " + num(Math.round(t.holds_per_sec)) + " holds/s" : "") +
        (typeof t.eta_seconds === "number" && t.holds_per_sec > 0 ? " · about " + Math.round(t.eta_seconds) + " s left" : "") +
        (typeof t.resumed === "number" && t.resumed > 0 ? " · resumed after shop " + t.checkpoint : "") +
        (t.yielding_to_buyers ? " · yielding to buyers (one small batch at a time)" : "") +
        (t.started_at ? " · since " + when(t.started_at) : ""),
      total ? el("progress", { max: String(total), value: String(copied), "aria-label": "Backfill progress" }) : null);
  }

  // throttleView says why the pod's background work waits (POD.throttle).
  function throttleView(th) {
    return el("div", { class: "throttle", "data-field": "throttle" },
      el("strong", { text: "Background work: " }), badge("throttled", "warn"),
      " " + (th.reason || th.signal || "") + (th.since ? " · since " + when(th.since) : "") +
        (th.manual && th.signal !== "manual" ? " · manual throttle on (" + th.manual.reason + ")" : ""));
  }

  function convergenceView(c) {
    const parts = [num(c.dirty_carts) + " dirty " + (c.dirty_carts === 1 ? "cart" : "carts")];
    if (c.oldest_dirty_since) parts.push("oldest since " + when(c.oldest_dirty_since));
    const sw = c.last_sweep;
    if (sw) {
      parts.push("last sweep " + when(sw.at) + ": " + num(sw.holds_compared) + " holds compared, " +
        num(sw.carts_differing) + " differing, " + num(sw.carts_converged) + " converged, " + num(sw.left) + " left");
    }
    return el("div", { class: "convergence", "data-field": "convergence" },
      el("strong", { text: "Shadow convergence: " }), c.dirty_carts ? badge(parts.shift(), "warn") : badge(parts.shift(), "good"),
      parts.length ? " " + parts.join(" · ") : "");
  }

  // gateValue shows a gate against its threshold in the gate's unit:
  // "420 of 1,000", "0.240% > 0.100%", "3.78x ≤ 3.00x", "clean".
  function gateValue(c) {
    const unit = gateUnit(c.gate);
    if (unit === "clean") return c.passing ? "clean" : "not clean";
    const v = gateNumber(c.gate, c.value);
    const th = gateNumber(c.gate, c.threshold);
    if (unit === "count" || unit === "seconds") return v + " of " + th;
    return v + (c.passing ? " ≤ " : " > ") + th;
  }

  function gatesView(p) {
    const g = p.gates || {};
    const checks = Array.isArray(g.checks) ? g.checks : [];
    if (p.kill_switch) {
      // Redis serves a killed pod whatever the gates say.
      return el("div", { "data-field": "gates" }, el("p", { class: "gates-head" }, el("strong", { text: "Gates to mysql: " }),
        badge(NA, "muted"), " while the kill switch is engaged"));
    }
    const head = el("p", { class: "gates-head" }, el("strong", { text: "Gates to mysql: " }),
      g.passing ? badge("passing", "good") : badge("failing", "warn"));
    if (!checks.length) return el("div", { "data-field": "gates" }, head);
    return el("div", { "data-field": "gates" }, head, el("table", { class: "compact gates" },
      el("thead", {}, el("tr", {}, ...["Gate", "Value / threshold", "", "Still missing"].map((h) => el("th", { scope: "col", text: h })))),
      el("tbody", {}, ...checks.map((c) => el("tr", { "data-gate": c.gate, class: c.passing ? "" : "failing" },
        el("th", { scope: "row", text: c.gate }),
        el("td", { class: "num", text: gateValue(c) }),
        el("td", {}, c.passing ? badge("pass", "good") : badge("fail", "warn")),
        el("td", { class: "wrap", "data-field": "missing", text: c.passing ? "–" : (c.missing || "") }))))));
  }

  function chartsView(pod, mode, r, p) {
    const samples = Charts.samples(pod);
    const [from, to] = Charts.span(pod, Math.max(Charts.parseWindow(r.window), Charts.HISTORY_MS));
    const windowLabel = r.window || "15m";
    const kinds = KINDS.map((k, i) => ({ key: k, label: k, cls: "s" + i,
      points: samples.map((x) => [x.t, x.kinds[k] || 0]) }));
    const rateCheck = ((p.gates || {}).checks || []).find((c) => c.gate === "max_divergence_rate");
    const threshold = rateCheck ? { value: rateCheck.threshold, label: "gate " + pct(rateCheck.threshold) } : undefined;
    const abort = Charts.abortThreshold();
    // The automatic abort judges a pod whose source of truth is MySQL: on a
    // pod in shadow it is shown for what is to come, without stretching
    // the axis away from the gate.
    const thresholds = abort !== undefined && (mode === "mysql" || mode === "shadow") ? [{ value: abort, label: "abort " + pct(abort) + (mode === "shadow" ? " (on mysql)" : ""), kind: "abort", scale: mode !== "shadow" }] : [];
    const divChart = Charts.lineChart(kinds, from, to, { title: "Divergence rate by kind, " + pod, format: pct, threshold, thresholds, minMax: 0.001 });
    const lat = [];
    ["redis", "mysql"].forEach((store, i) => {
      for (const q of ["p50", "p99"]) {
        const used = usesStore(mode, store);
        lat.push({ key: store + "_" + q, label: (store === "mysql" ? "MySQL " : "Redis ") + q, cls: "l" + i + q,
          points: used ? samples.filter((x) => x.lat[store]).map((x) => [x.t, x.lat[store][q]]) : null });
      }
    });
    const latChart = Charts.lineChart(lat, from, to, { title: "Latency by store, " + pod, format: ms, minMax: 1 });
    return [
      el("figure", { class: "chart-box", "data-chart": "divergence" },
        el("figcaption", { text: "Divergence rate by kind (" + windowLabel + " window, " + samples.length + " samples)" }),
        divChart, Charts.legend(kinds.filter((s) => s.points.some(([, v]) => v > 0)), pct)),
      el("figure", { class: "chart-box", "data-chart": "latency" },
        el("figcaption", { text: "Latency p50 / p99 by store" }), latChart, Charts.legend(lat, ms)),
    ];
  }

  const lineText = (l) => "item " + l.inventory_item_id + " × " + l.quantity + " → group " + l.group_id;
  const groupsOf = (o) => Array.from(new Set((o.lines || []).map((l) => l.group_id))).sort((a, b) => a - b);

  // diffTable shows the source of truth's and the shadow's outcomes side by
  // side, one row per aspect, the rows that differ marked.
  function diffTable(d) {
    const a = d.primary || {};
    const b = d.shadow || {};
    const rows = [
      ["status", a.status || "–", b.status || "–"],
      ["lines", (a.lines || []).map(lineText).join("\n") || "–", (b.lines || []).map(lineText).join("\n") || "–"],
      ["groups", groupsOf(a).join(", ") || "–", groupsOf(b).join(", ") || "–"],
      ["latency", ms(a.latency_ms), ms(b.latency_ms), true],
    ];
    if (a.message || b.message) rows.push(["message", a.message || "–", b.message || "–"]);
    if (a.replayed || b.replayed) rows.push(["replayed", a.replayed ? "yes" : "no", b.replayed ? "yes" : "no"]);
    return el("table", { class: "compact diff", "data-field": "diff" },
      el("thead", {}, el("tr", {},
        el("th", { scope: "col", text: "" }),
        el("th", { scope: "col", text: "SoT · " + (a.store || d.source_of_truth || "–") }),
        el("th", { scope: "col", text: "shadow · " + (b.store || "–") }))),
      el("tbody", {}, ...rows.map(([name, x, y, info]) => el("tr", {
        "data-aspect": name, class: !info && x !== y ? "differs" : "" },
      el("th", { scope: "row", text: name }),
      el("td", { class: "pre", "data-side": "primary", text: x }),
      el("td", { class: "pre", "data-side": "shadow", text: y })))));
  }

  return { convergenceOf, fillCard, diffTable };
})();
