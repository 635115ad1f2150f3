// tandem dashboard: divergence triage. GET /admin/divergences/summary
// groups the divergences by pod, kind, op and position; a group opens to its
// rows (GET /admin/divergences, newest first) and a row to its side-by-side
// diff (TandemWatch.diffTable). Filters: pod, kind, op and time. app.js
// owns the API calls and hands this module its api function.
"use strict";

window.TandemTriage = (function () {
  const { KINDS, $, el, badge, when, num } = window.TandemUI;
  const OPS = ["reserve", "claim", "release", "set_on_hand", "audit"];
  const SINCE = [["15m", "last 15 min"], ["1h", "last hour"], ["6h", "last 6 hours"], ["24h", "last 24 hours"], ["", "all kept"]];
  const ROWS_LIMIT = 200;

  let api = null;
  let diffTable = null;
  const open = new Set(); // keys of the groups opened
  const rowsCache = new Map(); // group key -> divergences, while open

  function init(opts) {
    api = opts.api;
    diffTable = opts.diffTable;
    const form = $("#triage-filters");
    fill($("#triage-kind"), [["", "any kind"], ...KINDS.map((k) => [k, k])]);
    fill($("#triage-op"), [["", "any op"], ...OPS.map((o) => [o, o])]);
    fill($("#triage-since"), SINCE);
    $("#triage-since").value = "1h";
    form.addEventListener("change", () => { open.clear(); rowsCache.clear(); opts.refresh(); });
    form.addEventListener("submit", (ev) => ev.preventDefault());
    $("#triage-export-csv").addEventListener("click", () => exportRows("csv"));
    $("#triage-export-jsonl").addEventListener("click", () => exportRows("jsonl"));
  }

  function fill(select, options) {
    const keep = select.value;
    select.replaceChildren(...options.map(([v, label]) => el("option", { value: v, text: label })));
    if (options.some(([v]) => v === keep)) select.value = keep;
  }

  // setPods offers the pods in the pod filter.
  function setPods(names) {
    const select = $("#triage-pod");
    const want = ["", ...names].join("\n");
    if (select.dataset.options === want) return;
    select.dataset.options = want;
    fill(select, [["", "any pod"], ...names.map((n) => [n, n])]);
  }

  function filters() {
    return { pod: $("#triage-pod").value, kind: $("#triage-kind").value, op: $("#triage-op").value, since: $("#triage-since").value };
  }

  // query is the summary's query string for the filters (op is applied here).
  function query(extra) {
    const f = filters();
    const q = new URLSearchParams();
    if (f.pod) q.set("pod", f.pod);
    if (f.kind) q.set("kind", f.kind);
    if (f.since) q.set("since", f.since);
    for (const [k, v] of Object.entries(extra || {})) q.set(k, v);
    const s = q.toString();
    return s ? "?" + s : "";
  }

  function summaryPath() {
    return "/admin/divergences/summary" + query();
  }

  const posOf = (p) => (p.inventory_item_id || p.group_id ? "item " + p.inventory_item_id + " · group " + p.group_id : "–");
  const keyOf = (g) => [g.pod, g.kind, g.op, g.position.shop_id, g.position.inventory_item_id, g.position.group_id].join("|");

  // render draws the summary answer's groups, keeping the opened ones open.
  function render(summary) {
    const op = filters().op;
    const groups = (summary.groups || []).filter((g) => !op || g.op === op);
    const total = groups.reduce((n, g) => n + g.count, 0);
    $("#triage-status").textContent = groups.length
      ? num(total) + " divergences in " + num(groups.length) + " groups" +
        (summary.truncated ? " (the newest " + num(summary.sampled) + " only: narrow the filters for exact counts)" : "")
      : "";
    $("#triage-empty").hidden = groups.length > 0;
    const tbody = $("#divergence-groups tbody");
    const rows = [];
    for (const g of groups) {
      const key = keyOf(g);
      const isOpen = open.has(key);
      const toggle = el("button", { type: "button", class: "icon toggle", "aria-expanded": String(isOpen),
        "aria-label": (isOpen ? "Close" : "Open") + " the group's divergences", text: isOpen ? "▾" : "▸" });
      toggle.addEventListener("click", () => toggleGroup(g, key));
      rows.push(el("tr", { "data-group": key, class: "group" + (isOpen ? " open" : "") },
        el("td", {}, toggle),
        el("td", { class: "num", "data-field": "count", text: num(g.count) }),
        el("td", { "data-field": "pod", text: g.pod }),
        el("td", {}, badge(g.kind, "warn")),
        el("td", { "data-field": "op", text: g.op }),
        el("td", { class: "position", "data-field": "position", text: "shop " + g.position.shop_id + " · " + posOf(g.position) }),
        el("td", { class: "seen", "data-field": "seen" }, el("time", { datetime: g.first_seen, text: when(g.first_seen) }),
          g.first_seen !== g.last_seen ? el("span", { class: "last" }, "→ ", el("time", { datetime: g.last_seen, text: when(g.last_seen) })) : null),
        el("td", { class: "explanation", "data-field": "explanation", text: g.example.explanation || "" }),
      ));
      if (isOpen) rows.push(groupRows(g, key));
    }
    tbody.replaceChildren(...rows);
  }

  function toggleGroup(g, key) {
    if (open.has(key)) {
      open.delete(key);
      rowsCache.delete(key);
    } else {
      open.add(key);
    }
    const tr = $('#divergence-groups tr[data-group="' + CSS.escape(key) + '"]');
    if (!tr) return;
    const next = tr.nextElementSibling;
    if (next && next.classList.contains("group-rows")) next.remove();
    const isOpen = open.has(key);
    tr.classList.toggle("open", isOpen);
    const btn = $("button.toggle", tr);
    btn.setAttribute("aria-expanded", String(isOpen));
    btn.textContent = isOpen ? "▾" : "▸";
    if (isOpen) tr.after(groupRows(g, key));
  }

  // groupRows is the opened group's divergences, loaded once while open.
  function groupRows(g, key) {
    const cell = el("td", { colspan: "8" });
    const tr = el("tr", { class: "group-rows", "data-rows-of": key }, cell);
    const cached = rowsCache.get(key);
    if (cached) {
      cell.append(rowsTable(g, cached));
      return tr;
    }
    cell.append(el("p", { class: "hint", text: "Loading…" }));
    const f = filters();
    const q = new URLSearchParams({ pod: g.pod, kind: g.kind, limit: String(ROWS_LIMIT) });
    if (f.since) q.set("since", f.since);
    api("GET", "/admin/divergences?" + q.toString()).then((ans) => {
      const p = g.position;
      const mine = (ans.divergences || []).filter((d) => d.op === g.op && samePosition(d, p));
      rowsCache.set(key, mine);
      cell.replaceChildren(rowsTable(g, mine));
    }).catch((e) => {
      cell.replaceChildren(el("p", { class: "empty", text: "Could not load the rows: " + (e.code ? e.code + ": " : "") + e.message }));
    });
    return tr;
  }

  function samePosition(d, p) {
    if (d.position) return d.position.shop_id === p.shop_id && d.position.inventory_item_id === p.inventory_item_id && d.position.group_id === p.group_id;
    const lines = ((d.primary || {}).lines || []).length ? d.primary.lines : ((d.shadow || {}).lines || []);
    const first = lines[0] || { inventory_item_id: 0, group_id: 0 };
    return (d.shop_id || 0) === p.shop_id && first.inventory_item_id === p.inventory_item_id && first.group_id === p.group_id;
  }

  function rowsTable(g, list) {
    const more = g.count > list.length ? el("p", { class: "hint", text: "Showing the newest " + num(list.length) + " of " + num(g.count) + "." }) : null;
    const rows = [];
    for (const d of list) {
      const btn = el("button", { type: "button", class: "secondary small", "aria-expanded": "false", text: "diff" });
      const tr = el("tr", { "data-divergence-row": String(d.id) },
        el("td", { class: "num", text: String(d.id) }),
        el("td", { text: when(d.at) }),
        el("td", { text: d.cart_token || "–" }),
        el("td", { class: "explanation", text: d.explanation || "" }),
        el("td", {}, btn));
      btn.addEventListener("click", () => {
        const next = tr.nextElementSibling;
        if (next && next.classList.contains("row-diff")) {
          next.remove();
          btn.setAttribute("aria-expanded", "false");
          return;
        }
        btn.setAttribute("aria-expanded", "true");
        tr.after(el("tr", { class: "row-diff", "data-diff-of": String(d.id) }, el("td", { colspan: "5" }, el("div", { class: "scroll" }, diffTable(d)))));
      });
      rows.push(tr);
    }
    return el("div", { class: "group-rows-box" }, more, el("table", { class: "compact rows" },
      el("thead", {}, el("tr", {}, ...["ID", "At", "Cart", "Explanation", ""].map((h) => el("th", { scope: "col", text: h })))),
      el("tbody", {}, ...rows)));
  }

  // exportRows downloads the filtered divergences (up to 1000) as CSV or
  // JSON lines; the token goes in a header, never in a link.
  async function exportRows(format) {
    const q = query({ format, limit: "1000" });
    const blob = await api("GET", "/admin/divergences" + q, undefined, { raw: true });
    const a = el("a", { href: URL.createObjectURL(blob), download: "divergences." + format });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(a.href), 1000);
  }

  return { init, setPods, summaryPath, render };
})();
