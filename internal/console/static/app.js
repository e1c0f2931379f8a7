// llmgate console. Plain JavaScript, no build step, no dependencies. All
// text from the server goes through textContent (never innerHTML), and the
// page runs under a CSP that allows only this script.
"use strict";

const state = { me: null, route: "", timers: [] };

// ---------- DOM and formatting helpers ----------

function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v == null || v === false) continue;
    if (k === "class") el.className = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "value") el.value = v;
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const kid of kids.flat()) {
    if (kid == null || kid === false) continue;
    el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  return el;
}

const SVGNS = "http://www.w3.org/2000/svg";
function s(tag, attrs, ...kids) {
  const el = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v != null) el.setAttribute(k, v);
  for (const kid of kids.flat()) if (kid != null) el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  return el;
}

const nf = new Intl.NumberFormat();
function num(v) { return nf.format(Math.round(v || 0)); }
function compact(v) {
  v = v || 0;
  const a = Math.abs(v);
  if (a >= 1e9) return (v / 1e9).toFixed(1).replace(/\.0$/, "") + "B";
  if (a >= 1e6) return (v / 1e6).toFixed(1).replace(/\.0$/, "") + "M";
  if (a >= 1e4) return (v / 1e3).toFixed(1).replace(/\.0$/, "") + "k";
  return num(v);
}
// usd prints dollars as the gateway's messages do (usage.FormatUSD): two
// decimals from a dollar up, three significant digits below with at least
// the cents, so that a request's thousandths of a cent do not read $0.00.
function usd(v) {
  v = v || 0;
  if (v === 0) return "$0.00";
  if (Math.abs(v) >= 1) return "$" + v.toFixed(2);
  let s = v.toFixed(Math.min(15, 2 - Math.floor(Math.log10(Math.abs(v))))).replace(/0+$/, "");
  const dec = s.length - s.indexOf(".") - 1;
  if (dec < 2) s += "0".repeat(2 - dec);
  return "$" + s;
}
function msText(v) { if (!v) return "–"; return v >= 1000 ? (v / 1000).toFixed(2) + " s" : v.toFixed(v < 10 ? 1 : 0) + " ms"; }
function when(t) { return new Date(t).toLocaleString(undefined, { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit" }); }
function day(t) { return new Date(t).toISOString().slice(0, 10); }
function pct(a, b) { return b ? (100 * a / b).toFixed(a && a / b < 0.01 ? 2 : 1) + "%" : "0%"; }

// ---------- API ----------

async function api(method, path, body) {
  const opt = { method, headers: {}, credentials: "same-origin" };
  if (body !== undefined) { opt.headers["Content-Type"] = "application/json"; opt.body = JSON.stringify(body); }
  if (method !== "GET" && state.me) opt.headers["X-CSRF-Token"] = state.me.csrf;
  const r = await fetch("/ui/api/" + path, opt);
  const ct = r.headers.get("Content-Type") || "";
  const data = ct.includes("json") ? await r.json() : await r.text();
  if (!r.ok) {
    // Not signed in yet is no error: the first visit (or an ended session)
    // gets the sign-in form without a red box; a request refused later
    // says why.
    if (r.status === 401 && path !== "login") { state.me = null; renderLogin(path === "me" ? null : data.error && data.error.message); }
    const msg = (data && data.error && data.error.message) || ("HTTP " + r.status);
    throw new Error(msg);
  }
  return data;
}

// ---------- Shell ----------

const ICONS = {
  dashboard: "M3 13h8V3H3v10zm0 8h8v-6H3v6zm10 0h8V11h-8v10zm0-18v6h8V3h-8z",
  keys: "M7 14a5 5 0 1 1 4.9-6H22v4h-2v3h-3v-3h-5.1A5 5 0 0 1 7 14zm0-3a2 2 0 1 0 0-4 2 2 0 0 0 0 4z",
  models: "M12 2 3 7v10l9 5 9-5V7l-9-5zm0 2.3L18.7 8 12 11.7 5.3 8 12 4.3zM5 9.7l6 3.3v6.7l-6-3.3V9.7zm8 10v-6.7l6-3.3v6.7l-6 3.3z",
  usage: "M4 20V10h3v10H4zm6.5 0V4h3v16h-3zM17 20v-7h3v7h-3z",
  requests: "M4 5h16v2H4V5zm0 6h16v2H4v-2zm0 6h10v2H4v-2z",
  playground: "M8 5v14l11-7L8 5z",
};
const PAGES = [
  ["dashboard", "Dashboard"], ["playground", "Playground"], ["usage", "Usage"], ["requests", "Requests"],
  ["keys", "Keys"], ["models", "Models & backends"],
];

function icon(name) { return s("svg", { viewBox: "0 0 24 24", fill: "currentColor", "aria-hidden": "true" }, s("path", { d: ICONS[name] })); }

function clearTimers() { state.timers.forEach(clearInterval); state.timers = []; }

function shell(page, title, subtitle, ...content) {
  const me = state.me;
  const nav = h("nav", { class: "nav" }, PAGES.map(([id, label]) =>
    h("a", { href: "#/" + id, class: id === page ? "active" : null, "data-testid": "nav-" + id }, icon(id), label)));
  const who = h("div", { class: "who" },
    h("b", {}, me.role === "admin" ? "Administrator" : (me.key_name || "API key")),
    h("span", { class: "muted" }, me.role === "admin" ? "signed in with the master key" : (me.key_hint || "")),
    h("button", { class: "ghost sm", "data-testid": "signout", onclick: signOut }, "Sign out"));
  const side = h("aside", { class: "side" },
    h("div", { class: "brand" }, h("img", { src: "/ui/static/logo.svg", alt: "" }), h("div", {}, "llmgate", h("small", {}, "console"))), nav, who);
  const head = h("div", { class: "head" }, h("div", {}, h("h1", {}, title), subtitle ? h("p", {}, subtitle) : null));
  const main = h("main", { class: "main", "data-page": page }, head, ...content);
  const app = document.getElementById("app");
  app.className = "";
  app.replaceChildren(h("div", { class: "shell" }, side, main));
  return { head, main };
}

function errorBox(err) { return h("div", { class: "notice error", role: "alert" }, String(err.message || err)); }

async function signOut() {
  try { await api("POST", "logout"); } catch (e) { /* the session may be gone already */ }
  state.me = null;
  location.hash = "";
  renderLogin();
}

function renderLogin(message) {
  clearTimers();
  const input = h("input", { type: "password", id: "key", name: "key", autocomplete: "current-password", placeholder: "sk-lg-…", "data-testid": "login-key", required: true });
  const err = h("div", { class: "notice error hidden", role: "alert", "data-testid": "login-error" });
  if (message) { err.textContent = message; err.classList.remove("hidden"); }
  const form = h("form", { class: "card", onsubmit: async (e) => {
    e.preventDefault();
    try {
      state.me = await api("POST", "login", { key: input.value });
      input.value = "";
      if (!location.hash || location.hash === "#/") location.hash = "#/dashboard"; else route();
    } catch (ex) { err.textContent = ex.message; err.classList.remove("hidden"); }
  } },
    h("div", { class: "brand" }, h("img", { src: "/ui/static/logo.svg", alt: "" }), h("div", {}, "llmgate", h("small", {}, "console"))),
    h("p", {}, "Sign in with the master key to manage keys and see all usage, or with an API key to see that key's own usage."),
    err,
    h("label", { for: "key" }, "Key"), input,
    h("button", { class: "primary", type: "submit", "data-testid": "login-submit" }, "Sign in"));
  const app = document.getElementById("app");
  app.className = "";
  app.replaceChildren(h("div", { class: "login" }, form));
  input.focus();
}

// ---------- Charts (hand-written SVG) ----------

// lineChart draws one or more series over time with a hover read-out.
function lineChart(points, series, opts) {
  const W = 640, H = 190, L = 46, R = 10, T = 10, B = 24;
  const n = points.length;
  let maxV = 0;
  for (const p of points) for (const sr of series) maxV = Math.max(maxV, sr.get(p) || 0);
  const nice = niceMax(maxV, opts.min);
  const x = (i) => L + (n <= 1 ? 0 : (i * (W - L - R)) / (n - 1));
  const y = (v) => T + (H - T - B) * (1 - (v || 0) / nice);
  const svg = s("svg", { class: "chart", viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", role: "img", "aria-label": opts.label });
  for (let k = 0; k <= 4; k++) {
    const v = (nice * k) / 4, yy = y(v);
    svg.append(s("line", { class: "grid-line", x1: L, x2: W - R, y1: yy, y2: yy }));
    svg.append(s("text", { class: "axis", x: L - 6, y: yy + 3.5, "text-anchor": "end" }, opts.fmt(v)));
  }
  const step = Math.max(1, Math.ceil(n / 6));
  points.forEach((p, i) => {
    if (showTick(i, n, step)) svg.append(s("text", { class: "axis", x: x(i), y: H - 6, "text-anchor": i === 0 ? "start" : i === n - 1 ? "end" : "middle" }, opts.tick(p.t)));
  });
  for (const sr of series) {
    // Series with gaps (latency) lift the pen over empty buckets instead
    // of drawing a misleading zero.
    let d = "", pen = false;
    points.forEach((p, i) => {
      if (sr.gap && sr.gap(p)) { pen = false; return; }
      d += (pen ? "L" : "M") + x(i).toFixed(1) + " " + y(sr.get(p)).toFixed(1) + " ";
      pen = true;
    });
    if (sr.area && d) svg.append(s("path", { class: "area", fill: sr.color, d: d + `L${x(n - 1)} ${y(0)} L${x(0)} ${y(0)} Z` }));
    if (d) svg.append(s("path", { class: "line", stroke: sr.color, d }));
    points.forEach((p, i) => {
      const prev = i > 0 && !(sr.gap && sr.gap(points[i - 1])), next = i < n - 1 && !(sr.gap && sr.gap(points[i + 1]));
      if (sr.gap && !sr.gap(p) && !prev && !next) svg.append(s("circle", { cx: x(i), cy: y(sr.get(p)), r: 3, fill: sr.color }));
    });
  }
  addHover(svg, points, series, x, y, opts, W, H, T, B);
  return svg;
}

// barChart draws stacked bars per bucket.
function barChart(points, series, opts) {
  const W = 640, H = 190, L = 46, R = 10, T = 10, B = 24;
  const n = points.length;
  let maxV = 0;
  for (const p of points) maxV = Math.max(maxV, series.reduce((a, sr) => a + (sr.get(p) || 0), 0));
  const nice = niceMax(maxV, opts.min);
  const slot = (W - L - R) / Math.max(n, 1), bw = Math.max(2, slot * 0.62);
  const x = (i) => L + slot * i + slot / 2;
  const y = (v) => T + (H - T - B) * (1 - (v || 0) / nice);
  const svg = s("svg", { class: "chart", viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", role: "img", "aria-label": opts.label });
  for (let k = 0; k <= 4; k++) {
    const v = (nice * k) / 4, yy = y(v);
    svg.append(s("line", { class: "grid-line", x1: L, x2: W - R, y1: yy, y2: yy }));
    svg.append(s("text", { class: "axis", x: L - 6, y: yy + 3.5, "text-anchor": "end" }, opts.fmt(v)));
  }
  const step = Math.max(1, Math.ceil(n / 6));
  points.forEach((p, i) => {
    let base = 0;
    for (const sr of series) {
      const v = sr.get(p) || 0;
      if (v > 0) svg.append(s("rect", { class: "bar", fill: sr.color, x: x(i) - bw / 2, width: bw, y: y(base + v), height: Math.max(0.5, y(base) - y(base + v)) }));
      base += v;
    }
    if (showTick(i, n, step)) svg.append(s("text", { class: "axis", x: x(i), y: H - 6, "text-anchor": i === 0 ? "start" : i === n - 1 ? "end" : "middle" }, opts.tick(p.t)));
  });
  addHover(svg, points, series, x, y, opts, W, H, T, B, true);
  return svg;
}

function addHover(svg, points, series, x, y, opts, W, H, T, B, stacked) {
  const guide = s("line", { class: "grid-line", y1: T, y2: H - B, stroke: "#94a3b8", "stroke-dasharray": "3 3", visibility: "hidden" });
  const tip = s("text", { class: "axis", y: T + 10, visibility: "hidden", "font-weight": "600", fill: "#0f172a" });
  svg.append(guide, tip);
  svg.addEventListener("mousemove", (ev) => {
    const box = svg.getBoundingClientRect();
    const px = ((ev.clientX - box.left) / box.width) * W;
    let best = 0, bd = Infinity;
    points.forEach((_, i) => { const d = Math.abs(x(i) - px); if (d < bd) { bd = d; best = i; } });
    const p = points[best];
    guide.setAttribute("x1", x(best)); guide.setAttribute("x2", x(best)); guide.setAttribute("visibility", "visible");
    tip.textContent = opts.tick(p.t, true) + "  ·  " + series.map((sr) => sr.name + " " + opts.fmt(sr.get(p) || 0, true)).join("  ·  ");
    const right = x(best) > W * 0.6;
    tip.setAttribute("x", right ? x(best) - 6 : x(best) + 6);
    tip.setAttribute("text-anchor", right ? "end" : "start");
    tip.setAttribute("visibility", "visible");
  });
  svg.addEventListener("mouseleave", () => { guide.setAttribute("visibility", "hidden"); tip.setAttribute("visibility", "hidden"); });
}

// niceMax rounds the axis top so that its quarters are round numbers.
function niceMax(v, min) {
  v = Math.max(v, min || 0);
  if (v <= 0) return 4;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 4, 6, 8, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

// showTick labels every step-th bucket, and the last one only when it does
// not crowd the previous label.
function showTick(i, n, step) {
  if (i % step === 0) return i + step <= n - 1 || i === n - 1 || n - 1 - i >= step * 0.7 ? true : i === 0;
  return i === n - 1 && (n - 1) % step >= step * 0.7;
}

function chartCard(title, series, svg, note) {
  return h("div", { class: "card" },
    h("div", { class: "chart-title" }, h("h2", {}, title),
      h("div", { class: "legend" }, series.map((sr) => h("span", {}, h("i", { style: null, "data-color": sr.color }), sr.name)))),
    svg, note ? h("div", { class: "muted small" }, note) : null);
}

// The CSP forbids inline style attributes, so legend swatches get their
// colour through the CSSOM after insertion.
function paintLegends(root) {
  root.querySelectorAll("[data-color]").forEach((el) => { el.style.background = el.getAttribute("data-color"); });
}

// ---------- Dashboard ----------

async function renderDashboard() {
  const rangeSel = h("div", { class: "seg", "data-testid": "range" });
  const { head, main } = shell("dashboard", "Dashboard", state.me.role === "admin" ? "All keys, all models" : "Your key's usage");
  head.append(rangeSel);
  const body = h("div", {});
  main.append(body);
  const cur = sessionStorage.getItem("range") || "24h";
  for (const r of ["24h", "7d", "30d"]) {
    rangeSel.append(h("button", { class: r === cur ? "on" : null, onclick: () => { sessionStorage.setItem("range", r); renderDashboard(); } }, r));
  }
  const load = async () => {
    let d;
    try { d = await api("GET", "overview?range=" + cur); } catch (e) { body.replaceChildren(errorBox(e)); return; }
    const hourly = d.bucket_seconds <= 3600;
    const tick = (t, long) => {
      const dt = new Date(t);
      if (long) return hourly ? dt.toLocaleString(undefined, { weekday: "short", hour: "2-digit", minute: "2-digit" }) : dt.toLocaleDateString(undefined, { month: "short", day: "numeric" });
      return hourly ? dt.toLocaleTimeString(undefined, { hour: "2-digit", minute: "2-digit", hourCycle: "h23" }) : dt.toLocaleDateString(undefined, { month: "short", day: "numeric" });
    };
    const t = d.totals, live = d.live || {};
    const kpi = (label, value, sub, id) => h("div", { class: "card kpi", "data-testid": id }, h("div", { class: "label" }, label), h("div", { class: "value" }, value), h("div", { class: "sub" }, sub || "\u00a0"));
    const kpis = h("div", { class: "grid kpis" },
      kpi("Requests", num(t.requests), pct(t.errors, t.requests) + " errors", "kpi-requests"),
      kpi("Tokens", compact(t.prompt_tokens + t.completion_tokens), compact(t.prompt_tokens) + " in (" + compact(t.cached_tokens || 0) + " cached) · " + compact(t.completion_tokens) + " out", "kpi-tokens"),
      kpi("Cost", usd(t.cost_usd), "priced by the gateway", "kpi-cost"),
      kpi("Latency p50", msText(t.p50_ms), d.percentiles_approximate ? "weighted over models" : "end to end", "kpi-p50"),
      kpi("Latency p95", msText(t.p95_ms), d.percentiles_approximate ? "weighted over models" : "end to end", "kpi-p95"),
      d.live ? kpi("In flight", num(live.in_flight || 0), "ledger queue " + num(live.ledger_queue || 0), "kpi-live") : null);
    const sReq = [{ name: "ok", color: "#4f46e5", get: (p) => p.requests - p.errors }, { name: "errors", color: "#ef4444", get: (p) => p.errors }];
    const sTok = [{ name: "prompt", color: "#0ea5e9", get: (p) => p.prompt_tokens, area: true }, { name: "completion", color: "#4f46e5", get: (p) => p.completion_tokens, area: true }];
    const sCost = [{ name: "cost", color: "#10b981", get: (p) => p.cost_usd, area: true }];
    const idle = (p) => !p.requests;
    const sLat = [{ name: "p50", color: "#0ea5e9", get: (p) => p.p50_ms, gap: idle }, { name: "p95", color: "#f59e0b", get: (p) => p.p95_ms, gap: idle }];
    const fmtN = (v) => compact(v), fmtMs = (v) => (v ? msText(v) : "0"), fmtUsd = (v, long) => long ? usd(v) : "$" + (v >= 10 ? v.toFixed(0) : v.toFixed(2));
    const charts = h("div", { class: "grid charts" },
      chartCard("Requests", sReq, barChart(d.series, sReq, { label: "requests over time", fmt: fmtN, tick, min: 4 })),
      chartCard("Tokens", sTok, lineChart(d.series, sTok, { label: "tokens over time", fmt: fmtN, tick })),
      chartCard("Latency", sLat, lineChart(d.series, sLat, { label: "latency over time", fmt: fmtMs, tick }), "End-to-end request latency per " + (hourly ? "hour" : "day")),
      chartCard("Cost", sCost, lineChart(d.series, sCost, { label: "cost over time", fmt: fmtUsd, tick, min: 0.04 })));
    const rows = (d.models || []).map((m) => h("tr", {},
      h("td", { class: "mono" }, m.model), h("td", { class: "num" }, num(m.requests)), h("td", { class: "num" }, pct(m.errors, m.requests)),
      h("td", { class: "num" }, compact(m.prompt_tokens)), h("td", { class: "num" }, compact(m.completion_tokens)),
      h("td", { class: "num" }, msText(m.p50_latency_ms)), h("td", { class: "num" }, msText(m.p95_latency_ms)), h("td", { class: "num" }, usd(m.cost_usd))));
    const table = h("div", { class: "card" }, h("h2", {}, "Models in this range"),
      rows.length ? h("div", { class: "table-wrap" }, h("table", {}, h("thead", {}, h("tr", {}, ["Model", "Requests", "Errors", "Prompt", "Completion", "p50", "p95", "Cost"].map((c, i) => h("th", { class: i ? "num" : null }, c)))), h("tbody", {}, rows)))
        : h("div", { class: "empty" }, "No requests yet in this range. Try the ", h("a", { href: "#/playground" }, "playground"), "."));
    body.replaceChildren(kpis, charts, table);
    paintLegends(body);
  };
  await load();
  state.timers.push(setInterval(() => { if (state.route === "dashboard" && !document.hidden) load(); }, 10000));
}

// ---------- Keys ----------

function secretBox(title, secret) {
  const code = h("code", { "data-testid": "new-secret" }, secret);
  const copy = h("button", { class: "primary sm", onclick: async () => {
    try { await navigator.clipboard.writeText(secret); copy.textContent = "Copied"; } catch (e) { copy.textContent = "Select and copy"; }
  } }, "Copy");
  return h("div", { class: "secret-box", "data-testid": "secret-box" },
    h("b", {}, title),
    h("p", {}, "Copy it now: this is the only time the console shows it. llmgate keeps only its hash."),
    h("div", { class: "row" }, code, copy,
      h("button", { class: "ghost sm", onclick: (e) => e.target.closest(".secret-box").remove() }, "Done")));
}

async function renderKeys() {
  const { main } = shell("keys", "Keys", state.me.role === "admin" ? "Virtual keys: scopes, limits, budgets" : "Your key");
  const slot = h("div", {});
  const list = h("div", { class: "card" });
  main.append(slot);
  const admin = state.me.role === "admin";
  if (admin) main.append(createKeyForm(slot, () => load()));
  main.append(list);
  const load = async () => {
    let d;
    try { d = await api("GET", "keys"); } catch (e) { list.replaceChildren(errorBox(e)); return; }
    const rows = d.keys.map((k) => {
      const st = k.status === "active" ? "ok" : k.status === "expired" ? "warn" : "bad";
      const limits = [k.rpm ? k.rpm + " rpm" : null, k.tpm ? compact(k.tpm) + " tpm" : null, k.max_concurrency ? k.max_concurrency + " conc." : null, k.priority > 1 ? "priority " + k.priority : null].filter(Boolean).join(" · ") || "none";
      const budget = k.budget_usd ? usd(k.budget_usd) + (k.budget_period ? " / " + k.budget_period.replace("ly", "") : "") : "none";
      // Spend in the budget's current period (all time without one), and
      // the share of the budget it is.
      const spent = h("td", { "data-testid": "key-spent" }, usd(k.spent_usd),
        k.budget_usd ? h("span", { class: "muted small" }, " " + pct(k.spent_usd, k.budget_usd)) : null,
        k.reserved_usd ? h("div", { class: "muted small" }, usd(k.reserved_usd) + " in flight") : null);
      const acts = h("td", { class: "num" });
      if (admin && (k.status === "active" || k.status === "exhausted")) {
        if (d.can_rotate) acts.append(h("button", { class: "sm", "data-testid": "rotate-" + k.name, onclick: async () => {
          if (!confirm("Rotate " + k.name + "? The current secret stops working within a second.")) return;
          try { const r = await api("POST", "keys/" + encodeURIComponent(k.id) + "/rotate"); slot.replaceChildren(secretBox("New secret for " + k.name, r.secret)); load(); } catch (e) { slot.replaceChildren(errorBox(e)); }
        } }, "Rotate"), " ");
        acts.append(h("button", { class: "sm danger", "data-testid": "revoke-" + k.name, onclick: async () => {
          if (!confirm("Revoke " + k.name + "? Clients using it get 401 within a second.")) return;
          try { await api("POST", "keys/" + encodeURIComponent(k.id) + "/revoke"); load(); } catch (e) { slot.replaceChildren(errorBox(e)); }
        } }, "Revoke"));
      }
      return h("tr", { "data-testid": "key-row" },
        h("td", {}, h("b", {}, k.name), k.owner ? h("div", { class: "muted small" }, k.owner) : null),
        h("td", { class: "mono" }, k.hint), h("td", {}, h("span", { class: "badge " + st, "data-testid": "key-status" }, k.status)),
        h("td", { class: "mono small" }, k.models.length ? k.models.join(", ") : "all models"),
        h("td", {}, limits), h("td", {}, budget), spent,
        h("td", {}, new Date(k.created_at).toLocaleDateString()), h("td", {}, k.expires_at ? new Date(k.expires_at).toLocaleDateString() : "never"), acts);
    });
    list.replaceChildren(h("h2", {}, admin ? "All keys" : "Key"),
      rows.length ? h("div", { class: "table-wrap" }, h("table", { "data-testid": "keys-table" },
        h("thead", {}, h("tr", {}, ["Name", "Key", "Status", "Models", "Limits", "Budget", "Spent", "Created", "Expires", ""].map((c) => h("th", {}, c)))), h("tbody", {}, rows)))
        : h("div", { class: "empty" }, "No keys yet. Create one above."));
  };
  await load();
}

function createKeyForm(slot, reload) {
  const f = (name, label, attrs, hint) => h("div", {}, h("label", { for: "k-" + name }, label, hint ? h("span", { class: "hint" }, " " + hint) : null), h("input", Object.assign({ id: "k-" + name, name }, attrs)));
  const period = h("select", { id: "k-period", name: "budget_period" }, [["", "never resets"], ["daily", "daily"], ["monthly", "monthly"]].map(([v, t]) => h("option", { value: v }, t)));
  const form = h("form", { class: "card", "data-testid": "create-key-form" },
    h("h2", {}, "Create a key"),
    h("div", { class: "form-grid" },
      f("name", "Name", { required: true, placeholder: "e.g. team-search", "data-testid": "key-name" }),
      f("owner", "Owner", { placeholder: "optional" }),
      h("div", { class: "wide" }, h("label", { for: "k-models" }, "Models ", h("span", { class: "hint" }, "comma-separated names or globs; empty = all")),
        h("input", { id: "k-models", name: "models", placeholder: "qwen3-*, gpt-4o-mini", "data-testid": "key-models" })),
      f("rpm", "Requests / min", { type: "number", min: 0, placeholder: "unlimited" }),
      f("tpm", "Tokens / min", { type: "number", min: 0, placeholder: "unlimited" }),
      f("conc", "Concurrency", { type: "number", min: 0, placeholder: "unlimited" }),
      f("priority", "Priority", { type: "number", min: 1, max: 100, placeholder: "1" }, "turns in a busy deployment's queue"),
      f("budget", "Budget (USD)", { type: "number", min: 0, step: "0.01", placeholder: "none" }),
      h("div", {}, h("label", { for: "k-period" }, "Budget period"), period),
      f("expires", "Expires in (days)", { type: "number", min: 0, step: "any", placeholder: "never" })),
    h("div", { class: "actions" }, h("button", { class: "primary", type: "submit", "data-testid": "create-key" }, "Create key")));
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const v = (n) => form.elements[n].value.trim();
    const body = {
      name: v("name"), owner: v("owner"), models: v("models") ? v("models").split(",").map((x) => x.trim()).filter(Boolean) : [],
      rpm: +v("rpm") || 0, tpm: +v("tpm") || 0, max_concurrency: +v("conc") || 0, priority: +v("priority") || 0, budget_usd: +v("budget") || 0,
      budget_period: period.value, expires_in_days: +v("expires") || 0,
    };
    try {
      const r = await api("POST", "keys", body);
      slot.replaceChildren(secretBox("Key “" + r.key.name + "” created", r.secret));
      form.reset();
      reload();
    } catch (ex) { slot.replaceChildren(errorBox(ex)); }
  });
  const wrap = h("div", { class: "grid" }, form);
  wrap.classList.add("kpis");
  return wrap;
}

// ---------- Models ----------

async function renderModels() {
  const { main } = shell("models", "Models & backends", "Routes, deployments, breaker state and local engines");
  let d;
  try { d = await api("GET", "models"); } catch (e) { main.append(errorBox(e)); return; }
  const health = Array.isArray(d.health) ? d.health : [];
  const byName = new Map(health.map((m) => [m.model, m]));
  const cards = (d.models || []).map((name) => {
    const m = byName.get(name);
    const ok = !m || m.healthy;
    const deps = m ? m.deployments.map((dp) => {
      const cls = dp.status === "healthy" ? "ok" : dp.status === "half_open" || dp.status === "rate_limited" ? "warn" : "bad";
      return h("div", { class: "dep" },
        h("span", { class: "name" }, dp.backend), h("span", { class: "badge " + cls }, dp.status.replace("_", " ")),
        h("span", { class: "muted mono" }, dp.upstream_model), h("span", { class: "muted" }, dp.latency_ms ? msText(dp.latency_ms) + " avg" : ""),
        h("span", { class: "muted" }, "breaker " + dp.breaker.state + (dp.breaker.trips ? " · " + dp.breaker.trips + " trips" : "")),
        h("span", { class: "muted" }, dp.outstanding ? dp.outstanding + " in flight" : ""),
        dp.queue ? h("span", { class: dp.queue.waiting ? "small warn" : "muted small", "data-testid": "dep-queue" },
          "queue: " + dp.queue.waiting + " waiting · " + dp.queue.in_flight + (dp.queue.max_concurrency ? "/" + dp.queue.max_concurrency : "") + " in flight" +
          (dp.queue.waits ? " · mean wait " + msText(dp.queue.mean_wait_ms) : "") + (dp.queue.timeouts ? " · " + dp.queue.timeouts + " timed out" : "")) : null,
        dp.health_check ? h("span", { class: "muted small" }, "health check: " + dp.health_check) : null,
        dp.breaker.last_error ? h("span", { class: "small status-5" }, dp.breaker.last_error) : null);
    }) : [h("div", { class: "muted small" }, "No health information from the router.")];
    return h("div", { class: "card model-card", "data-testid": "model-card" },
      h("div", { class: "top" }, h("h3", {}, name), h("span", { class: "badge " + (ok ? "ok" : "bad") }, ok ? "available" : "unavailable")),
      m ? h("div", { class: "muted small" }, "balancing " + (m.balancing || "default") + (m.fallbacks && m.fallbacks.length ? " · falls back to " + m.fallbacks.join(", ") : "")) : null,
      deps);
  });
  main.append(h("div", { class: "grid model-grid" }, cards.length ? cards : h("div", { class: "card empty" }, "No models configured.")));
  const engines = Array.isArray(d.engines) ? d.engines : [];
  if (engines.length) {
    const rows = engines.map((e) => h("tr", {},
      h("td", {}, h("b", {}, e.name)), h("td", {}, h("span", { class: "badge " + (e.state === "ready" ? "ok" : e.state === "failed" ? "bad" : "warn") }, e.state)),
      h("td", { class: "mono small" }, (e.models || []).join(", ")), h("td", { class: "num" }, e.port), h("td", { class: "num" }, e.in_flight),
      h("td", { class: "num" }, e.queued), h("td", { class: "num" }, e.uptime_seconds ? Math.round(e.uptime_seconds) + " s" : "–"),
      h("td", { class: "small status-5" }, e.last_error || "")));
    main.append(h("div", { class: "card" }, h("h2", {}, "Local engines"), h("div", { class: "table-wrap" }, h("table", {},
      h("thead", {}, h("tr", {}, ["Engine", "State", "Models", "Port", "In flight", "Queued", "Uptime", "Last error"].map((c, i) => h("th", { class: i >= 3 && i <= 6 ? "num" : null }, c)))),
      h("tbody", {}, rows)))));
  }
}

// ---------- Usage explorer ----------

async function renderUsage() {
  const { main } = shell("usage", "Usage", "Filter, group and export the usage ledger");
  const today = new Date(), weekAgo = new Date(Date.now() - 6 * 864e5);
  const since = h("input", { type: "date", id: "u-since", value: day(weekAgo), "data-testid": "usage-since" });
  const until = h("input", { type: "date", id: "u-until", value: day(today) });
  const model = h("select", { id: "u-model", "data-testid": "usage-model" }, h("option", { value: "" }, "all models"));
  const key = h("select", { id: "u-key" }, h("option", { value: "" }, "all keys"));
  const group = h("select", { id: "u-group", "data-testid": "usage-group" },
    [["key,model", "key and model"], ["model", "model"], ["key", "key"], ["backend", "backend"], ["day,model", "day and model"], ["day", "day"]].map(([v, t]) => h("option", { value: v }, t)));
  const csv = h("a", { class: "btn", "data-testid": "usage-csv", download: "llmgate-usage.csv" }, "Export CSV");
  const admin = state.me.role === "admin";
  const bar = h("div", { class: "toolbar card" },
    h("div", {}, h("label", { for: "u-since" }, "From"), since), h("div", {}, h("label", { for: "u-until" }, "To"), until),
    h("div", {}, h("label", { for: "u-model" }, "Model"), model),
    admin ? h("div", {}, h("label", { for: "u-key" }, "Key"), key) : null,
    h("div", {}, h("label", { for: "u-group" }, "Group by"), group),
    h("div", { class: "actions" }, h("button", { class: "primary", "data-testid": "usage-apply", onclick: () => load() }, "Apply"), csv));
  const out = h("div", { class: "card", "data-testid": "usage-table" });
  main.append(bar, out);
  api("GET", "models").then((d) => (d.models || []).forEach((m) => model.append(h("option", { value: m }, m)))).catch(() => {});
  if (admin) api("GET", "keys").then((d) => d.keys.forEach((k) => key.append(h("option", { value: k.id }, k.name + " (" + k.hint + ")")))).catch(() => {});
  const query = () => {
    const q = new URLSearchParams({ since: since.value, until: until.value, group: group.value });
    if (model.value) q.set("model", model.value);
    if (admin && key.value) q.set("key", key.value);
    return q;
  };
  const load = async () => {
    const q = query();
    const qc = new URLSearchParams(q); qc.set("format", "csv");
    csv.href = "/ui/api/usage?" + qc.toString();
    let d;
    try { d = await api("GET", "usage?" + q.toString()); } catch (e) { out.replaceChildren(errorBox(e)); return; }
    const g = d.group && d.group.length ? d.group : ["key", "model"];
    const cols = [];
    if (g.includes("day")) cols.push(["Day", (r) => r.day]);
    if (g.includes("key")) cols.push(["Key", (r) => r.key_name || r.key_id]);
    if (g.includes("model")) cols.push(["Model", (r) => r.model, "mono"]);
    if (g.includes("backend")) cols.push(["Backend", (r) => r.backend]);
    const nums = [["Requests", (r) => num(r.requests)], ["Errors", (r) => num(r.errors)], ["Prompt tokens", (r) => num(r.prompt_tokens)],
      ["Cached tokens", (r) => num(r.cached_tokens || 0)], ["Completion tokens", (r) => num(r.completion_tokens)], ["p50", (r) => msText(r.p50_latency_ms)], ["p95", (r) => msText(r.p95_latency_ms)], ["Cost", (r) => usd(r.cost_usd)]];
    const tot = d.rows.reduce((a, r) => { a.requests += r.requests; a.errors += r.errors; a.prompt_tokens += r.prompt_tokens; a.completion_tokens += r.completion_tokens; a.cost_usd += r.cost_usd; return a; },
      { requests: 0, errors: 0, prompt_tokens: 0, completion_tokens: 0, cost_usd: 0 });
    out.replaceChildren(h("h2", {}, d.rows.length + " group" + (d.rows.length === 1 ? "" : "s") + " · " + num(tot.requests) + (tot.requests === 1 ? " request · " : " requests · ") + compact(tot.prompt_tokens + tot.completion_tokens) + " tokens · " + usd(tot.cost_usd)),
      d.rows.length ? h("div", { class: "table-wrap" }, h("table", {},
        h("thead", {}, h("tr", {}, cols.map((c) => h("th", {}, c[0])), nums.map((c) => h("th", { class: "num" }, c[0])))),
        h("tbody", {}, d.rows.map((r) => h("tr", { "data-testid": "usage-row" }, cols.map((c) => h("td", { class: c[2] || null }, c[1](r))), nums.map((c) => h("td", { class: "num" }, c[1](r))))))))
        : h("div", { class: "empty" }, "No usage matches these filters."));
  };
  await load();
}

// ---------- Recent requests ----------

async function renderRequests() {
  const { head, main } = shell("requests", "Requests", "The newest requests: metadata only, the gateway stores no prompts or answers");
  const refresh = h("button", { onclick: () => load(), "data-testid": "requests-refresh" }, "Refresh");
  head.append(refresh);
  const out = h("div", { class: "card" });
  main.append(out);
  const load = async () => {
    let d;
    try { d = await api("GET", "recent?limit=200"); } catch (e) { out.replaceChildren(errorBox(e)); return; }
    const rows = d.requests.map((r) => h("tr", { "data-testid": "request-row" },
      h("td", {}, when(r.time)), h("td", {}, h("div", { class: "mono" }, r.model), h("div", { class: "muted small" }, (r.served_model ? "fallback " + r.served_model + " · " : "") + r.backend)), h("td", {}, r.key_name || r.key_id),
      h("td", {}, r.endpoint + (r.stream ? " · stream" : "")),
      h("td", { class: "status-" + String(r.status)[0] }, r.status, r.error_type ? h("span", { class: "muted small" }, " " + r.error_type) : null),
      h("td", { class: "num" }, num(r.prompt_tokens)), h("td", { class: "num" }, num(r.cached_tokens || 0)), h("td", { class: "num" }, num(r.completion_tokens) + (r.estimated ? "*" : "")),
      h("td", { class: "num" }, msText(r.ttft_ms)), h("td", { class: "num" }, msText(r.latency_ms)),
      h("td", { class: "mono small muted ellipsis", title: (r.request_id ? r.request_id + "\n" : "") + "record " + r.id }, r.request_id || r.id)));
    out.replaceChildren(...[rows.length ? h("div", { class: "table-wrap" }, h("table", { "data-testid": "requests-table" },
      h("thead", {}, h("tr", {}, ["Time", "Model · backend", "Key", "Endpoint", "Status", "Prompt", "Cached", "Completion", "TTFT", "Latency", "Request id"].map((c, i) => h("th", { class: i >= 5 && i <= 9 ? "num" : null }, c)))),
      h("tbody", {}, rows))) : h("div", { class: "empty" }, "No requests yet."),
      d.requests.some((r) => r.estimated) ? h("div", { class: "muted small" }, "* estimated locally: the backend did not report usage.") : null].filter(Boolean));
  };
  await load();
  state.timers.push(setInterval(() => { if (state.route === "requests" && !document.hidden) load(); }, 5000));
}

// ---------- Playground ----------

async function renderPlayground() {
  const { main } = shell("playground", "Playground", "One prompt, up to three models, streamed side by side");
  let models = [];
  try { models = (await api("GET", "models")).models || []; } catch (e) { main.append(errorBox(e)); return; }
  const saved = JSON.parse(sessionStorage.getItem("pg-models") || "null") || models.slice(0, 2);
  const picks = [0, 1, 2].map((i) => h("select", { "data-testid": "pg-model-" + i, "aria-label": "model " + (i + 1) },
    h("option", { value: "" }, i ? "— none —" : "— choose a model —"), models.map((m) => h("option", { value: m }, m))));
  picks.forEach((p, i) => { p.value = saved[i] && models.includes(saved[i]) ? saved[i] : ""; });
  const prompt = h("textarea", { id: "pg-prompt", "data-testid": "pg-prompt", rows: 7 }, sessionStorage.getItem("pg-prompt") || "Explain continuous batching in LLM serving in three sentences.");
  const maxTok = h("input", { id: "pg-max", type: "number", min: 1, max: 8192, value: "256" });
  const temp = h("input", { id: "pg-temp", type: "number", min: 0, max: 2, step: "0.1", value: "0.7" });
  const system = h("input", { id: "pg-system", placeholder: "optional system prompt" });
  const run = h("button", { class: "primary", "data-testid": "pg-run" }, "Run");
  const stop = h("button", { disabled: true }, "Stop");
  const panes = h("div", { class: "pg-panes" });
  main.append(
    h("div", { class: "pg-controls" },
      h("div", { class: "card" }, h("label", { for: "pg-prompt" }, "Prompt"), prompt,
        h("div", { class: "form-grid" }, h("div", { class: "wide" }, h("label", { for: "pg-system" }, "System"), system))),
      h("div", { class: "card model-picks" }, h("label", {}, "Models"), picks,
        h("div", { class: "form-grid" }, h("div", {}, h("label", { for: "pg-max" }, "Max tokens"), maxTok), h("div", {}, h("label", { for: "pg-temp" }, "Temperature"), temp)),
        h("div", { class: "actions" }, stop, run))),
    panes);
  let controllers = [];
  stop.addEventListener("click", () => controllers.forEach((c) => c.abort()));
  run.addEventListener("click", async () => {
    const chosen = picks.map((p) => p.value).filter(Boolean);
    sessionStorage.setItem("pg-models", JSON.stringify(picks.map((p) => p.value)));
    sessionStorage.setItem("pg-prompt", prompt.value);
    if (!chosen.length) { panes.replaceChildren(errorBox("Choose at least one model.")); return; }
    const messages = [];
    if (system.value.trim()) messages.push({ role: "system", content: system.value.trim() });
    messages.push({ role: "user", content: prompt.value });
    controllers = chosen.map(() => new AbortController());
    run.disabled = true; stop.disabled = false;
    const views = chosen.map((m, i) => pane(m, i));
    panes.replaceChildren(...views.map((v) => v.el));
    await Promise.all(chosen.map((m, i) => streamChat(m, messages, +maxTok.value || 256, +temp.value, controllers[i].signal, views[i])));
    run.disabled = false; stop.disabled = true;
  });
}

function pane(model, i) {
  const out = h("div", { class: "out cursor", "data-testid": "pg-output-" + i });
  const stat = (label, id) => { const b = h("b", { "data-testid": "pg-" + id + "-" + i }, "–"); return [h("div", {}, h("span", {}, label), b), b]; };
  const [ttftBox, ttft] = stat("TTFT", "ttft"), [tpsBox, tps] = stat("Tokens / s", "tps"), [tokBox, tok] = stat("Tokens", "tokens");
  const badge = h("span", { class: "badge warn", "data-testid": "pg-state-" + i }, "waiting");
  const el = h("div", { class: "card pane", "data-testid": "pg-pane" }, h("header", {}, h("b", {}, model), badge), out, h("div", { class: "stats" }, ttftBox, tpsBox, tokBox));
  return { el, out, ttft, tps, tok, badge };
}

// streamChat sends one streamed chat request and renders tokens as they
// arrive. TTFT is measured from sending to the first content delta;
// tokens/s over the generation after the first token, as benchmarks do.
async function streamChat(model, messages, maxTokens, temperature, signal, v) {
  const t0 = performance.now();
  let first = 0, chunks = 0, usage = null, text = "";
  const set = (state, cls) => { v.badge.textContent = state; v.badge.className = "badge " + cls; };
  try {
    const r = await fetch("/ui/api/chat", {
      method: "POST", credentials: "same-origin", signal,
      headers: { "Content-Type": "application/json", "X-CSRF-Token": state.me.csrf },
      body: JSON.stringify({ model, messages, max_tokens: maxTokens, temperature, stream: true, stream_options: { include_usage: true } }),
    });
    if (!r.ok) {
      let msg = "HTTP " + r.status;
      try { const e = await r.json(); msg = (e.error && e.error.message) || msg; } catch (e) { /* not JSON */ }
      throw new Error(msg);
    }
    set("streaming", "warn");
    const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += value;
      let nl;
      while ((nl = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, nl).replace(/\r$/, "");
        buf = buf.slice(nl + 1);
        if (!line.startsWith("data:")) continue;
        const data = line.slice(5).trim();
        if (data === "[DONE]") continue;
        let ev;
        try { ev = JSON.parse(data); } catch (e) { continue; }
        if (ev.error) throw new Error(ev.error.message || "stream error");
        if (ev.usage) usage = ev.usage;
        const delta = ev.choices && ev.choices[0] && ev.choices[0].delta;
        const piece = delta && (delta.content || delta.reasoning_content || delta.reasoning || "");
        if (piece) {
          if (!first) { first = performance.now(); v.ttft.textContent = msText(first - t0); }
          chunks++;
          text += piece;
          v.out.textContent = text;
          v.tok.textContent = num(chunks);
          const gen = (performance.now() - first) / 1000;
          if (gen > 0.05 && chunks > 1) v.tps.textContent = ((chunks - 1) / gen).toFixed(1);
        }
      }
    }
    const end = performance.now();
    const n = usage ? usage.completion_tokens : chunks;
    v.tok.textContent = num(n) + (usage ? "" : "*");
    if (first && n > 1 && end > first) v.tps.textContent = ((n - 1) / ((end - first) / 1000)).toFixed(1);
    set("done · " + ((end - t0) / 1000).toFixed(1) + " s", "ok");
  } catch (e) {
    if (e.name === "AbortError") set("stopped", "plain");
    else { set("error", "bad"); v.out.classList.add("err"); v.out.textContent = (text ? text + "\n\n" : "") + e.message; }
  } finally {
    v.out.classList.remove("cursor");
  }
}

// ---------- Router ----------

const ROUTES = { dashboard: renderDashboard, keys: renderKeys, models: renderModels, usage: renderUsage, requests: renderRequests, playground: renderPlayground };

async function route() {
  clearTimers();
  if (!state.me) {
    try { state.me = await api("GET", "me"); } catch (e) { return; } // api() already showed the sign-in
  }
  const name = (location.hash.replace(/^#\//, "") || "dashboard").split("?")[0];
  state.route = ROUTES[name] ? name : "dashboard";
  try { await ROUTES[state.route](); } catch (e) { document.querySelector("main") ? document.querySelector("main").append(errorBox(e)) : renderLogin(e.message); }
}

window.addEventListener("hashchange", route);
route();
