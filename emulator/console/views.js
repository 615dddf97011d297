// Tables of the cloud's resources, built with textContent only: whatever a name or tag holds is shown, never run.

/// An element with attributes and children (strings become text nodes).
export function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null && v !== false) e.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c !== undefined && c !== null) e.append(c instanceof Node ? c : String(c));
  }
  return e;
}

/// Fill `table` with a header row and one row per item; `columns` are [heading, item => cell content].
export function fillTable(table, columns, items, empty = "none") {
  const head = el("thead", {}, el("tr", {}, columns.map(([h]) => el("th", {}, h))));
  const rows = items.length
    ? items.map((item) => el("tr", {}, columns.map(([, f]) => el("td", {}, f(item)))))
    : [el("tr", {}, el("td", { colspan: columns.length, class: "empty" }, empty))];
  table.replaceChildren(head, el("tbody", {}, rows));
}

/// A state as a coloured badge.
export const badge = (text) => el("span", { class: `badge ${text}` }, text);

/// Seconds from now until an RFC 3339 time, as "12s" (or "now").
export function until(time) {
  const s = Math.round((Date.parse(time) - Date.now()) / 1000);
  return s > 0 ? `${s}s` : "now";
}

/// A bar of `used` out of `limit`, warning as it fills up; `draining`: a supply instead (rate-limit tokens),
/// warning as it empties.
export function bar(used, limit, draining = false) {
  const pct = limit > 0 ? Math.min(100, (100 * used) / limit) : 100;
  const level = draining ? (pct <= 0 ? "full" : pct <= 20 ? "high" : "") : pct >= 100 ? "full" : pct >= 80 ? "high" : "";
  const fill = el("span", { class: `fill ${level}` });
  // Through the CSSOM: the Content-Security-Policy refuses style attributes.
  fill.style.width = `${pct.toFixed(1)}%`;
  return el("span", { class: "bar", title: `${used} of ${limit}` }, fill, el("span", { class: "label" }, `${used} / ${limit}`));
}

/// `actions` (admin only): reclaim, hang and resume an instance; `hung`: the IDs of hung machines.
export const instanceColumns = (actions, hung) => [
  ["ID", (i) => i.id],
  ["Name", (i) => i.name],
  ["State", (i) => [badge(i.state), hung.has(i.id) ? badge("hung") : ""]],
  ["Zone", (i) => i.zone],
  ["Type", (i) => i.instance_type],
  ["Private IP", (i) => i.private_ip],
  ["Market", (i) => i.market],
  ["Spot notice", (i) => (i.interruption_at ? `reclaimed in ${until(i.interruption_at)}` : "")],
  [
    "",
    (i) =>
      actions && i.state === "running"
        ? [
            i.market === "spot" && !i.interruption_at ? el("button", { onclick: () => actions.reclaim(i) }, "Reclaim") : "",
            hung.has(i.id)
              ? el("button", { onclick: () => actions.resume(i), title: "its kubelet reports again" }, "Resume")
              : el("button", { onclick: () => actions.hang(i), title: "the instance runs, its kubelet falls silent" }, "Hang"),
          ]
        : "",
  ],
];

export const loadBalancerColumns = [
  ["ID", (lb) => lb.id],
  ["Name", (lb) => lb.name],
  ["State", (lb) => badge(lb.state)],
  ["Scheme", (lb) => lb.scheme],
  ["VIP", (lb) => lb.address ?? "<pending>"],
  [
    "Listeners",
    (lb) =>
      lb.listeners.map((l) => {
        const st = lb.listener_status?.find((s) => s.port === l.port && s.protocol === l.protocol);
        return el("div", { title: st?.reason ?? "" }, `${l.protocol} ${l.port}→${l.backend_port} `, st ? badge(st.state) : "");
      }),
  ],
  [
    "Backends",
    (lb) =>
      lb.backends.map((b) => {
        const h = lb.backend_health?.find((x) => x.instance === b);
        return el("div", { title: h?.last_error ?? "" }, `${b} `, h ? badge(h.state) : "");
      }),
  ],
  // What the data plane makes of it (only when the emulator serves load balancers): why traffic does not get
  // through, in the tooltip; "record only" when nothing listens on the VIP.
  [
    "Traffic",
    (lb) =>
      lb.data_plane
        ? el("span", { title: (lb.data_plane.reasons ?? []).join("\n") }, badge(lb.data_plane.state))
        : lb.ip_mode === "proxy"
          ? ""
          : "record only",
  ],
];

export const routeTableColumns = (routeQuota) => [
  ["ID", (t) => t.id],
  ["Name", (t) => t.name],
  ["Main", (t) => (t.main ? "yes" : "")],
  ["Routes", (t) => (routeQuota === undefined ? t.route_count : bar(t.route_count, routeQuota))],
];

export const quotaColumns = (setQuota) => [
  ["Quota", (q) => q.name],
  ["Usage", (q) => (q.usage === undefined ? "per resource" : bar(q.usage, q.limit))],
  ["Limit", (q) => q.limit],
  [
    "",
    (q) =>
      setQuota
        ? el(
            "form",
            { class: "inline", "data-quota": q.name, onsubmit: (e) => (e.preventDefault(), setQuota(q, e.target.limit.value)) },
            el("input", { name: "limit", type: "number", min: 0, value: q.limit, "aria-label": `limit of ${q.name}` }),
            el("button", { type: "submit" }, "Set"),
          )
        : "",
  ],
];

/// A fault rule's action, briefly.
function action(a) {
  switch (a.type) {
    case "error":
    case "apply-then-fail":
      return `${a.type} ${a.status} ${a.code}`;
    case "latency":
      return `latency ${a.ms}ms${a.jitter_ms ? ` +0–${a.jitter_ms}ms` : ""}`;
    case "no-response":
      return `no response (${a.mode ?? "close"})`;
    case "eventual-consistency":
      return `eventually consistent ${a.seconds}s`;
    default:
      return a.type;
  }
}

/// What a rule matches, briefly: its non-empty lists.
const matcher = (m) =>
  Object.entries(m)
    .filter(([, v]) => v.length)
    .map(([k, v]) => `${k}: ${v.join(", ")}`)
    .join("; ") || "every call";

export const faultColumns = (remove) => [
  ["ID", (f) => f.id],
  ["Matches", (f) => matcher(f.match)],
  ["Action", (f) => action(f.action)],
  [
    "Trigger",
    (f) =>
      [
        f.trigger.probability !== undefined ? `p=${f.trigger.probability}` : "",
        f.trigger.skip ? `skip ${f.trigger.skip}` : "",
        f.trigger.times !== undefined ? `${f.trigger.times} times` : "",
        f.active_until ? `ends in ${until(f.active_until)}` : "",
      ]
        .filter(Boolean)
        .join(", ") || "always",
  ],
  ["Matched", (f) => f.matched],
  ["Fired", (f) => f.injected],
  ["", (f) => el("button", { onclick: () => remove(f) }, "Delete")],
];

export const outageColumns = (stop) => [
  ["ID", (o) => o.id],
  ["Scope", (o) => o.scope],
  ["Of", (o) => o.service ?? o.zone ?? "the whole API"],
  ["Time left", (o) => (o.until ? until(o.until) : "until stopped")],
  ["", (o) => el("button", { onclick: () => stop(o) }, "Stop")],
];

export const rateLimitColumns = (clear) => [
  ["ID", (r) => r.id],
  ["Scope", (r) => r.limit.operation ?? r.limit.scope],
  ["Bucket", (r) => `${r.limit.capacity} calls${r.limit.window_seconds ? ` per ${r.limit.window_seconds} s window` : `, +${r.limit.refill_per_second}/s`}${r.limit.per_token ? " per token" : ""}`],
  // Whole tokens: a call needs one.
  [
    "Tokens now",
    (r) =>
      r.buckets.length
        ? r.buckets.map((b) => el("div", { "data-bucket": b.key }, `${b.key} `, bar(Math.floor(b.tokens), r.limit.capacity, true)))
        : "full (no caller yet)",
  ],
  ["Status", (r) => r.limit.status],
  ["Refused", (r) => r.refused],
  ["", (r) => el("button", { onclick: () => clear(r) }, "Delete")],
];

/// An audit entry's outcome, for the chart and its colour.
export function outcome(e) {
  if (e.status === 429) return "throttled";
  if (e.status >= 500 || e.status === 0) return "c5xx";
  if (e.status >= 400) return "c4xx";
  return "ok";
}

export const auditColumns = [
  ["Seq", (e) => e.seq],
  ["Time", (e) => e.time.replace("T", " ").replace("Z", "")],
  ["Role", (e) => e.role],
  ["Operation", (e) => e.operation],
  ["Path", (e) => `${e.method} ${e.path}`],
  ["Status", (e) => el("span", { class: outcome(e) }, e.status)],
  ["Error", (e) => e.error_code ?? ""],
  ["Fault", (e) => e.fault ?? ""],
  ["ms", (e) => e.latency_ms.toFixed(1)],
];
