// tandem dashboard charts: a ring buffer of report samples per pod and
// line charts drawn as plain SVG polylines (no library, nothing fetched).
// app.js polls GET /admin/report and feeds every answer to TandemCharts.record.
"use strict";

window.TandemCharts = (function () {
  const SVG = "http://www.w3.org/2000/svg";
  const W = 360;
  const H = 150;
  const PAD = { left: 56, right: 8, top: 10, bottom: 22 };
  // MAX_SAMPLES bounds a pod's buffer whatever the window (15 m at 2 s is 450).
  const MAX_SAMPLES = 1800;
  // HISTORY_MS is how far back the charts reach: the server keeps an hour
  // of samples (GET /admin/history), the tab its own since it opened.
  const HISTORY_MS = 3600e3;

  // parseWindow turns a Go duration ("15m", "1h30m", "90s") into ms; 15 m
  // when it cannot be read.
  function parseWindow(s) {
    const re = /(\d+(?:\.\d+)?)(h|ms|m|s)/g;
    let total = 0;
    let m;
    while ((m = re.exec(String(s || ""))) !== null) {
      total += parseFloat(m[1]) * { h: 3600e3, m: 60e3, s: 1e3, ms: 1 }[m[2]];
    }
    return total > 0 ? total : 15 * 60e3;
  }

  // RingBuffer keeps the newest cap items.
  class RingBuffer {
    constructor(cap) {
      this.cap = cap;
      this.items = [];
    }
    push(item) {
      this.items.push(item);
      if (this.items.length > this.cap) this.items.splice(0, this.items.length - this.cap);
    }
    // since drops the items older than t (items are in time order).
    since(t) {
      let i = 0;
      while (i < this.items.length && this.items[i].t < t) i++;
      if (i) this.items.splice(0, i);
    }
    get length() { return this.items.length; }
  }

  const buffers = new Map(); // pod -> RingBuffer of samples

  // record adds a sample of each REPORT, taken at t (ms), and keeps a pod's
  // buffer to its gate window or the last hour, whichever is longer.
  function record(reports, t) {
    for (const r of reports) {
      let buf = buffers.get(r.pod);
      if (!buf) {
        buf = new RingBuffer(MAX_SAMPLES);
        buffers.set(r.pod, buf);
      }
      buf.push(sampleOf(r, t));
      buf.since(t - Math.max(parseWindow(r.window), HISTORY_MS));
    }
    for (const pod of Array.from(buffers.keys())) {
      if (!reports.some((r) => r.pod === pod)) buffers.delete(pod);
    }
  }

  // sampleOf turns a REPORT taken at t (ms) into a chart sample.
  function sampleOf(r, t) {
    const n = r.comparisons || 0;
    const kinds = {};
    for (const [k, v] of Object.entries(r.divergences || {})) kinds[k] = n > 0 ? v / n : 0;
    const lat = {};
    for (const [store, s] of Object.entries(r.latency_ms || {})) {
      // Both percentiles at 0 is a window with no sample of the store.
      if (s && typeof s.p50 === "number" && typeof s.p99 === "number" && (s.p50 || s.p99)) lat[store] = { p50: s.p50, p99: s.p99 };
    }
    return { t, rate: r.divergence_rate || 0, kinds, lat };
  }

  // seed puts the server's history (GET /admin/history samples, oldest
  // first) before what the tab sampled itself.
  function seed(history) {
    const byPod = new Map();
    for (const s of history) {
      const t = Date.parse(s.at);
      if (!s.pod || isNaN(t)) continue;
      if (!byPod.has(s.pod)) byPod.set(s.pod, []);
      byPod.get(s.pod).push(sampleOf(s, t));
    }
    for (const [pod, items] of byPod) {
      const buf = buffers.get(pod) || new RingBuffer(MAX_SAMPLES);
      const first = buf.items.length ? buf.items[0].t : Infinity;
      const merged = items.filter((x) => x.t < first).concat(buf.items);
      buf.items = [];
      for (const x of merged) buf.push(x);
      buffers.set(pod, buf);
    }
  }

  // config is the server's effective configuration (GET /admin/config),
  // for the thresholds the charts draw.
  let config = {};
  function setConfig(c) {
    config = c || {};
  }
  // abortThreshold is rollout.abort_divergence_rate, undefined when the
  // automatic abort is off or unknown.
  function abortThreshold() {
    const v = (config.rollout || {}).abort_divergence_rate;
    return typeof v === "number" && v > 0 ? v : undefined;
  }

  function samples(pod) {
    const buf = buffers.get(pod);
    return buf ? buf.items : [];
  }

  function clear() {
    buffers.clear();
  }

  // ---- drawing ----------------------------------------------------------------

  function svgEl(tag, attrs, text) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    if (text !== undefined) e.textContent = text;
    return e;
  }

  // niceMax rounds a maximum up to 1, 2 or 5 times a power of ten.
  function niceMax(v) {
    if (!(v > 0)) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 5, 10]) if (v <= m * p) return m * p;
    return 10 * p;
  }

  // spanLabel says how long ago the left edge of a chart is: "45s", "3m",
  // "1h20m".
  function spanLabel(ms) {
    const s = Math.round(ms / 1000);
    if (s < 120) return s + "s";
    const m = Math.round(s / 60);
    return m < 120 ? m + "m" : Math.floor(m / 60) + "h" + (m % 60 ? (m % 60) + "m" : "");
  }

  // span returns the [from, to] (ms) a pod's chart covers: from its first
  // sample (or the start of the window, once the buffer spans it) to its
  // last, so that the lines fill the chart from the first poll on.
  function span(pod, windowMs) {
    const items = samples(pod);
    if (!items.length) return [Date.now() - windowMs, Date.now()];
    const to = items[items.length - 1].t;
    return [Math.max(to - windowMs, Math.min(items[0].t, to - 1000)), to];
  }

  // lineChart draws series over [from, to] (ms) into a new <svg>:
  // series = [{key, label, cls, points: [[t, v], ...]}], opts = {title,
  // format: (v) => string, threshold?: {value, label}, thresholds?: [{value,
  // label, kind?, scale?}], minMax?: the least top of the y axis}.
  // A series with points === null is listed as n/a and not drawn.
  function lineChart(series, from, to, opts) {
    const svg = svgEl("svg", { viewBox: "0 0 " + W + " " + H, class: "chart", role: "img",
      "aria-label": opts.title, preserveAspectRatio: "xMidYMid meet" });
    svg.append(svgEl("title", {}, opts.title));
    let max = 0;
    for (const s of series) for (const [, v] of s.points || []) max = Math.max(max, v);
    // threshold (one) and thresholds (any) are horizontal lines with a label.
    const lines = (opts.thresholds || []).concat(opts.threshold ? [opts.threshold] : []);
    // A threshold with scale: false does not stretch the axis: above it,
    // only its label shows, pinned to the top with an arrow.
    for (const th of lines) if (th.scale !== false) max = Math.max(max, th.value);
    max = niceMax(Math.max(max, opts.minMax || 0));
    const x0 = PAD.left;
    const x1 = W - PAD.right;
    const y0 = H - PAD.bottom;
    const y1 = PAD.top;
    const span = Math.max(1, to - from);
    const xOf = (t) => x0 + ((t - from) / span) * (x1 - x0);
    const yOf = (v) => y0 - (v / max) * (y0 - y1);
    for (const f of [0, 0.5, 1]) {
      const y = yOf(max * f);
      svg.append(svgEl("line", { x1: x0, x2: x1, y1: y, y2: y, class: "grid" }));
      svg.append(svgEl("text", { x: x0 - 4, y: y + 4, "text-anchor": "end", class: "axis" }, opts.format(max * f)));
    }
    svg.append(svgEl("text", { x: x0, y: H - 6, class: "axis" }, "−" + spanLabel(to - from)));
    svg.append(svgEl("text", { x: x1, y: H - 6, "text-anchor": "end", class: "axis" }, "now"));
    for (const th of lines) {
      const cls = th.kind ? " " + th.kind : "";
      if (th.value > max) {
        svg.append(svgEl("text", { x: x0 + 4, y: y1 + 9, "text-anchor": "start", class: "axis threshold-label offscale" + cls }, "↑ " + th.label));
        continue;
      }
      const y = yOf(th.value);
      svg.append(svgEl("line", { x1: x0, x2: x1, y1: y, y2: y, class: "threshold" + cls, "data-threshold": th.value }));
      svg.append(svgEl("text", { x: th.kind === "abort" ? x0 + 4 : x1, y: y - 3, "text-anchor": th.kind === "abort" ? "start" : "end",
        class: "axis threshold-label" + cls }, th.label));
    }
    for (const s of series) {
      if (!s.points || !s.points.length) continue;
      const pts = s.points.map(([t, v]) => xOf(Math.max(from, t)).toFixed(1) + "," + yOf(v).toFixed(1)).join(" ");
      svg.append(svgEl("polyline", { points: pts, class: "series " + s.cls, "data-series": s.key }));
    }
    return svg;
  }

  // legend lists the series with their colour and latest value, n/a when a
  // series does not apply or has no sample.
  function legend(series, format) {
    const ul = document.createElement("ul");
    ul.className = "legend";
    for (const s of series) {
      const li = document.createElement("li");
      li.dataset.series = s.key;
      const sw = document.createElement("span");
      sw.className = "swatch " + s.cls;
      const last = s.points && s.points.length ? format(s.points[s.points.length - 1][1]) : "n/a";
      li.append(sw, s.label + " " + last);
      if (!s.points) li.classList.add("na");
      ul.append(li);
    }
    return ul;
  }

  return { parseWindow, RingBuffer, record, samples, span, clear, lineChart, legend, seed, setConfig, abortThreshold, HISTORY_MS };
})();
