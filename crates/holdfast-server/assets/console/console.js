// holdfast's operators' console. Everything it shows comes from
// GET /admin/overview (and /admin/audit, /admin/kill-switch), asked with the
// admin token the operator typed. The token is kept in this tab's
// sessionStorage only: never in the URL, a cookie or the console's output.
"use strict";

const REFRESH_MS = 2000;
const TOKEN_KEY = "holdfast.admin-token";
const COLORS = ["#2563eb", "#16a34a", "#dc2626", "#9333ea", "#ea580c", "#0891b2", "#ca8a04", "#4b5563", "#db2777"];

let token = null;
let timer = null;
let last = null;
// Bumped by every login and logout, so an answer that arrives for an
// earlier session changes nothing.
let session = 0;

const $ = (id) => document.getElementById(id);

// Own properties only: a shop or tag may be named "constructor".
const own = (obj, key) => (obj && Object.prototype.hasOwnProperty.call(obj, key) ? obj[key] : undefined);

function show(el, on) {
  el.hidden = !on;
}

function text(el, value) {
  el.textContent = value;
}

function num(n, digits = 0) {
  if (n === null || n === undefined) return "–";
  return Number(n).toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: digits });
}

function cell(tr, value, cls) {
  const td = document.createElement("td");
  td.textContent = value;
  if (cls) td.className = cls;
  tr.appendChild(td);
  return td;
}

class Refused extends Error {
  constructor(status, body) {
    super(body && body.message ? body.message : "HTTP " + status);
    this.status = status;
    this.code = body && body.error;
  }
}

async function api(method, path, body) {
  const init = { method, headers: { Authorization: "Bearer " + token }, cache: "no-store", credentials: "omit" };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const res = await fetch(path, init);
  let parsed = null;
  try {
    parsed = await res.json();
  } catch (_) {
    parsed = null;
  }
  if (!res.ok) throw new Refused(res.status, parsed);
  return parsed;
}

function refusal(e) {
  if (e.status === 401) return "Token refused: it is unknown, revoked or mistyped (401 unauthorized).";
  if (e.status === 403) return "Token refused: it is not an admin token (403 forbidden).";
  if (e.status) return "The server answered " + e.status + ": " + e.message;
  return "The server could not be reached: " + e.message;
}

// ---- login -------------------------------------------------------------

async function login(candidate) {
  token = candidate;
  const mine = ++session;
  let overview;
  try {
    overview = await api("GET", "/admin/overview");
  } catch (e) {
    if (mine !== session) return;
    token = null;
    sessionStorage.removeItem(TOKEN_KEY);
    text($("login-error"), refusal(e));
    show($("login-error"), true);
    return;
  }
  if (mine !== session) return;
  sessionStorage.setItem(TOKEN_KEY, token);
  show($("login-error"), false);
  render(overview);
  show($("login"), false);
  show($("console"), true);
  show($("logout"), true);
  schedule();
}

function logout() {
  session++;
  token = null;
  sessionStorage.removeItem(TOKEN_KEY);
  clearTimeout(timer);
  show($("console"), false);
  show($("logout"), false);
  show($("login"), true);
  $("token").value = "";
  show($("login-error"), false);
}

// ---- refresh -----------------------------------------------------------

function schedule() {
  clearTimeout(timer);
  timer = setTimeout(refresh, REFRESH_MS);
}

async function refresh() {
  if (!token) return;
  const mine = session;
  try {
    const overview = await api("GET", "/admin/overview");
    if (mine !== session) return;
    render(overview);
    show($("stale"), false);
  } catch (e) {
    if (mine !== session) return;
    if (e.status === 401 || e.status === 403) {
      logout();
      text($("login-error"), refusal(e));
      show($("login-error"), true);
      return;
    }
    text($("stale"), "Not refreshed: " + refusal(e));
    show($("stale"), true);
  }
  schedule();
}

function render(o) {
  last = o;
  const pods = o.pods.length > 1 || (o.pods.length === 1 && o.pods[0].name !== "default");
  document.body.classList.toggle("with-pods", pods);
  text($("backend"), o.backend);
  show($("backend"), true);
  renderPods(o.pods, pods);
  text($("updated"), "updated " + new Date(o.at).toLocaleTimeString());
  renderItems(o);
  renderRates(o.rates);
  renderConnections(o.connections, o.connection_history);
  renderMigration(o.migration);
  renderDeliveries(o.deliveries);
}

function renderPods(list, named) {
  const box = $("pods");
  box.replaceChildren();
  for (const p of list) {
    const span = document.createElement("span");
    span.className = "pill " + (p.ready ? "ok" : "danger");
    span.textContent = (named ? p.name + " " : "database ") + (p.ready ? "ready" : "down");
    span.dataset.pod = p.name;
    box.appendChild(span);
  }
}

function renderItems(o) {
  const body = $("items").querySelector("tbody");
  body.replaceChildren();
  for (const it of o.items) {
    const tr = document.createElement("tr");
    tr.dataset.shop = it.shop;
    tr.dataset.item = it.item;
    cell(tr, it.shop);
    const name = cell(tr, it.item);
    if (it.available === 0) {
      tr.classList.add("sold-out");
      const badge = document.createElement("span");
      badge.className = "pill danger";
      badge.textContent = "sold out";
      name.append(" ", badge);
    }
    cell(tr, it.pod || "", "pod-col");
    cell(tr, num(it.on_hand), "num");
    cell(tr, num(it.available), "num available");
    cell(tr, num(it.held), "num");
    cell(tr, num(it.sold_recently), "num");
    cell(tr, num(it.pool_rows), "num");
    cell(tr, num(it.refills), "num");
    body.appendChild(tr);
  }
  show($("items-empty"), o.items.length === 0 && !o.items_error);
  text($("items-note"), o.items_error ? "(database: " + o.items_error + ")" : "(sold in the last " + o.sold_window_seconds + " s)");
}

function renderRates(rates) {
  const now = rates.length ? rates[rates.length - 1] : null;
  text($("rate-holds"), now ? num(now.holds, 1) : "–");
  text($("rate-sales"), now ? num(now.sales, 1) : "–");
  text($("rate-releases"), now ? num(now.releases, 1) : "–");
  text($("rate-refused"), now ? num(now.refused, 1) : "–");
  const series = [
    { name: "holds", points: rates.map((r) => [Date.parse(r.at), r.holds]) },
    { name: "sales", points: rates.map((r) => [Date.parse(r.at), r.sales]) },
    { name: "turned away", points: rates.map((r) => [Date.parse(r.at), r.refused]) },
  ];
  chart($("rates-chart"), $("rates-legend"), series, "/s");
}

function renderConnections(rows, history) {
  const body = $("connections").querySelector("tbody");
  body.replaceChildren();
  for (const r of rows) {
    const tr = document.createElement("tr");
    tr.dataset.tag = r.tag;
    cell(tr, r.tag);
    cell(tr, r.pod || "", "pod-col");
    cell(tr, num(r.checkouts), "num");
    cell(tr, num(r.transactions), "num");
    cell(tr, num(r.statements), "num");
    cell(tr, num(r.hold_seconds_total, 2), "num");
    cell(tr, num(r.hold_seconds_mean * 1000, 2), "num");
    cell(tr, r.hold_seconds_max === null || r.hold_seconds_max === undefined ? "–" : num(r.hold_seconds_max * 1000, 1), "num");
    body.appendChild(tr);
  }
  const tags = new Set();
  for (const h of history) for (const t of Object.keys(h.connections)) tags.add(t);
  const series = [...tags].sort().map((t) => ({
    name: t,
    points: history.map((h) => [Date.parse(h.at), own(h.connections, t) || 0]),
  }));
  chart($("hold-chart"), $("hold-legend"), series, " conns");
}

function renderMigration(m) {
  show($("modes-off"), !m);
  show($("modes-on"), !!m);
  show($("kill-badge"), !!(m && m.kill_switch));
  document.body.classList.toggle("killed", !!(m && m.kill_switch));
  if (!m) return;
  text($("kill-state"), m.kill_switch ? "engaged" : "released");
  $("kill-state").className = m.kill_switch ? "danger-text" : "ok-text";
  text($("kill-toggle"), m.kill_switch ? "Release kill switch" : "Engage kill switch");
  text($("shadow-mirrored"), num(m.shadow.mirrored));
  text($("shadow-matched"), num(m.shadow.matched));
  text($("shadow-mismatches"), num(m.shadow.mismatches));
  $("shadow-mismatches").classList.toggle("danger-text", m.shadow.mismatches > 0);
  text($("shadow-errors"), num(m.shadow.mirror_errors));
  const rollout = Object.entries(m.rules.rollout || {}).map(([mode, pct]) => mode + " " + pct + " %");
  const perPod = Object.entries(m.rules.pods || {}).map(
    ([pod, r]) => "pod " + pod + ": " + (Object.entries(r).map(([mode, pct]) => mode + " " + pct + " %").join(", ") || "none")
  );
  text($("rollout"), "Rollout: " + (rollout.join(", ") || "none") + (perPod.length ? " · " + perPod.join(" · ") : ""));
  const body = $("shops").querySelector("tbody");
  body.replaceChildren();
  const pins = m.rules.shops || {};
  for (const s of m.shops) {
    const tr = document.createElement("tr");
    tr.dataset.shop = s.shop;
    cell(tr, s.shop);
    cell(tr, s.pod || "", "pod-col");
    cell(tr, s.mode, "mode");
    cell(tr, own(pins, s.shop) || "");
    body.appendChild(tr);
  }
}

function renderDeliveries(d) {
  text($("wh-pending"), d ? num(d.pending) : "–");
  text($("wh-dead"), d ? num(d.dead) : "–");
  $("wh-dead").classList.toggle("danger-text", !!(d && d.dead > 0));
  text($("wh-oldest"), d && d.oldest_pending_seconds !== null ? num(d.oldest_pending_seconds, 1) + " s" : "–");
}

// ---- charts --------------------------------------------------------------

const SVG = "http://www.w3.org/2000/svg";

function svg(name, attrs) {
  const el = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  return el;
}

// Lines over time, scaled to the largest value; time runs over the last
// samples the server keeps.
function chart(el, legend, series, unit) {
  el.replaceChildren();
  legend.replaceChildren();
  const W = 600, H = 160, pad = 4;
  const xs = series.flatMap((s) => s.points.map((p) => p[0]));
  if (xs.length < 2) {
    const t = svg("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "chart-empty" });
    t.textContent = "collecting samples…";
    el.appendChild(t);
    return;
  }
  const x0 = Math.min(...xs), x1 = Math.max(...xs);
  const top = Math.max(1e-9, ...series.flatMap((s) => s.points.map((p) => p[1])));
  const x = (t) => pad + ((t - x0) / Math.max(1, x1 - x0)) * (W - 2 * pad);
  const y = (v) => H - pad - (v / top) * (H - 2 * pad);
  el.appendChild(svg("line", { x1: pad, y1: H - pad, x2: W - pad, y2: H - pad, class: "axis" }));
  series.forEach((s, i) => {
    const color = COLORS[i % COLORS.length];
    const d = s.points.map((p, j) => (j ? "L" : "M") + x(p[0]).toFixed(1) + " " + y(p[1]).toFixed(1)).join(" ");
    el.appendChild(svg("path", { d, fill: "none", stroke: color, "stroke-width": 2, "vector-effect": "non-scaling-stroke" }));
    const item = document.createElement("span");
    const swatch = document.createElement("i");
    swatch.style.background = color;
    const lastValue = s.points.length ? s.points[s.points.length - 1][1] : 0;
    item.append(swatch, s.name + " " + num(lastValue, 2) + unit);
    legend.appendChild(item);
  });
  const peak = document.createElement("span");
  peak.className = "muted";
  peak.textContent = "peak " + num(top, 2) + unit;
  legend.appendChild(peak);
}

// ---- actions ---------------------------------------------------------------

function askKillSwitch() {
  const engage = !(last && last.migration && last.migration.kill_switch);
  $("kill-confirm").dataset.engage = engage ? "true" : "false";
  text(
    $("kill-confirm-text"),
    engage
      ? "Engage the kill switch? Every shop in sql-primary goes back to Redis deciding, on every server, within a second."
      : "Release the kill switch? Shops go back to the modes their rules give them."
  );
  show($("kill-confirm"), true);
  $("kill-confirm-no").focus();
}

async function setKillSwitch() {
  const engage = $("kill-confirm").dataset.engage === "true";
  show($("kill-confirm"), false);
  show($("kill-error"), false);
  try {
    await api("POST", "/admin/kill-switch", { engaged: engage });
    render(await api("GET", "/admin/overview"));
  } catch (e) {
    text($("kill-error"), refusal(e));
    show($("kill-error"), true);
  }
}

async function audit() {
  const out = $("audit-result");
  out.className = "";
  text(out, "auditing…");
  try {
    const a = await api("GET", "/admin/audit");
    if (a.ok) {
      out.className = "ok-text";
      text(out, "OK: " + num(a.checked) + " (item, location) rows balance.");
    } else {
      out.className = "danger-text";
      text(out, "BREACH: " + a.breaches.length + " rows do not balance, " + a.orphans.length + " orphans. See holdfast audit.");
    }
  } catch (e) {
    out.className = "danger-text";
    text(out, refusal(e));
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("login-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const value = $("token").value.trim();
    $("token").value = "";
    if (value) login(value);
  });
  $("logout").addEventListener("click", logout);
  $("kill-toggle").addEventListener("click", askKillSwitch);
  $("kill-confirm-yes").addEventListener("click", setKillSwitch);
  $("kill-confirm-no").addEventListener("click", () => show($("kill-confirm"), false));
  $("audit-button").addEventListener("click", audit);
  const kept = sessionStorage.getItem(TOKEN_KEY);
  if (kept) login(kept);
});
