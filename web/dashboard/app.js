// tandem admin dashboard. The page holds no data: every number comes from the
// admin API of the same origin, called with the operator's admin token as a
// bearer token. The token lives in sessionStorage only (never in a URL or a
// cookie), so it is gone when the tab closes.
"use strict";

(function () {
  const TOKEN_KEY = "tandem.adminToken";
  const ACTOR_KEY = "tandem.actor";
  const REFRESH_MS = 2000;
  const MODES = ["redis", "shadow", "mysql", "mysql_only"];
  // The transitions: redis<->shadow, shadow<->mysql, mysql->mysql_only,
  // mysql_only->mysql (after a resync).
  const TRANSITIONS = {
    redis: ["shadow"],
    shadow: ["mysql", "redis"],
    mysql: ["shadow", "mysql_only"],
    mysql_only: ["mysql"],
  };
  // OVERRIDABLE are the failed gates that force overrides; the others
  // (kill_switch, transition, resync) refuse whatever force says.
  const OVERRIDABLE = ["min_comparisons", "max_divergence_rate", "audit_clean"];
  const Charts = window.TandemCharts;
  const { KINDS, NA, $, el, badge, when, timeCell, pct, num, ms, rateOf, syncRows, modeBadge, usesStore } = window.TandemUI;
  const { fillCard, diffTable } = window.TandemWatch;
  const Triage = window.TandemTriage;

  const state = {
    token: sessionStorage.getItem(TOKEN_KEY) || "",
    actor: sessionStorage.getItem(ACTOR_KEY) || "",
    pods: [],
    selected: new Set(), // pods ticked for the kill switch
    ks: { engaged: false, pods: [] }, // the last KILLSWITCH answer
    plan: null, // the last PLAN answer
    reports: [], // the last REPORT answers
    timer: null,
    refreshing: false,
    again: false, // a refresh was asked for while one was running
    errorSource: "", // "refresh" errors clear themselves on the next good refresh
    dialog: null, // the action the confirm dialog is for
  };

  // ---- API -----------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, code, message, details) {
      super(message);
      this.status = status;
      this.code = code;
      this.details = details || {};
    }
  }

  // api calls the admin API and returns its decoded JSON answer, or with
  // opts.raw the body as a Blob (the divergences' CSV and JSON lines).
  async function api(method, path, body, opts) {
    const raw = !!(opts && opts.raw);
    if (!state.token) {
      throw new ApiError(0, "unauthorized", "enter the admin token first");
    }
    const req = {
      method,
      // X-Actor names who made a change in the audit log (docs/api.md).
      headers: { Authorization: "Bearer " + state.token, Accept: "application/json", "X-Actor": state.actor || "dashboard" },
      cache: "no-store",
      credentials: "omit",
    };
    if (body !== undefined) {
      req.headers["Content-Type"] = "application/json";
      req.body = JSON.stringify(body);
    }
    let resp;
    try {
      resp = await fetch(path, req);
    } catch (e) {
      throw new ApiError(0, "network_error", "cannot reach the admin API: " + e.message);
    }
    const text = await resp.text();
    if (raw && resp.ok) return new Blob([text], { type: resp.headers.get("Content-Type") || "text/plain" });
    let data = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch (e) {
      data = null;
    }
    if (!resp.ok) {
      const err = data && data.error;
      if (err && err.code) {
        throw new ApiError(resp.status, err.code, err.message || "", err.details);
      }
      throw new ApiError(resp.status, "http_" + resp.status, text.slice(0, 200) || resp.statusText);
    }
    return data;
  }

  const podPath = (pod, action) => "/admin/pods/" + encodeURIComponent(pod) + "/" + action;

  // ---- banners ---------------------------------------------------------------

  function showError(err, source) {
    const code = err instanceof ApiError ? err.code : "error";
    const status = err instanceof ApiError && err.status ? " (HTTP " + err.status + ")" : "";
    let msg = (err && err.message) || String(err);
    const gates = err instanceof ApiError && err.details && err.details.failed_gates;
    if (Array.isArray(gates) && gates.length) msg += " — failed gates: " + gates.join(", ");
    $("#error-code").textContent = code + status + ":";
    $("#error-message").textContent = msg;
    $("#error-banner").hidden = false;
    state.errorSource = source;
  }

  function clearError(source) {
    if (source && state.errorSource !== source) return;
    $("#error-banner").hidden = true;
    state.errorSource = "";
  }

  function showNotice(...nodes) {
    const body = $("#notice-body");
    body.replaceChildren(...nodes);
    $("#notice").hidden = false;
  }

  // ---- rendering ---------------------------------------------------------------

  function renderPods(pods) {
    state.pods = pods;
    for (const name of Array.from(state.selected)) {
      if (!pods.some((p) => p.pod === name)) state.selected.delete(name);
    }
    const tbody = $("#pods tbody");
    syncRows(tbody, pods, (p) => p.pod, createPodRow, updatePodRow);
    $("#pods-empty").hidden = pods.length > 0;
    updateKillSwitchButtons();
  }

  function createPodRow(p) {
    const tr = el("tr", { "data-pod": p.pod, "data-testid": "pod-" + p.pod });
    const box = el("input", { type: "checkbox", class: "change", "data-field": "select", "aria-label": "Select " + p.pod + " for the kill switch" });
    box.addEventListener("change", () => {
      if (box.checked) state.selected.add(p.pod);
      else state.selected.delete(p.pod);
      updateKillSwitchButtons();
    });
    const modeBtn = el("button", { type: "button", class: "change", "data-action": "mode", "aria-label": "Change the mode of " + p.pod, text: "Mode…" });
    modeBtn.addEventListener("click", () => openModeDialog(tr.dataset.key));
    const auditBtn = el("button", { type: "button", class: "secondary change", "data-action": "audit", "aria-label": "Run the audit of " + p.pod, text: "Audit…" });
    auditBtn.addEventListener("click", () => openAuditDialog(tr.dataset.key));
    const killBtn = el("button", { type: "button", class: "danger change", "data-action": "kill", "aria-label": "Engage the kill switch of " + p.pod, text: "Kill…" });
    killBtn.addEventListener("click", () => openKillSwitchDialog(true, [tr.dataset.key]));
    const unkillBtn = el("button", { type: "button", class: "secondary change", "data-action": "unkill", "aria-label": "Disengage the kill switch of " + p.pod, text: "Unkill…" });
    unkillBtn.addEventListener("click", () => openKillSwitchDialog(false, [tr.dataset.key]));
    tr.append(
      el("td", {}, box),
      el("th", { scope: "row", "data-field": "pod", text: p.pod }),
      el("td", { "data-field": "mode" }),
      el("td", { "data-field": "source_of_truth" }),
      el("td", { "data-field": "shadow" }),
      el("td", { class: "wrap ks-cell" }, el("span", { "data-field": "kill_switch" }), el("div", { "data-field": "kill_detail", class: "ks-detail" }),
        el("div", { "data-field": "abort", class: "ks-detail" })),
      el("td", { "data-field": "shops" }),
      el("td", { "data-field": "comparisons", class: "num" }),
      el("td", { "data-field": "divergence_rate", class: "num" }),
      el("td", { "data-field": "last_audit_clean" }),
      el("td", { "data-field": "passing", class: "wrap" }),
      el("td", { class: "row-actions" }, modeBtn, auditBtn, killBtn, unkillBtn),
    );
    return tr;
  }

  function setField(tr, field, ...content) {
    const td = tr.querySelector('[data-field="' + field + '"]');
    td.replaceChildren(...content.filter((c) => c !== null && c !== undefined));
  }

  function updatePodRow(tr, p) {
    const g = p.gates || {};
    tr.querySelector('[data-field="select"]').checked = state.selected.has(p.pod);
    setField(tr, "mode", modeBadge(p.mode));
    tr.querySelector('[data-field="mode"]').dataset.value = p.mode;
    setField(tr, "source_of_truth", p.source_of_truth || "–");
    setField(tr, "shadow", p.shadow || "none");
    setField(tr, "kill_switch", p.kill_switch ? badge("engaged", "bad") : badge("off", "muted"));
    tr.querySelector('[data-field="kill_switch"]').dataset.value = p.kill_switch ? "engaged" : "off";
    tr.classList.toggle("killed", !!p.kill_switch);
    tr.querySelector('[data-action="kill"]').hidden = !!p.kill_switch;
    tr.querySelector('[data-action="unkill"]').hidden = !p.kill_switch;
    setField(tr, "kill_detail", ...killDetail(p.pod, !!p.kill_switch));
    setField(tr, "abort", abortText(p.abort, !!p.kill_switch));
    tr.querySelector('[data-field="abort"]').dataset.state = p.abort ? (p.abort.would_trip ? "would-trip" : "holds") : "";
    setField(tr, "shops", p.shops || "–");
    setField(tr, "comparisons", num(g.comparisons));
    setField(tr, "divergence_rate", rateOf(g.divergence_rate, g.comparisons));
    setField(tr, "last_audit_clean", auditBadge(g));
    const failed = Array.isArray(g.failed_gates) ? g.failed_gates : [];
    if (p.kill_switch) {
      // Redis serves a killed pod whatever its gates say.
      setField(tr, "passing", badge(NA + " (killed)", "muted"));
      return;
    }
    setField(tr, "passing", g.passing ? badge("passing", "good") : badge("failing", "warn"),
      !g.passing && failed.length ? el("span", { class: "gate-list", text: failed.join(", ") }) : null);
  }

  // auditBadge says how the pod's last audit went; "no audit yet" when
  // none ran (last_audit_at null), which is no drift found.
  function auditBadge(g) {
    if (g.last_audit_clean) return badge("clean", "good");
    if (g.last_audit_at === null || g.last_audit_at === undefined) return badge("no audit yet", "muted");
    return badge("not clean", "warn");
  }

  // abortText says where the pod's recent window stands against the
  // automatic abort (POD.abort); for a killed pod, whether an unkill would
  // hold under the same traffic.
  function abortText(a, killed) {
    if (!a) return null;
    if (!(a.threshold > 0)) return "automatic abort off";
    const r = Math.max(a.divergence_rate || 0, a.mysql_error_rate || 0);
    const last = " in the last " + a.window;
    if (a.comparisons < a.min_comparisons) {
      return (killed ? "an unkill would hold: " : "abort: ") + a.comparisons + " of " + a.min_comparisons + " comparisons" + last;
    }
    if (a.would_trip) return (killed ? "an unkill would be undone: " : "abort would trip: ") + pct(r) + " ≥ " + pct(a.threshold) + last;
    return (killed ? "an unkill would hold: " : "abort: ") + pct(r) + " < " + pct(a.threshold) + last;
  }

  // engagementOf returns a pod's own engagement {since, reason, actor}: from
  // KILLSWITCH.engagements, or the switch-wide since/reason when this pod
  // is the only one engaged; null when unknown.
  function engagementOf(pod) {
    const ks = state.ks || {};
    const e = (ks.engagements || []).find((x) => x.pod === pod);
    if (e) return e;
    const pods = ks.pods || [];
    if (pods.length === 1 && pods[0] === pod) return { since: ks.since, reason: ks.reason };
    return null;
  }

  function killDetail(pod, engaged) {
    if (!engaged) return [];
    const e = engagementOf(pod);
    if (!e) return [];
    return [
      el("span", { "data-field": "kill_since" }, "since ", el("time", { datetime: e.since || "", text: when(e.since) })),
      el("span", { "data-field": "kill_reason", class: "ks-reason", text: e.reason + (e.actor ? " (" + e.actor + ")" : "") }),
    ];
  }

  function renderKillSwitch(ks) {
    state.ks = ks || { engaged: false, pods: [] };
    for (const tr of Array.from($("#pods tbody").rows)) {
      const p = state.pods.find((x) => x.pod === tr.dataset.key);
      if (p) setField(tr, "kill_detail", ...killDetail(p.pod, !!p.kill_switch));
    }
    const list = $("#killswitch-pods");
    list.replaceChildren(...(ks.pods || []).map((pod) => {
      const e = engagementOf(pod);
      return el("li", { "data-pod": pod }, el("strong", { text: pod }),
        e ? " since " + when(e.since) + (e.actor ? " by " + e.actor : "") + ": " + (e.reason || "") : "");
    }));
    list.hidden = !ks.engaged;
    const p = $("#killswitch-state");
    p.dataset.engaged = ks.engaged ? "true" : "false";
    p.classList.toggle("engaged", !!ks.engaged);
    if (ks.engaged) {
      // Since, by whom and why are each pod's own, in the list below: the
      // switch-wide since (the earliest) and reason (the latest) belong to
      // different pods once two are killed.
      p.textContent = "Engaged for " + ((ks.pods || []).join(", ") || "no pod");
    } else {
      p.textContent = "Disengaged: every pod runs in its mode.";
    }
  }

  function updateKillSwitchButtons() {
    const n = state.selected.size;
    const scope = n === 0 ? "all pods" : n === 1 ? "1 selected pod" : n + " selected pods";
    $("#killswitch-engage").textContent = "Engage for " + scope + "…";
    $("#killswitch-disengage").textContent = "Disengage for " + scope + "…";
  }

  function renderReport(pods) {
    syncRows($("#report tbody"), pods, (r) => r.pod, (r) => el("tr", { "data-pod": r.pod }), (tr, r) => {
      const kinds = [];
      for (const k of KINDS) {
        const n = (r.divergences || {})[k];
        if (n) kinds.push(badge(k + " " + num(n), "warn"));
      }
      // A latency is n/a for a store the mode does not use, and when the
      // window holds no sample of it.
      const lat = (store) => {
        const s = (r.latency_ms || {})[store];
        if (!usesStore(r.mode, store) || !s || (!s.p50 && !s.p99)) return NA;
        return ms(s.p50) + " / " + ms(s.p99);
      };
      tr.replaceChildren(
        el("th", { scope: "row", text: r.pod }),
        el("td", {}, modeBadge(r.mode)),
        el("td", { text: r.window || "–" }),
        el("td", { class: "num", "data-field": "comparisons", text: num(r.comparisons) }),
        el("td", { class: "num", text: num(r.matches) }),
        el("td", { class: "num", "data-field": "divergence_rate", text: rateOf(r.divergence_rate, r.comparisons) }),
        el("td", { class: "chips" }, ...(kinds.length ? kinds : [badge("none", "muted")])),
        el("td", { class: "num", "data-field": "latency_redis", text: lat("redis") }),
        el("td", { class: "num", "data-field": "latency_mysql", text: lat("mysql") }),
      );
    });
  }

  function renderDivergences(list) {
    const box = $("#divergences");
    syncRows($("tbody", box), list, (d) => d.id, (d) => el("tr", { "data-divergence": String(d.id) },
      el("td", { class: "num", text: String(d.id) }),
      timeCell(d.at),
      el("td", { text: d.pod }),
      el("td", { text: d.op }),
      el("td", {}, badge(d.kind, "warn")),
      el("td", { text: (d.shop_id ? "shop " + d.shop_id : "–") + (d.cart_token ? " · " + d.cart_token : "") }),
      el("td", {}, diffTable(d)),
    ));
    $("p.empty", box).hidden = list.length > 0;
  }

  function renderAuditLog(entries) {
    const rows = entries.map((e) => el("tr", {},
      timeCell(e.at),
      el("td", { text: e.actor || "–" }),
      el("td", { text: e.action }),
      el("td", { text: e.pod || "–" }),
      el("td", { text: (e.before || "–") + " → " + (e.after || "–") }),
      el("td", { class: "reason", text: e.reason || "" }),
    ));
    if (!rows.length) rows.push(el("tr", {}, el("td", { colspan: "6", class: "empty", text: "No entries." })));
    $("#audit-log tbody").replaceChildren(...rows);
  }

  function renderInstances(list) {
    const rows = list.map((i) => el("tr", { class: i.stale ? "stale" : "" },
      el("td", { class: "mono", text: i.id }),
      el("td", { class: "mono", text: i.addr || "–" }),
      timeCell(i.started_at),
      timeCell(i.last_seen),
      el("td", { class: "num", text: num(i.control_version) }),
      el("td", {}, i.stale ? badge("stale", "bad") : badge("live", "good")),
    ));
    if (!rows.length) rows.push(el("tr", {}, el("td", { colspan: "6", class: "empty", text: "No instances." })));
    $("#instances tbody").replaceChildren(...rows);
  }

  // planPods lists the plan's pods in its order with their real mode:
  // PLAN.pods when the server gives them, else PLAN.order with each pod's
  // mode from GET /admin/pods.
  // Each pod also says which store answers its buyers now (redis while
  // it is killed, whatever its mode) and whether it is killed, from GET
  // /admin/pods when it knows the pod, else from the plan.
  function planPods(p) {
    const podOf = (name) => state.pods.find((x) => x.pod === name) || {};
    const withSoT = (x) => {
      const pod = podOf(x.pod);
      const killed = pod.pod ? !!pod.kill_switch : !!x.kill_switch;
      const sot = pod.source_of_truth || x.source_of_truth ||
        (x.mode === "mysql_only" || (x.mode === "mysql" && !killed) ? "mysql" : x.mode ? "redis" : undefined);
      return Object.assign(x, { mode: pod.mode || x.mode, source_of_truth: sot, kill_switch: killed });
    };
    if (Array.isArray(p.pods) && p.pods.length) {
      return p.pods.map((x) => withSoT({ pod: x.pod, mode: x.mode, step: x.step, soak_until: x.soak_until,
        source_of_truth: x.source_of_truth, kill_switch: x.kill_switch }));
    }
    const promoted = p.promoted || [];
    const order = (p.order && p.order.length) ? p.order : state.pods.map((x) => x.pod);
    return order.map((name) => withSoT({ pod: name,
      step: promoted.includes(name) ? "promoted" : "pending",
      soak_until: promoted[promoted.length - 1] === name ? p.soak_until : undefined }));
  }

  function renderPlan(p) {
    state.plan = p || {};
    drawPlan();
  }

  // drawPlan shows the plan's phase, what it promoted, why it waits, and
  // the mode each pod is really in (a pod moved by hand counts too).
  function drawPlan() {
    const p = state.plan;
    if (!p) return;
    const phase = p.phase || "unknown";
    const pods = planPods(p);
    const promoted = p.promoted || pods.filter((x) => x.step === "done" || x.step === "promoted").map((x) => x.pod);
    let text = phase + ": " + promoted.length + " of " + pods.length + " pods promoted by the plan";
    if (p.order && p.order.length) text += " (order " + p.order.join(", ") + ")";
    if (p.waiting) text += "; " + p.waiting;
    const e = $("#plan-state");
    e.dataset.phase = phase;
    e.textContent = text;
    const counts = {};
    for (const x of pods) counts[x.mode || "unknown"] = (counts[x.mode || "unknown"] || 0) + 1;
    // Counted by the store that answers now: a killed pod in mysql is
    // served by Redis.
    const onMySQL = pods.filter((x) => x.source_of_truth === "mysql").length;
    const killed = pods.filter((x) => x.kill_switch && (x.mode === "mysql" || x.mode === "mysql_only")).map((x) => x.pod);
    $("#plan-modes").textContent = "Pods now: " + onMySQL + " of " + pods.length + " on MySQL as source of truth (" +
      MODES.filter((m) => counts[m]).map((m) => counts[m] + " " + m).join(", ") + ")" +
      (killed.length ? "; killed, served by Redis: " + killed.join(", ") : "");
    syncRows($("#plan-pods tbody"), pods, (x) => x.pod, (x) => el("tr", { "data-pod": x.pod }), (tr, x) => {
      tr.replaceChildren(
        el("th", { scope: "row", text: x.pod }),
        el("td", { "data-field": "mode" }, modeBadge(x.mode)),
        el("td", { "data-field": "source_of_truth" }, x.source_of_truth || "–",
          x.kill_switch ? el("span", { class: "hint", text: " (killed)" }) : null),
        el("td", { "data-field": "step", text: x.step || "–" }),
        el("td", { "data-field": "soak_until", text: x.soak_until ? when(x.soak_until) : "–" }),
      );
    });
    $("#plan-start").textContent = phase === "paused" ? "Resume…" : "Start…";
    $("#plan-start").disabled = phase === "running";
    $("#plan-pause").disabled = phase !== "running";
    $("#plan-abort").disabled = phase !== "running" && phase !== "paused";
  }

  function openPlanDialog(action) {
    const what = { start: state.plan && state.plan.phase === "paused" ? "Resume" : "Start", pause: "Pause", abort: "Abort" }[action];
    openDialog({
      title: what + " the rollout plan",
      body: [el("p", { text: {
        start: "The plan moves the pods one at a time, smallest first: redis → shadow → mysql, each after its soak and its gates.",
        pause: "The plan stops advancing; pods stay in their modes until it is resumed.",
        abort: "The plan stops for good; pods stay in their modes. A new plan starts over.",
      }[action] })],
      okLabel: what + " plan",
      danger: action === "abort",
      run: async (reason) => {
        renderPlan(await api("POST", "/admin/plan/" + action, { reason }));
        showNotice(el("span", { text: "Plan: " + action + " sent." }));
      },
    });
  }

  // ---- migration watch: per pod charts, gates and convergence ------------------

  function renderWatch(reports) {
    state.reports = reports;
    drawWatch();
  }

  function drawWatch() {
    const names = state.pods.length ? state.pods.map((p) => p.pod) : state.reports.map((r) => r.pod);
    const box = $("#watch-pods");
    const existing = new Map(Array.from(box.children).map((c) => [c.dataset.pod, c]));
    const cards = names.map((name) => {
      const card = existing.get(name) || el("article", { class: "pod-card", "data-pod": name, "data-testid": "watch-" + name });
      fillCard(card, state.pods.find((p) => p.pod === name) || { pod: name }, state.reports.find((r) => r.pod === name));
      return card;
    });
    box.replaceChildren(...cards);
    $("#watch-empty").hidden = cards.length > 0;
  }

  // renderRole shows which token the page holds; a viewer's page hides
  // every control that would change something (the server refuses them
  // with 403 forbidden anyway).
  function renderRole(who) {
    const role = (who && who.role) || "unknown";
    document.body.dataset.role = role;
    const badgeEl = $("#token-role");
    badgeEl.dataset.role = role;
    badgeEl.className = "badge role-" + role;
    badgeEl.textContent = role === "viewer" ? "viewer token (read-only)" : role === "admin" ? "admin token" : "";
    badgeEl.hidden = role !== "viewer" && role !== "admin";
  }

  // roleUnknown leaves the controls shown when the server cannot say (an
  // older server without /admin/whoami): the server still decides.
  function roleUnknown() {
    renderRole(null);
  }

  // planUnavailable keeps a missing plan (a server without one, or an older
  // server) from failing the whole refresh.
  function planUnavailable(err) {
    const e = $("#plan-state");
    e.dataset.phase = "unknown";
    e.textContent = err instanceof ApiError && err.status === 404
      ? "Not available on this server." : "Unknown: " + ((err && err.message) || String(err));
  }

  // ---- refresh -----------------------------------------------------------------

  async function refresh() {
    if (!state.token) return;
    if (state.refreshing) {
      state.again = true;
      return;
    }
    state.refreshing = true;
    clearTimeout(state.timer);
    loadOnce();
    const calls = [
      ["/admin/pods", (d) => { renderPods(d.pods || []); Triage.setPods((d.pods || []).map((p) => p.pod)); }],
      [Triage.summaryPath(), (d) => Triage.render(d)],
      ["/admin/killswitch", renderKillSwitch],
      ["/admin/report", (d) => {
        Charts.record(d.pods || [], Date.now());
        renderReport(d.pods || []);
        renderWatch(d.pods || []);
      }],
      ["/admin/divergences?limit=50", (d) => renderDivergences(d.divergences || [])],
      ["/admin/audit-log?limit=50", (d) => renderAuditLog(d.entries || [])],
      ["/admin/instances", (d) => renderInstances(d.instances || [])],
    ];
    const plan = api("GET", "/admin/plan").then((p) => { state.planError = null; return p; })
      .catch((e) => { state.planError = e; return null; });
    const role = api("GET", "/admin/whoami").then(renderRole).catch(roleUnknown);
    const results = await Promise.allSettled(calls.map(([path]) => api("GET", path)));
    const planAnswer = await plan;
    await role;
    let failure = null;
    results.forEach((r, i) => {
      if (r.status === "fulfilled") {
        try {
          calls[i][1](r.value || {});
        } catch (e) {
          failure = failure || e;
        }
      } else {
        failure = failure || r.reason;
      }
    });
    // The plan shows the pods' real modes: drawn after /admin/pods.
    if (planAnswer) renderPlan(planAnswer);
    else planUnavailable(state.planError);
    drawWatch();
    state.refreshing = false;
    if (state.again) {
      state.again = false;
      refresh();
      return;
    }
    const status = $("#refresh-status");
    if (failure) {
      showError(failure, "refresh");
      status.textContent = "Refresh failed at " + when(new Date().toISOString());
      if (failure instanceof ApiError && failure.status === 401) {
        // A wrong token stays wrong: stop polling until a new one is saved.
        $("#token-input").setAttribute("aria-invalid", "true");
        status.textContent = "Unauthorized: check the admin token.";
        return;
      }
    } else {
      clearError("refresh");
      status.textContent = "Updated " + when(new Date().toISOString());
    }
    schedule();
  }

  // loadOnce fetches, once per token, what does not change while the server
  // runs (the effective config: its thresholds go on the charts) and the
  // server's last hour of report samples, so the charts start with the
  // recent past instead of when the tab opened.
  function loadOnce() {
    if (state.loadedFor === state.token) return;
    state.loadedFor = state.token;
    api("GET", "/admin/config").then((cfg) => { Charts.setConfig(cfg || {}); drawWatch(); }).catch(() => {});
    api("GET", "/admin/history").then((h) => { Charts.seed((h && h.samples) || []); drawWatch(); }).catch(() => {});
  }

  function schedule() {
    clearTimeout(state.timer);
    if (state.token && $("#auto-refresh").checked) {
      state.timer = setTimeout(refresh, REFRESH_MS);
    }
  }

  // ---- token ---------------------------------------------------------------------

  function saveToken(ev) {
    ev.preventDefault();
    const input = $("#token-input");
    const token = input.value.trim();
    if (!token) {
      input.setAttribute("aria-invalid", "true");
      input.focus();
      return;
    }
    state.token = token;
    sessionStorage.setItem(TOKEN_KEY, token);
    state.actor = $("#actor-input").value.trim();
    sessionStorage.setItem(ACTOR_KEY, state.actor);
    input.value = "";
    input.removeAttribute("aria-invalid");
    input.placeholder = "saved; type to replace";
    clearError();
    refresh();
  }

  function forgetToken() {
    state.token = "";
    sessionStorage.removeItem(TOKEN_KEY);
    clearTimeout(state.timer);
    $("#token-input").placeholder = "TANDEM_ADMIN_TOKEN";
    $("#refresh-status").textContent = "Not connected: enter the admin token.";
    for (const id of ["#pods", "#report", "#audit-log", "#instances"]) $(id + " tbody").replaceChildren();
    $("#divergences tbody").replaceChildren();
    $("#plan-pods tbody").replaceChildren();
    $("#plan-modes").textContent = "";
    state.pods = [];
    state.reports = [];
    state.plan = null;
    Charts.clear();
    drawWatch();
    renderKillSwitch({ engaged: false });
    $("#plan-state").dataset.phase = "unknown";
    $("#plan-state").textContent = "Unknown";
    renderRole(null);
    $("#killswitch-state").dataset.engaged = "unknown";
    $("#killswitch-state").textContent = "Unknown";
    state.selected.clear();
    updateKillSwitchButtons();
    $("#token-input").focus();
  }

  // ---- confirm dialog ------------------------------------------------------------

  // openDialog shows the confirm dialog for an action:
  // {title, body: [nodes], reason, okLabel, danger, mode: {pod, from}|null,
  //  run: async (reason, force) => void}.
  function openDialog(action) {
    state.dialog = action;
    $("#confirm-title").textContent = action.title;
    $("#confirm-body").replaceChildren(...(action.body || []));
    $("#confirm-reason").value = action.reason || "";
    $("#confirm-error").textContent = "";
    const ok = $("#confirm-ok");
    ok.textContent = action.okLabel || "Confirm";
    ok.className = action.danger ? "danger" : "";
    ok.disabled = false;
    $("#mode-fields").hidden = !action.mode;
    $("#dryrun-result").replaceChildren();
    $("#confirm-force").checked = false;
    const dlg = $("#confirm-dialog");
    if (!dlg.open) dlg.showModal();
    if (action.mode) {
      const sel = $("#mode-target");
      const targets = TRANSITIONS[action.mode.from] || MODES;
      sel.replaceChildren(...targets.map((m) => el("option", { value: m, text: m })));
      sel.focus();
      dryRun();
    } else {
      $("#confirm-reason").focus();
    }
  }

  function closeDialog() {
    state.dialog = null;
    const dlg = $("#confirm-dialog");
    if (dlg.open) dlg.close();
  }

  // dryRun asks the server whether the selected mode change would apply; the
  // Apply button stays disabled until the answer for the current choice
  // arrives, and while it says no without force.
  async function dryRun() {
    const action = state.dialog;
    if (!action || !action.mode) return;
    const mode = $("#mode-target").value;
    const force = $("#confirm-force").checked;
    const ok = $("#confirm-ok");
    const out = $("#dryrun-result");
    ok.disabled = true;
    out.dataset.state = "pending";
    out.replaceChildren(el("span", { text: "Dry run of " + action.mode.pod + " → " + mode + "…" }));
    const reason = $("#confirm-reason").value.trim() || "dashboard dry run";
    let res;
    try {
      res = await api("PUT", podPath(action.mode.pod, "mode"), { mode, reason, force, dry_run: true });
    } catch (e) {
      if (state.dialog !== action || $("#mode-target").value !== mode || $("#confirm-force").checked !== force) return;
      out.dataset.state = "error";
      out.replaceChildren(badge("refused", "bad"), " " + e.code + ": " + e.message);
      return;
    }
    if (state.dialog !== action || $("#mode-target").value !== mode || $("#confirm-force").checked !== force) return;
    const gates = (res && res.failed_gates) || [];
    const would = !!(res && res.would_apply);
    out.dataset.state = would ? "would-apply" : "would-refuse";
    out.replaceChildren(
      el("div", {}, el("strong", { text: "Dry run: " }),
        would ? badge("would apply", "good") : badge("would be refused", "bad")),
      el("div", { "data-field": "failed_gates" }, "Failed gates: " + (gates.length ? gates.join(", ") : "none")),
    );
    if (res && res.message) out.append(el("div", { class: "hint", "data-field": "message", text: res.message }));
    const fixed = gates.filter((g) => !OVERRIDABLE.includes(g));
    if (fixed.length) {
      out.append(el("div", { class: "hint", "data-field": "force_hint", text: "Force cannot override " + fixed.join(", ") +
        (fixed.includes("kill_switch") ? ": disengage the pod's kill switch first." : ": this change is refused until that is fixed.") }));
    } else if (!would && !force) {
      out.append(el("div", { class: "hint", "data-field": "force_hint", text: "Tick Force to override the gates (logged), or wait until they pass." }));
    }
    ok.disabled = !would && (!force || fixed.length > 0);
  }

  async function submitDialog(ev) {
    ev.preventDefault();
    const action = state.dialog;
    if (!action) return;
    const reasonInput = $("#confirm-reason");
    const reason = reasonInput.value.trim();
    if (!reason) {
      $("#confirm-error").textContent = "A reason is required.";
      reasonInput.setAttribute("aria-invalid", "true");
      reasonInput.focus();
      return;
    }
    reasonInput.removeAttribute("aria-invalid");
    const ok = $("#confirm-ok");
    ok.disabled = true;
    try {
      await action.run(reason, $("#confirm-force").checked);
      clearError();
      closeDialog();
    } catch (e) {
      $("#confirm-error").textContent = (e.code || "error") + ": " + e.message;
      showError(e, "action");
      ok.disabled = false;
      return;
    }
    refresh();
  }

  function openModeDialog(podName) {
    const p = state.pods.find((x) => x.pod === podName);
    if (!p) return;
    openDialog({
      title: "Change the mode of " + p.pod,
      body: [el("p", {}, "Now ", modeBadge(p.mode), " (source of truth " + (p.source_of_truth || "–") +
        (p.kill_switch ? ", kill switch engaged" : "") + "). The change is checked by a dry run first.")],
      okLabel: "Apply mode change",
      danger: true,
      mode: { pod: p.pod, from: p.mode },
      run: async (reason, force) => {
        const mode = $("#mode-target").value;
        const body = { mode, reason };
        if (force) body.force = true;
        await api("PUT", podPath(p.pod, "mode"), body);
        showNotice(el("span", { text: p.pod + " moved to " + mode + "." }));
      },
    });
  }

  function openAuditDialog(podName) {
    openDialog({
      title: "Run the drift audit of " + podName,
      body: [el("p", { text: "Compares the ledger with Redis and MySQL for every position of the pod." })],
      reason: "dashboard audit",
      okLabel: "Run audit",
      run: async (reason) => {
        const a = await api("POST", podPath(podName, "audit"), { reason });
        const head = el("p", {}, el("strong", { text: "Audit of " + a.pod + ": " }),
          a.clean ? badge("clean", "good") : badge("drift in " + (a.drifted || []).length + " positions", "bad"),
          " " + num(a.checked) + " positions checked at " + when(a.at) + ".");
        const nodes = [head];
        if (a.drifted && a.drifted.length) {
          const opt = (v) => (v === null || v === undefined ? "–" : String(v));
          nodes.push(el("table", { class: "compact" },
            el("thead", {}, el("tr", {}, ...["Shop", "Item", "Group", "Ledger on hand", "Redis available", "MySQL available"]
              .map((h) => el("th", { scope: "col", text: h })))),
            el("tbody", {}, ...a.drifted.map((d) => el("tr", {},
              ...[d.shop_id, d.inventory_item_id, d.group_id, d.ledger_on_hand, d.redis_available, d.mysql_available]
                .map((v) => el("td", { class: "num", text: opt(v) })))))));
        }
        showNotice(...nodes);
      },
    });
  }

  // openKillSwitchDialog engages or disengages the pods given (a row's
  // button), else the ticked pods, else every pod.
  function openKillSwitchDialog(engage, only) {
    const pods = only || Array.from(state.selected);
    const names = pods.length ? pods : state.pods.map((p) => p.pod);
    const scope = only ? only.join(", ") : pods.length ? "the selected pods" : "ALL pods";
    openDialog({
      title: (engage ? "Engage" : "Disengage") + " the kill switch for " + scope,
      body: [
        el("p", { text: engage
          ? "Redis becomes the source of truth of these pods at once, on every instance:"
          : "These pods go back to the source of truth of their mode:" }),
        el("ul", { class: "pod-list" }, ...names.map((n) => el("li", { text: n }))),
      ],
      okLabel: engage ? "Engage kill switch" : "Disengage kill switch",
      danger: engage,
      run: async (reason) => {
        const body = { reason };
        if (pods.length) body.pods = pods;
        const ks = await api(engage ? "POST" : "DELETE", "/admin/killswitch", body);
        renderKillSwitch(ks);
        if (ks.refused && ks.refused.length) {
          showNotice(el("strong", { text: "Not every pod could fall back to Redis: " }),
            ks.refused.map((r) => r.pod + " (" + r.reason + ")").join("; "));
        } else {
          showNotice(el("span", { text: "Kill switch " + (engage ? "engaged" : "disengaged") + " for " + names.join(", ") + "." }));
        }
      },
    });
  }

  // ---- wiring ----------------------------------------------------------------------

  function init() {
    $("#token-form").addEventListener("submit", saveToken);
    $("#token-clear").addEventListener("click", forgetToken);
    $("#error-dismiss").addEventListener("click", () => clearError());
    $("#notice-dismiss").addEventListener("click", () => { $("#notice").hidden = true; });
    $("#auto-refresh").addEventListener("change", () => ($("#auto-refresh").checked ? refresh() : clearTimeout(state.timer)));
    $("#killswitch-engage").addEventListener("click", () => openKillSwitchDialog(true));
    $("#killswitch-disengage").addEventListener("click", () => openKillSwitchDialog(false));
    $("#confirm-form").addEventListener("submit", submitDialog);
    $("#confirm-cancel").addEventListener("click", closeDialog);
    // The close event comes after close() returned, as a task of its own:
    // a dialog opened again in between (Cancel, then another button at
    // once) is open by then, and its action stays.
    $("#confirm-dialog").addEventListener("close", () => {
      if (!$("#confirm-dialog").open) state.dialog = null;
    });
    $("#mode-target").addEventListener("change", dryRun);
    for (const action of ["start", "pause", "abort"]) {
      $("#plan-" + action).addEventListener("click", () => openPlanDialog(action));
    }
    $("#confirm-force").addEventListener("change", dryRun);
    updateKillSwitchButtons();
    Triage.init({ api, diffTable, refresh });
    $("#actor-input").value = state.actor;
    if (state.token) {
      $("#token-input").placeholder = "saved; type to replace";
      refresh();
    } else {
      $("#token-input").focus();
    }
  }

  init();
})();
