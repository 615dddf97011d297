// The console: sign in, views refreshed every two seconds while shown, the audit log's live tail, and actions
// that make the same API calls as the CLI (errors shown with the API's own message).

import { call, token, whoAmI, withQuery } from "./api.js";
import { startTail } from "./tail.js";
import * as v from "./views.js";

const $ = (id) => document.getElementById(id);
const el = v.el;
const REFRESH_MS = 2000;
const PAGE_SIZE = 50;
/// Audit rows kept in the page: the tail is bounded, however busy the cloud.
const TAIL_ROWS = 1000;
/// Seconds of history in the chart.
const CHART_SECONDS = 120;

let role = null;
let view = "instances";
let stopTail = null;
let refreshTimer = null;

function say(message) {
  $("message").textContent = message ?? "";
}

/// Run an action; its error (the API's message) is shown, success clears the last one and refreshes.
async function act(f) {
  try {
    await f();
    say("");
    await refresh();
  } catch (e) {
    say(e.message);
  }
}

// ------------------------------------------------------------------------------------------------ paged lists

/// A list paged through the API's page_token: the tokens of the pages before the one shown.
class Pager {
  constructor(name) {
    this.name = name;
    this.tokens = [undefined];
    this.next = undefined;
  }
  get current() {
    return this.tokens[this.tokens.length - 1];
  }
  async load() {
    const page = await call("GET", withQuery(`/v1/${this.name}`, { page_size: PAGE_SIZE, page_token: this.current }));
    this.next = page.next_page_token;
    const back = el("button", { disabled: this.tokens.length === 1, onclick: () => (this.tokens.pop(), refresh()) }, "‹ Previous");
    const fwd = el("button", { disabled: !this.next, onclick: () => (this.tokens.push(this.next), refresh()) }, "Next ›");
    $(`${this.name}-pager`).replaceChildren(back, ` page ${this.tokens.length} `, fwd);
    return page.items;
  }
}
const pagers = { instances: new Pager("instances"), "load-balancers": new Pager("load-balancers") };

// ----------------------------------------------------------------------------------------------------- views

const admin = () => role === "admin";

const loaders = {
  async instances() {
    const actions = admin()
      ? {
          reclaim: (i) => act(() => call("POST", "/v1/spot/reclaim", { instance_ids: [i.id] })),
          hang: (i) => act(() => call("POST", "/v1/hangs", { instance_ids: [i.id] })),
          resume: (i) => act(() => call("DELETE", `/v1/hangs/${encodeURIComponent(i.id)}`)),
        }
      : undefined;
    // Hung machines are the admin's to see.
    const [items, hangs] = await Promise.all([
      pagers.instances.load(),
      admin() ? call("GET", "/v1/hangs") : { items: [] },
    ]);
    const hung = new Set(hangs.items.map((h) => h.instance_id));
    v.fillTable($("instances-table"), v.instanceColumns(actions, hung), items);
  },
  async "load-balancers"() {
    v.fillTable($("load-balancers-table"), v.loadBalancerColumns, await pagers["load-balancers"].load());
  },
  async "route-tables"() {
    const [tables, quotas] = await Promise.all([call("GET", "/v1/route-tables"), call("GET", "/v1/quotas")]);
    const limit = quotas.items.find((q) => q.name === "routes-per-route-table")?.limit;
    v.fillTable($("route-tables-table"), v.routeTableColumns(limit), tables.items);
  },
  async quotas() {
    const set = admin()
      ? (q, limit) => act(() => call("PUT", `/v1/quotas/${q.name}`, { limit: Number(limit) }))
      : undefined;
    v.fillTable($("quotas-table"), v.quotaColumns(set), (await call("GET", "/v1/quotas")).items);
  },
  async faults() {
    const [faults, outages, limits, presets] = await Promise.all([
      call("GET", "/v1/faults"),
      call("GET", "/v1/outages"),
      call("GET", "/v1/rate-limits"),
      call("GET", "/v1/rate-limit-presets"),
    ]);
    // The installed preset's button shows as pressed.
    const installed = presets.items.find((p) => p.installed)?.name;
    for (const b of $("rate-limit-presets").querySelectorAll("button[data-preset]")) {
      if (b.dataset.preset) b.setAttribute("aria-pressed", String(b.dataset.preset === installed));
    }
    const remove = (f) => act(() => call("DELETE", `/v1/faults/${encodeURIComponent(f.id)}`));
    const stop = (o) => act(() => call("DELETE", `/v1/outages/${encodeURIComponent(o.id)}`));
    const clear = (r) => act(() => call("DELETE", `/v1/rate-limits/${encodeURIComponent(r.id)}`));
    v.fillTable($("faults-table"), v.faultColumns(remove), faults.items);
    v.fillTable($("outages-table"), v.outageColumns(stop), outages.items);
    v.fillTable($("rate-limits-table"), v.rateLimitColumns(clear), limits.items);
  },
  audit() {
    renderTail();
  },
};

async function refresh() {
  clearTimeout(refreshTimer);
  if (!role) return;
  try {
    await loaders[view]();
  } catch (e) {
    say(e.message);
  }
  // The audit view is live through its stream; polling it would only add the console's own calls to the log.
  if (view !== "audit") refreshTimer = setTimeout(refresh, REFRESH_MS);
}

function show(name) {
  view = name;
  for (const b of $("tabs").querySelectorAll("button")) b.classList.toggle("active", b.dataset.view === name);
  for (const s of document.querySelectorAll("main > section")) s.hidden = s.id !== `view-${name}`;
  say("");
  refresh();
}

// ------------------------------------------------------------------------------------------------- live tail

const tail = [];
/// Calls per second by outcome: second → {ok, c4xx, throttled, c5xx}.
const perSecond = new Map();
let tailDirty = false;

function onEntry(e) {
  tail.push(e);
  if (tail.length > TAIL_ROWS) tail.splice(0, tail.length - TAIL_ROWS);
  const second = Math.floor(Date.parse(e.time) / 1000);
  const counts = perSecond.get(second) ?? { ok: 0, c4xx: 0, throttled: 0, c5xx: 0 };
  counts[v.outcome(e)] += 1;
  perSecond.set(second, counts);
  tailDirty = true;
}

function matches(e, f) {
  if (f.operation && !e.operation.toLowerCase().includes(f.operation.toLowerCase())) return false;
  if (f.role && e.role !== f.role) return false;
  if (f.status) {
    const s = String(e.status);
    const want = f.status.toLowerCase();
    if (want.endsWith("xx") ? s[0] !== want[0] : s !== want) return false;
  }
  if (f.fault && !(f.fault === "*" ? e.fault : e.fault === f.fault)) return false;
  return true;
}

function renderTail() {
  tailDirty = false;
  const f = Object.fromEntries(new FormData($("audit-filters")));
  const rows = tail.filter((e) => matches(e, f)).slice(-200).reverse();
  v.fillTable($("audit-table"), v.auditColumns, rows, "no calls yet");
  drawChart();
}

function drawChart() {
  const canvas = $("chart");
  const ctx = canvas.getContext("2d");
  const now = Math.floor(Date.now() / 1000);
  for (const s of perSecond.keys()) if (s < now - CHART_SECONDS) perSecond.delete(s);
  const max = Math.max(1, ...[...perSecond.values()].map((c) => c.ok + c.c4xx + c.throttled + c.c5xx));
  const w = canvas.width / CHART_SECONDS;
  const colours = getComputedStyle(canvas);
  ctx.clearRect(0, 0, canvas.width, canvas.height);
  for (let i = 0; i < CHART_SECONDS; i++) {
    const c = perSecond.get(now - CHART_SECONDS + 1 + i);
    if (!c) continue;
    let y = canvas.height;
    for (const k of ["ok", "c4xx", "throttled", "c5xx"]) {
      const h = (c[k] / max) * (canvas.height - 14);
      ctx.fillStyle = colours.getPropertyValue(`--${k}`);
      ctx.fillRect(i * w, y - h, Math.max(1, w - 1), h);
      y -= h;
    }
  }
  ctx.fillStyle = colours.getPropertyValue("--text");
  ctx.fillText(`${max}/s`, 4, 12);
}

setInterval(() => {
  if (view === "audit" && role && (tailDirty || perSecond.size)) renderTail();
}, 500);

// ---------------------------------------------------------------------------------------------------- forms

/// The form's non-empty fields.
const fields = (form) => Object.fromEntries([...new FormData(form)].filter(([, val]) => val !== ""));

/// The fault form's action, from the fields its type shows.
function faultAction(f) {
  switch (f.type) {
    case "latency":
      return { type: "latency", ms: Number(f.ms ?? 0), jitter_ms: Number(f.jitter_ms ?? 0) };
    case "no-response":
      return { type: "no-response", mode: f.mode };
    case "eventual-consistency":
      return { type: "eventual-consistency", seconds: Number(f.seconds ?? 0) };
    default:
      return { type: f.type, status: Number(f.status), code: f.code ?? "" };
  }
}

/// Show only the fields of the action type chosen.
function onFaultType() {
  const type = $("fault-form").elements.type.value;
  for (const l of $("fault-form").querySelectorAll("label[data-for]")) l.hidden = !l.dataset.for.split(" ").includes(type);
}

function onFaultForm(e) {
  e.preventDefault();
  const f = fields(e.target);
  const rule = { match: f.operation ? { operations: [f.operation] } : {}, action: faultAction(f), trigger: {} };
  if (f.id) rule.id = f.id;
  if (f.probability) rule.trigger.probability = Number(f.probability);
  if (f.times) rule.trigger.times = Number(f.times);
  act(() => call("POST", "/v1/faults", rule));
}

function onRateLimitForm(e) {
  e.preventDefault();
  const f = fields(e.target);
  const body = {
    scope: f.scope,
    per_token: f.per_token === "on",
    capacity: Number(f.capacity),
    refill_per_second: Number(f.refill_per_second),
    status: Number(f.status),
  };
  if (f.operation) body.operation = f.operation;
  act(() => call("PUT", `/v1/rate-limits/${encodeURIComponent(f.id ?? "")}`, body));
}

/// A preset's button installs it (`PUT /v1/rate-limit-presets/{name}`); the one without a name clears them all.
function onPresetButton(e) {
  const name = e.target.dataset?.preset;
  if (name === undefined) return;
  act(() =>
    name ? call("PUT", `/v1/rate-limit-presets/${encodeURIComponent(name)}`) : call("DELETE", "/v1/rate-limit-presets"),
  );
}

function onOutageForm(e) {
  e.preventDefault();
  const f = fields(e.target);
  const body = { scope: f.scope };
  if (f.service) body.service = f.service;
  if (f.zone) body.zone = f.zone;
  if (f.duration_seconds) body.duration_seconds = Number(f.duration_seconds);
  act(() => call("POST", "/v1/outages", body));
}

/// The operation names, for the forms' suggestions: from the OpenAPI document, open to all.
async function loadOperations() {
  const doc = await (await fetch("/openapi.json")).json();
  const ids = Object.values(doc.paths).flatMap((p) => Object.values(p).map((op) => op.operationId));
  $("operations").replaceChildren(...[...new Set(ids)].sort().map((id) => el("option", { value: id })));
}

// ---------------------------------------------------------------------------------------------------- sign-in

async function signIn(t) {
  token.set(t);
  try {
    role = await whoAmI();
  } catch (e) {
    token.clear();
    role = null;
    $("sign-in-error").textContent = e.status === 401 ? "That is not a token of this emulator." : e.message;
    return;
  }
  $("sign-in").hidden = true;
  $("sign-in-error").textContent = "";
  $("tabs").hidden = false;
  $("sign-out").hidden = false;
  $("who").textContent = `signed in as ${role}`;
  for (const b of $("tabs").querySelectorAll("[data-admin]")) b.hidden = !admin();
  if (admin()) {
    stopTail = startTail(onEntry, (s) => ($("tail-state").textContent = s));
    loadOperations().catch((e) => say(e.message));
  }
  show("instances");
}

function signOut() {
  token.clear();
  role = null;
  stopTail?.();
  stopTail = null;
  tail.length = 0;
  perSecond.clear();
  clearTimeout(refreshTimer);
  $("tabs").hidden = true;
  $("sign-out").hidden = true;
  $("who").textContent = "";
  for (const s of document.querySelectorAll("main > section")) s.hidden = true;
  $("sign-in").hidden = false;
  say("");
}

$("sign-in").addEventListener("submit", (e) => {
  e.preventDefault();
  const t = $("token").value.trim();
  $("token").value = "";
  signIn(t);
});
$("sign-out").addEventListener("click", signOut);
$("tabs").addEventListener("click", (e) => e.target.dataset?.view && show(e.target.dataset.view));
$("fault-form").addEventListener("submit", onFaultForm);
$("fault-form").elements.type.addEventListener("change", onFaultType);
$("rate-limit-form").addEventListener("submit", onRateLimitForm);
$("rate-limit-presets").addEventListener("click", onPresetButton);
$("outage-form").addEventListener("submit", onOutageForm);
$("audit-filters").addEventListener("input", renderTail);
$("audit-filters").addEventListener("submit", (e) => e.preventDefault());

if (token.get()) signIn(token.get());
