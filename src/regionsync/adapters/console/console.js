// regionsync console: a static page over the node's JSON API (no build step, no CDN).
// The token is kept in sessionStorage (this tab only, gone when the tab closes) and sent
// as "Authorization: Bearer"; it is never put in a cookie, so the API needs no CSRF
// defence. Every value from the API is inserted as text (textContent), never as HTML.
"use strict";

const TOKEN_KEY = "regionsync.token";
const main = () => document.getElementById("main");
let who = null; // {scope, name, tenant, right} of the token, from GET /v1/whoami

// ---------------------------------------------------------------- DOM and API helpers

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

function show(...children) {
  // the page's content: null/false children are left out, arrays are spread
  const kids = children.flat(2).filter((c) => c !== null && c !== undefined && c !== false);
  main().replaceChildren(...kids.map((c) => (c instanceof Node ? c : document.createTextNode(String(c)))));
}

const text = (v) => (v === null || v === undefined || v === "" ? "-" : String(v));
const enc = encodeURIComponent;

function table(cols, rows, attrs) {
  // cols: [header, row -> cell content, optional td attrs]
  return h("table", attrs,
    h("thead", {}, h("tr", {}, cols.map(([name]) => h("th", {}, name)))),
    h("tbody", {}, rows.length === 0
      ? h("tr", {}, h("td", { colspan: cols.length, class: "muted" }, "none"))
      : rows.map((r) => h("tr", r.__attrs || {},
          cols.map(([, cell, tdAttrs]) => h("td", tdAttrs || {}, cell(r)))))));
}

function flash(message, isError) {
  const el = document.getElementById("flash");
  el.textContent = message || "";
  el.className = isError ? "error" : "";
}

class ApiError extends Error {
  constructor(status, problem) {
    const p = problem || {};
    super(`${status} ${p.error || "error"}: ${p.detail || ""}${p.field ? ` (field: ${p.field})` : ""}`);
    this.status = status;
    this.problem = p;
  }
}

async function api(method, path, body, params) {
  const headers = {};
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.authorization = `Bearer ${token}`;
  if (body !== undefined) headers["content-type"] = "application/json";
  const qs = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) if (v) qs.set(k, v);
  const url = qs.toString() ? `${path}?${qs}` : path;
  const resp = await fetch(url, {
    method, headers, body: body === undefined ? undefined : jsonBody(body),
  });
  if (resp.status === 204) return null;
  let data = null;
  try { data = await resp.json(); } catch (_) { data = null; }
  if (resp.status === 401) {
    sessionStorage.removeItem(TOKEN_KEY);
    who = null;
  }
  if (!resp.ok) throw new ApiError(resp.status, data);
  return data;
}

async function apiText(path) {
  // the body as text (the event's payload text is shown as the API sends it)
  const token = sessionStorage.getItem(TOKEN_KEY);
  const resp = await fetch(path, { headers: token ? { authorization: `Bearer ${token}` } : {} });
  const body = await resp.text();
  if (!resp.ok) {
    let problem = null;
    try { problem = JSON.parse(body); } catch (_) { problem = null; }
    throw new ApiError(resp.status, problem);
  }
  return body;
}

async function allPages(path, params, max) {
  const items = [];
  let cursor = null;
  do {
    const page = await api("GET", path, undefined, { ...params, cursor, limit: "200" });
    items.push(...page.items);
    cursor = page.next;
  } while (cursor && items.length < (max || 1000));
  return items;
}

const isAdmin = () => who && who.scope === "admin";
const canManage = () => who && (who.scope === "admin" || who.right === "manage" ||
  who.right === "portal");

function stateCell(state) {
  return h("span", { class: `state-${state}`, "data-state": state }, state);
}

function statusCell(status) {
  return h("span", { class: `st-${status}` }, status);
}

function ago(seconds) {
  return seconds === null || seconds === undefined ? "never" : `${seconds.toFixed(1)} s ago`;
}

function sinceInput(name) {
  // a datetime-local input, default 24 h ago; its value is read as local time
  const d = new Date(Date.now() - 24 * 3600 * 1000);
  const pad = (n) => String(n).padStart(2, "0");
  const local = `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T` +
    `${pad(d.getHours())}:${pad(d.getMinutes())}`;
  return h("input", { type: "datetime-local", name, value: local, "aria-label": name });
}

function rfc3339(localValue) {
  return new Date(localValue).toISOString();
}

// ---------------------------------------------------------------- pages

function renderNav() {
  const nav = document.getElementById("nav");
  nav.replaceChildren();
  const logout = document.getElementById("logout");
  logout.hidden = !who;
  document.getElementById("who").textContent = who ? `${who.scope} (${who.name})` : "";
  if (!who) return;
  if (isAdmin()) {
    nav.append(h("a", { href: "#/cluster" }, "Cluster"), h("a", { href: "#/tenants" }, "Tenants"),
      h("a", { href: "#/sources" }, "Sources"), h("a", { href: "#/tokens" }, "Tokens"));
  } else if (who.tenant) {
    const t = enc(who.tenant);
    nav.append(h("a", { href: `#/t/${t}/endpoints` }, "Endpoints"),
      h("a", { href: `#/t/${t}/events` }, "Events"),
      h("a", { href: `#/t/${t}/event-types` }, "Event types"));
  }
}

function loginPage(message) {
  const input = h("input", { type: "password", id: "token", name: "token",
    autocomplete: "off", placeholder: "rs_... or a token of node.toml" });
  const form = h("form", { class: "login", id: "login" },
    h("h1", {}, "Log in"),
    h("label", { for: "token" }, "API token (admin, or a tenant token for its portal)"),
    input,
    h("button", { class: "primary", type: "submit" }, "Log in"),
    h("p", { class: "muted" },
      "The token is kept in this tab's sessionStorage only and sent as a bearer token. " +
      "On a node without configured tokens listening on loopback, leave it empty."));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, input.value.trim());
    try {
      who = await api("GET", "/v1/whoami");
    } catch (err) {
      sessionStorage.removeItem(TOKEN_KEY);
      flash(`Login refused: ${err.message}`, true);
      return;
    }
    flash("");
    // a deep link (or a page asked for while logging in) is drawn; otherwise the home page
    if (!["", "#", "#/"].includes(location.hash)) return route();
    location.hash = isAdmin() ? "#/cluster" : `#/t/${enc(who.tenant)}/endpoints`;
  });
  if (message) flash(message, true);
  show(form);
  input.focus();
}

async function clusterPage() {
  const [c, all] = await Promise.all([api("GET", "/v1/cluster"), api("GET", "/v1/cluster/regions")]);
  const custody = c.custody || {};
  const suspected = new Set(custody.suspected || []);
  const records = custody.records || {};
  const own = new Map(all.items.map((r) => [r.region, r]));
  const custodyOf = (region) => {
    const rec = records[region];
    const s = !rec || rec.state === "own" ? "own" : `adopted by ${rec.live.join(", ")}`;
    return suspected.has(region) ? `${s} (suspected)` : s;
  };
  // what is known now (issue 43): a region's own hash asked now, else this node's last
  // state-digest verdict on it, a past one, with its age; a region this node's link to is
  // down, or that custody suspects, is shown down
  const peerOf = new Map(c.peers.map((p) => [p.region, p]));
  const isDown = (region) => suspected.has(region) ||
    (peerOf.has(region) && !peerOf.get(region).connected);
  const down = c.peers.map((p) => p.region).filter(isDown);
  const digestAge = (r) => (r.digest_age_s === null || r.digest_age_s === undefined
    ? "" : `, ${r.digest_age_s.toFixed(0)} s ago`);
  const agreement = (r) => {
    if (r.reached) return r.agrees ? "agrees" : "DIFFERS";
    return { true: `agreed (last digest${digestAge(r)})`,
      false: `DIFFERED (last digest${digestAge(r)})`, null: "not compared yet" }[r.agrees];
  };
  const agreementLine = () => {
    const rows = all.items.filter((r) => r.region !== c.region);
    if (down.length) {
      const ages = rows.filter((r) => down.includes(r.region)).map((r) =>
        `${r.region}: ${agreement(r)}`).join("; ");
      return ["bad", `${down.join(", ")} DOWN (not connected to this region` +
        `${down.some((r) => suspected.has(r)) ? ", suspected" : ""}): its registry's ` +
        `agreement now is unknown (${ages})`];
    }
    if (rows.every((r) => r.reached && r.agrees === true)) {
      return ["ok", "every region's registry agrees with this region's"];
    }
    if (rows.every((r) => r.agrees === true)) {
      return ["warn", "every region agreed at its last state digest; " +
        `not asked now: ${rows.filter((r) => !r.reached).map((r) => r.region).join(", ")}`];
    }
    return ["warn", "not every region agrees yet (see below)"];
  };
  const caps = c.capabilities || { release: "?", features: [], effective: [], held_back_by: [] };
  // a peer's release from its last Hello: null if not heard since start, "" before 0.2.0
  const versionOf = (v) => (v === null || v === undefined ? "-" : v || "<0.2.0");
  // records refused per origin (issue 41): count, last seq and reason
  const refusedText = (m) => Object.entries(m || {}).map(([o, n]) =>
    `${o}: ${n.count} (last #${n.last_seq}: ${n.last_reason})`).join("; ") || "none";
  const rows = [{ region: c.region, self: true, connected: "this node", behind: 0, contact: "-",
    error: null, http_url: null, refused: null,
    version: caps.release, features: caps.features }];
  for (const p of c.peers) {
    rows.push({ region: p.region, connected: p.connected ? "yes" : "NO", behind: p.records_behind,
      contact: ago(p.seconds_since_contact), error: p.last_error, http_url: p.http_url,
      refused: p.refused, repair: p.repair, version: versionOf(p.version), features: p.features });
  }
  const held = caps.held_back_by || [];
  const [agreeClass, agreeText] = agreementLine();
  show(
    h("h1", {}, `Cluster as ${c.region} sees it`),
    h("dl", { class: "kv" },
      h("dt", {}, "actor"), h("dd", {}, c.actor),
      h("dt", {}, "registry hash"), h("dd", {}, h("code", {}, c.registry_hash),
        c.registry_hash_age_s ? ` (${c.registry_hash_age_s.toFixed(1)} s old)` : ""),
      h("dt", {}, "registry digest"), h("dd", {}, h("code", {}, c.registry_digest || "-")),
      h("dt", {}, "registry agreement"),
      h("dd", { id: "agreement", class: agreeClass }, agreeText),
      h("dt", {}, "events held"), h("dd", {}, text(c.counts && c.counts.events)),
      h("dt", {}, "features in use"),
      h("dd", { id: "features", class: held.length ? "warn" : "ok" },
        (caps.effective.join(", ") || "baseline") +
          (held.length ? ` (held back by ${held.join(", ")})` : "")),
      h("dt", {}, "replication role"),
      h("dd", { id: "role" }, processText(c.process)),
      h("dt", {}, "records this node refused"),
      h("dd", { id: "refused", class: Object.keys(c.refused || {}).length ? "warn" : "" },
        refusedText(c.refused))),
    table([
      ["region", (r) => (r.http_url ? h("a", { href: `${r.http_url}/console` }, r.region) : r.region)],
      ["connected", (r) => h("span", { class: r.connected === "NO" ? "bad" : "" }, r.connected)],
      ["records behind", (r) => r.behind, { class: "num" }],
      ["last contact", (r) => r.contact],
      ["own registry hash", (r) => {
        const o = own.get(r.region);
        return o && o.reached ? h("code", {}, o.registry_hash.slice(0, 16))
          : h("span", { class: "muted" }, o ? o.error : "-");
      }],
      ["agrees", (r) => {
        const o = own.get(r.region);
        if (r.self) return "-";
        const v = o ? agreement(o) : "-";
        const cls = isDown(r.region) ? "bad" : v === "agrees" ? "ok" : "warn";
        return h("span", { class: cls, "data-agrees": v }, v);
      }],
      ["its links up", (r) => {
        const o = own.get(r.region);
        return o && o.reached ? `${o.peers_connected}/${o.peers_total}` : "-";
      }],
      ["custody", (r) => custodyOf(r.region)],
      ["refused by it", (r) => {
        if (r.self) return "-";
        const n = Object.keys(r.refused || {}).length;
        const rep = r.repair && r.repair.futile ? ` · repair backing off (${r.repair.futile} futile)` : "";
        return h("span", { class: n ? "warn" : "", "data-refused": n }, refusedText(r.refused) + rep);
      }],
      ["version", (r) => h("span",
        { "data-version": r.version, class: held.includes(r.region) ? "warn" : "" }, r.version)],
      ["features", (r) => (r.features ? r.features.join(", ") || "baseline" : "-")],
      ["last error", (r) => text(r.error)],
    ], rows.map((r) => ({ ...r, __attrs: isDown(r.region)
      ? { "data-region": r.region, "data-down": "true", class: "bad" }
      : { "data-region": r.region } })), { id: "regions" }),
    h("p", { class: "muted" },
      "connected, records behind and last contact are this node's links. A peer's own " +
      "registry hash is asked at the http_url of its [[peers]] entry; when it cannot be " +
      "asked, agreement is this node's last state-digest verdict, with its age. A region " +
      "shown down is one this node's link to is down or that custody suspects."));
}

function requestHeaders(eventId, eventType, endpoint) {
  // What every attempt of a delivery sends (core/envelope.py), from the endpoint's
  // settings: for a delivery without attempts, and attempts recorded before each attempt
  // kept its own request headers (attempt.request_headers, with timestamp and signature).
  const lines = Object.entries((endpoint && endpoint.headers) || {}).map(([k, v]) => `${k}: ${v}`);
  lines.push("content-type: application/json");
  if (eventType) lines.push(`webhook-event-type: ${eventType}`);
  lines.push(`webhook-id: ${eventId || "(the event id)"}`);
  lines.push("webhook-timestamp: (per attempt, not recorded)");
  lines.push("webhook-signature: (per attempt, not recorded)");
  return lines.join("\n");
}

function attemptDetails(a, eventId, eventType, endpoint) {
  return h("div", { class: "attempt-details", "data-attempt": `${a.delivery}:${a.generation}:${a.n}` },
    h("dl", { class: "kv" },
      h("dt", {}, "attempt"), h("dd", {}, `${a.n} (generation ${a.generation})`),
      h("dt", {}, "at"), h("dd", {}, a.at),
      h("dt", {}, "region"), h("dd", { class: "attempt-region" }, a.region),
      h("dt", {}, "status"), h("dd", { class: "attempt-status" }, text(a.status_code)),
      h("dt", {}, "latency"), h("dd", {}, `${a.latency_ms.toFixed(1)} ms`),
      h("dt", {}, "error"), h("dd", {}, text(a.error))),
    h("h3", {}, "Request headers"),
    h("pre", { class: "request-headers" },
      a.request_headers || requestHeaders(eventId, eventType, endpoint)),
    h("h3", {}, "Response headers"), h("pre", {}, a.response_headers || "(none)"),
    h("h3", {}, "Response excerpt"),
    h("pre", { class: "response-excerpt" }, a.response_excerpt || "(empty)"));
}

function attemptKey(a) { return `${a.n}/${a.generation || 0}`; }

function attemptSummary(a, open) {
  // one attempt as a collapsible block: the summary line, then the response
  const ok = a.status_code >= 200 && a.status_code < 300;
  return h("details", { class: "attempt-details", open, "data-attempt": attemptKey(a) },
    h("summary", {}, `#${a.n}${a.generation ? ` (generation ${a.generation})` : ""} · `,
      h("span", { class: `attempt-status ${ok ? "ok" : "bad"}` }, text(a.status_code)),
      ` · ${a.latency_ms.toFixed(1)} ms · ${a.region} · ${a.at}`, a.error ? ` · ${a.error}` : ""),
    h("h3", {}, "Request headers"),
    h("pre", { class: "request-headers" }, a.request_headers || "(not recorded)"),
    h("h3", {}, "Response headers"), h("pre", {}, a.response_headers || "(none)"),
    h("h3", {}, "Response excerpt"),
    h("pre", { class: "response-excerpt" }, a.response_excerpt || "(empty)"));
}

function retryButton(tenant, delivery, after) {
  if (!canManage()) return null;
  return h("button", {
    type: "button", class: "retry", "data-delivery": delivery.id,
    onclick: async () => {
      try {
        const d = await api("POST", `/v1/tenants/${enc(tenant)}/deliveries/${enc(delivery.id)}/retry`);
        flash(`Retry of ${d.id} started (generation ${d.generation}, region ${d.region})`);
        await after();
      } catch (err) { flash(err.message, true); }
    },
  }, "Retry");
}

async function followJob(tenant, job, after) {
  const show = () => {
    const panel = document.getElementById("job");
    if (panel) {
      panel.replaceChildren(h("span", { "data-job": job.id, "data-status": job.status },
        `job ${job.id} (${job.kind}): ${job.status}, ${job.done} done`,
        job.error ? ` (${job.error})` : ""));
    }
  };
  for (;;) {
    show();
    if (job.status !== "running") break;
    await new Promise((r) => setTimeout(r, 400));
    job = await api("GET", `/v1/tenants/${enc(tenant)}/jobs/${enc(job.id)}`);
  }
  await after();
  show(); // the page was drawn again: show the job's end on it
}

async function eventsPage(tenant, query) {
  const params = Object.fromEntries(new URLSearchParams(query || ""));
  const form = h("form", { id: "event-filters", class: "actions" },
    ...["event_type", "since", "until", "endpoint", "status"].map((name) =>
      h("label", {}, `${name} `, name === "status"
        ? h("select", { name }, ["", "pending", "delivered", "dead", "skipped"].map((s) =>
            h("option", { value: s, selected: params.status === s }, s || "any")))
        : h("input", { name, value: params[name] || "",
            placeholder: name === "event_type" ? "order.paid or issues.*"
              : name.endsWith("since") || name === "until" ? "RFC 3339" : "" }))),
    h("button", { type: "submit" }, "Filter"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const qs = new URLSearchParams();
    for (const [k, v] of new FormData(form)) if (v) qs.set(k, v);
    location.hash = `#/t/${enc(tenant)}/events?${qs}`;
  });
  const list = pagedTable("events", `/v1/tenants/${enc(tenant)}/events`, params, [
    ["id", (e) => h("a", { href: `#/t/${enc(tenant)}/events/${enc(e.id)}` }, e.id)],
    ["type", (e) => e.event_type],
    ["received", (e) => e.received_at],
    ["region", (e) => e.region],
    ["deliveries", (e) => {
      const s = e.deliveries;
      return [`${s.delivered}/${s.total} delivered`, s.dead ? `, ${s.dead} dead` : "",
        s.pending ? `, ${s.pending} pending` : "", s.skipped ? `, ${s.skipped} skipped` : ""];
    }],
  ], { attrs: (e) => ({ "data-event": e.id }), limit: 50 });
  show(h("h1", {}, `Events of ${tenant}`), searchForm(tenant), publishForm(tenant, list.reload),
    form, list.el);
  await list.loadMore();
  onRefresh(list.reload);
}

async function eventDeliveries(tenant, ev, before) {
  // a section per delivery with its attempts; `before` (a live refresh): the attempts
  // drawn last time and which were open, kept open (else the newest of each is open)
  const sections = [];
  for (const d of ev.deliveries) {
    const [attempts, ep] = await Promise.all([
      allPages(`/v1/tenants/${enc(tenant)}/deliveries/${enc(d.id)}/attempts`, {}, 1000),
      api("GET", `/v1/tenants/${enc(tenant)}/endpoints/${enc(d.endpoint)}`).catch(() => null),
    ]);
    const newest = attempts.reduce((m, a) => (m && m.at >= a.at ? m : a), null);
    const open = (a) => {
      const key = `${d.id} ${attemptKey(a)}`;
      return before && before.drawn.has(key) ? before.open.has(key) : a === newest;
    };
    sections.push(h("section", { class: "delivery", "data-delivery": d.id, "data-status": d.status },
      h("h2", {}, "Delivery ", h("code", {}, d.id), " to ",
        h("a", { href: `#/t/${enc(tenant)}/endpoints/${enc(d.endpoint)}` }, d.endpoint)),
      h("div", { class: "actions" }, "status ", statusCell(d.status),
        ` · ${d.attempts} attempt(s) · owned by ${d.region} · delivered by ${d.custodian}`,
        ` · next ${text(d.next_attempt_at)} `,
        retryButton(tenant, d, () => eventPage(tenant, ev.id))),
      attempts.map((a) => attemptSummary(a, open(a))),
      attempts.length ? null : [
        h("h3", {}, "Request headers (every attempt)"),
        h("pre", {}, requestHeaders(ev.id, ev.event_type, ep)),
        h("p", { class: "muted" }, "no attempts yet")]));
  }
  return sections.length ? sections : [h("p", { class: "muted" }, "no deliveries (no endpoint matched)")];
}

function drawnAttempts(box) {
  const drawn = new Set(), open = new Set();
  for (const el of box.querySelectorAll("section[data-delivery] details[data-attempt]")) {
    const key = `${el.closest("section").dataset.delivery} ${el.dataset.attempt}`;
    drawn.add(key);
    if (el.open) open.add(key);
  }
  return { drawn, open };
}

async function eventPage(tenant, eventId) {
  const path = `/v1/tenants/${enc(tenant)}/events/${enc(eventId)}`;
  const raw = await apiText(path);
  const ev = JSON.parse(raw); // for the other members; the payload is shown from `raw`
  const payload = payloadText(raw);
  const box = h("div", { id: "event-deliveries" }, await eventDeliveries(tenant, ev, null));
  show(
    h("h1", {}, `Event ${ev.id}`),
    h("p", {}, h("a", { href: `#/t/${enc(tenant)}/events` }, "← event log")), searchForm(tenant),
    h("dl", { class: "kv", id: "event" },
      h("dt", {}, "type"), h("dd", {}, ev.event_type),
      h("dt", {}, "received"), h("dd", {}, ev.received_at),
      h("dt", {}, "accepted by"), h("dd", {}, ev.region)),
    h("h2", {}, "Payload"),
    payload === null
      ? h("p", { class: "bad", id: "payload-error" }, `payload not shown: ${text(ev.payload_error)}`)
      : h("pre", { id: "payload" }, payload),
    box);
  // live refresh: the deliveries and attempts only (the search form keeps what is typed)
  onRefresh(async () => {
    const fresh = JSON.parse(await apiText(path));
    box.replaceChildren(...await eventDeliveries(tenant, fresh, drawnAttempts(box)));
  });
}

// ---------------------------------------------------------------- router

// one page drawing at a time: a page still loading when the next is asked for finishes
// first, so it never draws over the newer one (live refreshes queue the same way)
let drawing = Promise.resolve();
function serial(fn) {
  const run = drawing.then(fn, fn);
  drawing = run.catch(() => {});
  return run;
}

function route() { return serial(routeNow); }

async function routeNow() {
  const hash = location.hash.replace(/^#/, "") || "/";
  const [path, query] = hash.split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  if (sessionStorage.getItem(TOKEN_KEY) === null) {
    who = null;
    renderNav();
    return loginPage();
  }
  try {
    if (!who) who = await api("GET", "/v1/whoami");
    renderNav();
    if (parts.length === 0) {
      location.hash = isAdmin() ? "#/cluster" : `#/t/${enc(who.tenant)}/endpoints`;
      return;
    }
    live.loaders = [];
    if (parts[0] === "cluster") { onRefresh(clusterPage); return await clusterPage(); }
    if (parts[0] === "tenants") return await tenantsPage();
    if (parts[0] === "sources") return await sourcesPage();
    if (parts[0] === "tokens") return await tokensPage();
    if (parts[0] === "t" && parts.length >= 3) {
      const tenant = parts[1];
      if (parts[2] === "settings" && parts.length === 3) return await tenantSettingsPage(tenant);
      if (parts[2] === "search" && parts.length === 3) return await searchPage(tenant, query);
      if (parts[2] === "event-types" && parts.length === 3) return await eventTypesPage(tenant);
      if (parts[2] === "event-types" && parts.length === 4) return await eventTypePage(tenant, parts[3]);
      if (parts[2] === "endpoints" && parts.length === 3) return await endpointsPage(tenant);
      if (parts[2] === "endpoints" && parts.length === 4) return await endpointPage(tenant, parts[3]);
      if (parts[2] === "events" && parts.length === 3) return await eventsPage(tenant, query);
      if (parts[2] === "events" && parts.length === 4) return await eventPage(tenant, parts[3]);
    }
    show(h("h1", {}, "Not found"), h("p", {}, "No such console page."));
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) {
      renderNav();
      return loginPage(location.pathname === "/portal"
        ? "This portal link has expired or is no longer valid: open a new one from the application."
        : "Your token was refused (401); log in again.");
    }
    flash(err.message, true);
    show(h("h1", {}, "Error"), h("p", { class: "bad", id: "error" }, err.message));
  }
}

function portalKey() {
  // a portal link (/portal#key=rsp_...): keep the session in this tab, drop it from the URL
  const m = /^#key=(rsp_[A-Za-z0-9_.-]+)$/.exec(location.hash);
  if (!m) return;
  sessionStorage.setItem(TOKEN_KEY, m[1]);
  who = null;
  history.replaceState(null, "", `${location.pathname}${location.search}#/`);
}

document.addEventListener("DOMContentLoaded", () => {
  portalKey();
  setupLive();
  document.getElementById("logout").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    who = null;
    flash("");
    location.hash = "#/";
    route();
  });
  window.addEventListener("hashchange", () => { flash(""); route(); });
  route();
});

// this process among its region's (GET /v1/cluster "process"): who runs replication
function processText(p) {
  if (!p) return "-";
  if (!p.processes) return "this process (the region's only one)";
  const holder = p.processes.find((q) => q.replication_role);
  const mine = p.replication_role ? "this process holds it"
    : `held by ${holder ? holder.holder : "none yet"}`;
  const names = p.processes.map((q) => q.holder).join(", ");
  return `${mine}; ${p.processes.length} process(es): ${names}`;
}
