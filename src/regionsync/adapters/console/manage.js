// regionsync console, managing pages (issue 43): create, edit and delete tenants, event
// types, sources and tokens, and create portal links; publish an event; search by event
// or delivery id.
// Every write goes through the HTTP API (widgets.js apiForm: its problem bodies are shown
// next to the field they name); destructive actions ask first (confirmAction).
"use strict";

const ACK = ["local", "one-remote"];

function tenantFields(t) {
  const v = t || {};
  return [
    ...(t ? [] : [{ name: "id", label: "id", help: "letters, digits, _ . - (empty: generated)" }]),
    { name: "name", label: "name", value: v.name },
    ...(isAdmin() ? [{ name: "ack_policy", label: "ack policy", type: "select", options: ACK,
      value: v.ack_policy || "local" }] : []),
    ...(isAdmin() ? [{ name: "publish_rate_per_s", label: "publish rate per s", type: "number",
      value: v.publish_rate_per_s, empty: t ? null : undefined, help: "empty: node default" }] : []),
    { name: "delivery_max_in_flight", label: "delivery max in flight", type: "number",
      value: v.delivery_max_in_flight, empty: t ? null : undefined, help: "empty: node default" },
    { name: "strict_event_types", label: "strict event types", type: "checkbox",
      value: v.strict_event_types },
  ];
}

async function tenantsPage() {
  const list = pagedTable("tenants", "/v1/tenants", {}, [
    ["id", (t) => h("a", { href: `#/t/${enc(t.id)}/endpoints` }, t.id)],
    ["name", (t) => t.name],
    ["ack policy", (t) => t.ack_policy],
    ["published", (t) => text(t.usage && t.usage.events_published), { class: "num" }],
    ["backlog", (t) => text(t.usage && t.usage.backlog), { class: "num" }],
    ["failed", (t) => text(t.usage && t.usage.deliveries_failed), { class: "num" }],
    ["", (t) => [h("a", { href: `#/t/${enc(t.id)}/endpoints` }, "endpoints"), " · ",
      h("a", { href: `#/t/${enc(t.id)}/events` }, "events"), " · ",
      h("a", { href: `#/t/${enc(t.id)}/settings` }, "settings")]],
  ], { attrs: (t) => ({ "data-tenant": t.id }) });
  const create = apiForm("new-tenant", null, tenantFields(null), "Create tenant", async (body) => {
    const t = await api("POST", "/v1/tenants", body);
    flash(`tenant ${t.id} created`);
    location.hash = `#/t/${enc(t.id)}/settings`;
  });
  show(h("h1", {}, "Tenants"), fold("New tenant", create), list.el);
  await list.loadMore();
  onRefresh(list.reload);
}

async function tenantSettingsPage(tenant) {
  const base = `/v1/tenants/${enc(tenant)}`;
  const t = await api("GET", base);
  const edit = apiForm("edit-tenant", "Settings", tenantFields(t), "Save", async (body) => {
    await api("PATCH", base, body);
    flash("tenant saved");
    await route();
  }, { changedOnly: true });
  const link = h("div", { id: "portal-link" });
  const portal = apiForm("new-portal", "Consumer portal link", [
    { name: "ttl_s", label: "lifetime (s)", type: "number", help: "60 to 604800; empty: 3600" },
    { name: "allowed_origins", label: "origins that may frame it", type: "list",
      help: "e.g. https://app.example.com (none: it cannot be framed)" },
  ], "Create link", async (body) => {
    const s = await api("POST", `${base}/portal-sessions`, body);
    link.replaceChildren(h("p", {}, `valid until ${s.expires_at}: `),
      h("pre", { id: "portal-url" }, s.url));
  });
  show(
    h("h1", {}, `Tenant ${t.id}`),
    h("p", {}, h("a", { href: `#/t/${enc(tenant)}/endpoints` }, "endpoints"), " · ",
      h("a", { href: `#/t/${enc(tenant)}/events` }, "events"), " · ",
      h("a", { href: `#/t/${enc(tenant)}/event-types` }, "event types")),
    edit, portal, link,
    h("div", { class: "actions" }, guarded("End every portal session", "danger expire-portal",
      `End every portal session of ${tenant}?`,
      "Every link made until now stops working, in every region once replicated.",
      async () => { await api("POST", `${base}/portal-sessions/expire-all`); flash("portal sessions ended"); })),
    isAdmin() ? h("div", { class: "actions" }, guarded("Delete tenant", "danger delete",
      `Delete tenant ${tenant}?`, "Its endpoints, sources and tokens go with it, in every region.",
      async () => { await api("DELETE", base); flash(`tenant ${tenant} deleted`); location.hash = "#/tenants"; }))
      : null);
}

// ---------------------------------------------------------------- event types

function eventTypeFields(v) {
  const e = v || {};
  return [
    ...(v ? [] : [{ name: "name", label: "name", placeholder: "order.paid" }]),
    { name: "description", label: "description", value: e.description, empty: v ? "" : undefined },
    { name: "schema", label: "JSON Schema", type: "json", value: e.schema, rows: 5,
      empty: v ? null : undefined, help: "empty: any payload" },
    { name: "deprecated", label: "deprecated", type: "checkbox", value: e.deprecated },
  ];
}

async function eventTypesPage(tenant) {
  const base = `/v1/tenants/${enc(tenant)}/event-types`;
  const list = pagedTable("event-types", base, {}, [
    ["name", (e) => h("a", { href: `#/t/${enc(tenant)}/event-types/${enc(e.name)}` }, e.name)],
    ["description", (e) => text(e.description)],
    ["schema", (e) => (e.schema === null ? "-" : "yes")],
    ["deprecated", (e) => (e.deprecated ? "yes" : "")],
  ], { attrs: (e) => ({ "data-event-type": e.name }), unpaged: true });
  const create = canManage() && who.right !== "portal"
    ? fold("New event type", apiForm("new-event-type", null, eventTypeFields(null), "Create",
      async (body) => {
        await api("POST", base, body);
        flash(`event type ${body.name} created`);
        await list.reload();
      })) : null;
  show(h("h1", {}, `Event types of ${tenant}`), create, list.el);
  await list.loadMore();
  onRefresh(list.reload);
}

async function eventTypePage(tenant, name) {
  const base = `/v1/tenants/${enc(tenant)}/event-types/${enc(name)}`;
  const e = await api("GET", base);
  const writable = canManage() && who.right !== "portal";
  show(
    h("h1", {}, `Event type ${e.name}`),
    h("p", {}, h("a", { href: `#/t/${enc(tenant)}/event-types` }, "← event types")),
    writable ? apiForm("edit-event-type", null, eventTypeFields(e), "Save", async (body) => {
      await api("PATCH", base, body);
      flash("event type saved");
      await route();
    }, { changedOnly: true }) : h("pre", {}, JSON.stringify(e, null, 2)),
    writable ? h("div", { class: "actions" }, guarded("Delete", "danger delete",
      `Delete event type ${name}?`, "Endpoints subscribed to it keep their subscription.",
      async () => { await api("DELETE", base); location.hash = `#/t/${enc(tenant)}/event-types`; }))
      : null);
}

// ---------------------------------------------------------------- sources and tokens

async function sourcesPage() {
  const list = pagedTable("sources", "/v1/sources", {}, [
    ["id", (s) => h("code", {}, s.id)],
    ["tenant", (s) => s.tenant],
    ["kind", (s) => s.kind],
    ["ack policy", (s) => text(s.ack_policy)],
    ["inbound url", (s) => h("code", {}, s.url_path)],
    ["", (s) => guarded("Delete", "danger delete", `Delete source ${s.id}?`,
      `POST ${s.url_path} is refused from then on, in every region.`,
      async () => { await api("DELETE", `/v1/sources/${enc(s.id)}`); await list.reload(); })],
  ], { attrs: (s) => ({ "data-source": s.id }) });
  const create = apiForm("new-source", null, [
    { name: "tenant", label: "tenant" },
    { name: "kind", label: "kind", type: "select",
      options: ["github", "stripe", "standard-webhooks", "hmac"], value: "github" },
    { name: "secret", label: "secret", help: "the sender's signing secret" },
    { name: "ack_policy", label: "ack policy", type: "select", options: ACK, value: "local" },
    { name: "priority", label: "priority", type: "select",
      options: ["", "critical", "high", "normal", "low"] },
    { name: "header", label: "signature header (hmac)" },
    { name: "algorithm", label: "algorithm (hmac)", type: "select", options: ["", "sha1", "sha256", "sha512"] },
    { name: "encoding", label: "encoding (hmac)", type: "select", options: ["", "hex", "base64"] },
    { name: "prefix", label: "signature prefix (hmac)" },
    { name: "event_type_from", label: "event type from (hmac)" },
    { name: "id_from", label: "event id from (hmac)" },
    { name: "default_event_type", label: "default event type (hmac)" },
  ], "Create source", async (body) => {
    const s = await api("POST", "/v1/sources", body);
    flash(`source ${s.id} created: POST ${s.url_path}`);
    await list.reload();
  });
  show(h("h1", {}, "Inbound sources"), fold("New source", create), list.el);
  await list.loadMore();
  onRefresh(list.reload);
}

async function tokensPage() {
  const list = pagedTable("tokens", "/v1/tokens", {}, [
    ["id", (t) => h("code", {}, t.id)],
    ["name", (t) => t.name],
    ["scope", (t) => t.scope],
    ["expires", (t) => text(t.expires_at)],
    ["created by", (t) => t.created_by],
    ["", (t) => guarded("Revoke", "danger revoke", `Revoke token ${t.name}?`,
      "Every region refuses it once the revocation reaches it.",
      async () => { await api("DELETE", `/v1/tokens/${enc(t.id)}`); await list.reload(); })],
  ], { attrs: (t) => ({ "data-token": t.id }) });
  const secret = h("div", { id: "new-token" });
  const create = apiForm("new-token-form", null, [
    { name: "scope", label: "scope", placeholder: "admin or tenant:<id>:manage|publish|read" },
    { name: "name", label: "name" },
    { name: "expires_at", label: "expires at", placeholder: "RFC 3339; empty: never" },
  ], "Create token", async (body) => {
    const t = await api("POST", "/v1/tokens", body);
    secret.replaceChildren(h("p", {}, "The token, shown this once:"), h("pre", {}, t.token));
    await list.reload();
  });
  show(h("h1", {}, "API tokens"), fold("New token", [create, secret]), list.el);
  await list.loadMore();
  onRefresh(list.reload);
}

// ---------------------------------------------------------------- publish

// the tokens the publish route takes (routes/common.py Auth.check); a portal session's not
const canPublish = () => who && (who.scope === "admin" || who.right === "manage" ||
  who.right === "publish");

function publishForm(tenant, after) {
  // POST /v1/tenants/{t}/events with the payload's text sent as typed (a "json" field is
  // RawJson: 1.10 stays 1.10, the node keeps the member's exact text); the API's problem
  // (no such type, a payload its schema refuses) is shown at its field
  if (!canPublish()) return null;
  const done = h("p", { id: "published" });
  const types = h("datalist", { id: "publish-types" });
  const form = apiForm("publish", null, [
    { name: "event_type", label: "event type", placeholder: "order.paid" },
    { name: "payload", label: "payload (JSON, sent as written)", type: "json", rows: 6,
      placeholder: '{"amount": 1.10}' },
  ], "Publish", async (body) => {
    const ev = await api("POST", `/v1/tenants/${enc(tenant)}/events`, body);
    done.replaceChildren(`published ${ev.duplicate ? "(a duplicate) " : ""}`,
      h("a", { id: "published-event", href: `#/t/${enc(tenant)}/events/${enc(ev.id)}` }, ev.id),
      ...(ev.warnings || []).map((w) => h("span", { class: "warn" }, ` (${w})`)));
    flash(`event ${ev.id} published`);
    await after();
  });
  form.elements.event_type.setAttribute("list", "publish-types");
  form.append(types);
  api("GET", `/v1/tenants/${enc(tenant)}/event-types`).then((p) => types.replaceChildren(
    ...p.items.map((e) => h("option", { value: e.name })))).catch(() => {});
  return fold("Publish event", [form, done]);
}

// ---------------------------------------------------------------- search

function searchForm(tenant) {
  const input = h("input", { name: "q", id: "search-q", placeholder: "evt_... or dlv_...",
    "aria-label": "event or delivery id" });
  const form = h("form", { id: "search", class: "actions" }, input,
    h("button", { type: "submit" }, "Find"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    location.hash = `#/t/${enc(tenant)}/search?q=${enc(input.value.trim())}`;
  });
  return form;
}

async function searchPage(tenant, query) {
  const q = new URLSearchParams(query || "").get("q") || "";
  const base = `/v1/tenants/${enc(tenant)}`;
  const tries = q.startsWith("dlv_") ? ["delivery"] : q.startsWith("evt_") ? ["event"] : ["event", "delivery"];
  const misses = [];
  for (const kind of tries) {
    try {
      if (kind === "event") {
        await api("GET", `${base}/events/${enc(q)}`);
        location.hash = `#/t/${enc(tenant)}/events/${enc(q)}`;
        return;
      }
      const d = await api("GET", `${base}/deliveries/${enc(q)}`);
      show(h("h1", {}, "Delivery ", h("code", {}, d.id)), searchForm(tenant),
        h("dl", { class: "kv", id: "found-delivery" },
          h("dt", {}, "status"), h("dd", {}, statusCell(d.status)),
          h("dt", {}, "event"), h("dd", {}, h("a", { href: `#/t/${enc(tenant)}/events/${enc(d.event)}` }, d.event)),
          h("dt", {}, "endpoint"), h("dd", {}, h("a", { href: `#/t/${enc(tenant)}/endpoints/${enc(d.endpoint)}` }, d.endpoint)),
          h("dt", {}, "attempts"), h("dd", {}, String(d.attempts)),
          h("dt", {}, "next attempt"), h("dd", {}, text(d.next_attempt_at)),
          h("dt", {}, "owned by"), h("dd", {}, d.region)));
      return;
    } catch (err) {
      if (!(err instanceof ApiError) || err.status !== 404) throw err;
      misses.push(err.problem.detail || err.message);
    }
  }
  show(h("h1", {}, "Search"), searchForm(tenant),
    h("p", { class: "bad", id: "search-miss" }, `nothing found for ${q}: ${misses.join("; ")}`));
}
