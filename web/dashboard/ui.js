// tandem dashboard: small DOM and formatting helpers that the page's
// scripts share (window.TandemUI). No data lives here.
"use strict";

window.TandemUI = (function () {
  const KINDS = ["outcome_mismatch", "location_mismatch", "shadow_error",
    "shadow_timeout", "shadow_dropped", "state_drift"];
  // STORES lists the stores each mode writes: a store outside it has no
  // latency to show (n/a, not 0).
  const STORES = { redis: ["redis"], shadow: ["redis", "mysql"], mysql: ["mysql", "redis"], mysql_only: ["mysql"] };
  const $ = (sel, root) => (root || document).querySelector(sel);

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") e.className = v;
      else if (k === "text") e.textContent = v;
      else e.setAttribute(k, v === true ? "" : v);
    }
    for (const c of children) {
      if (c === null || c === undefined || c === false) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }

  function badge(text, kind) {
    return el("span", { class: "badge " + (kind || ""), text: text });
  }

  function when(iso) {
    if (!iso || iso.startsWith("0001-")) return "–";
    const d = new Date(iso);
    if (isNaN(d)) return iso;
    const p = (n) => String(n).padStart(2, "0");
    return d.getFullYear() + "-" + p(d.getMonth() + 1) + "-" + p(d.getDate()) + " " +
      p(d.getHours()) + ":" + p(d.getMinutes()) + ":" + p(d.getSeconds());
  }

  function timeCell(iso) {
    return el("td", { title: iso || "" }, el("time", { datetime: iso || "", text: when(iso) }));
  }

  const pct = (r) => (typeof r === "number" ? (r * 100).toFixed(3) + "%" : "–");
  const num = (n) => (typeof n === "number" ? n.toLocaleString("en-US") : "–");
  const ms = (v) => (typeof v === "number" ? v.toFixed(2) + " ms" : "–");
  // NA stands where there is nothing to show: no comparison to take a rate
  // of, no latency sample, no gate for a killed pod.
  const NA = "n/a";
  // rateOf is a divergence rate, n/a when nothing was compared.
  const rateOf = (r, comparisons) => (comparisons ? pct(r) : NA);

  // gateUnit mirrors tandem.GateUnit: the unit of a gate's value and
  // threshold, by its name.
  // As tandem.GateUnit: the p99 gate keeps its name, its values are milliseconds.
  const GATE_UNITS = { min_comparisons: "count", max_divergence_rate: "ratio", audit_clean: "clean", min_soak: "seconds",
    mysql_p99_factor: "ms", rehearsal: "ms" };
  const UNIT_SUFFIXES = [["_rate", "ratio"], ["_factor", "factor"], ["_ms", "ms"], ["_seconds", "seconds"],
    ["_soak", "seconds"], ["_count", "count"], ["_comparisons", "count"]];
  function gateUnit(gate) {
    if (GATE_UNITS[gate]) return GATE_UNITS[gate];
    const hit = UNIT_SUFFIXES.find(([suffix]) => (gate || "").endsWith(suffix));
    return hit ? hit[1] : "";
  }

  function seconds(v) {
    if (v < 60) return (Math.round(v * 10) / 10) + "s";
    const m = Math.floor(Math.round(v) / 60);
    const sec = Math.round(v) % 60;
    return m + "m" + (sec ? sec + "s" : "");
  }

  // gateNumber formats a gate's value or threshold in its unit: 660,
  // 0.050%, 3.78x, 9.58 ms, 6.7s.
  function gateNumber(gate, v) {
    if (typeof v !== "number") return "–";
    switch (gateUnit(gate)) {
      case "ratio": return pct(v);
      case "factor": return v.toFixed(2) + "x";
      case "ms": return ms(v);
      case "seconds": return seconds(v);
      case "clean": return v >= 1 ? "clean" : "none clean";
      case "count": if (Number.isInteger(v)) return num(v);
    }
    return String(Number(v.toPrecision(4)));
  }

  // syncRows updates a tbody in place, one row per key, so that ticked boxes,
  // focus and open details survive the refresh every two seconds.
  function syncRows(tbody, items, keyOf, create, update) {
    const existing = new Map();
    for (const tr of Array.from(tbody.rows)) existing.set(tr.dataset.key, tr);
    let prev = null;
    for (const item of items) {
      const key = String(keyOf(item));
      let tr = existing.get(key);
      if (tr) existing.delete(key);
      else {
        tr = create(item);
        tr.dataset.key = key;
      }
      if (update) update(tr, item);
      const want = prev ? prev.nextSibling : tbody.firstChild;
      if (want !== tr) tbody.insertBefore(tr, want);
      prev = tr;
    }
    for (const tr of existing.values()) tr.remove();
  }

  function modeBadge(mode) {
    return badge(mode || "–", "mode-" + (mode || "unknown"));
  }

  // usesStore says whether a pod in mode writes store; an unknown mode
  // shows every store.
  function usesStore(mode, store) {
    const stores = STORES[mode];
    return !stores || stores.includes(store);
  }

  return { KINDS, STORES, NA, $, el, badge, when, timeCell, pct, num, ms, rateOf, gateUnit, gateNumber, syncRows, modeBadge, usesStore };
})();
