// regionsync console, endpoint pages (issue 43): create, edit, pause, resume, disable,
// rotate and delete endpoints through the API (problems shown at their field, destructive
// actions confirmed), test a filter, and page through deliveries and attempts with live
// refresh that keeps open details and form input.
"use strict";

function endpointFields(e) {
  const v = e || {};
  const edit = !!e;
  return [
    { name: "url", label: "url", value: v.url, placeholder: "https://receiver.example/hook",
      help: "empty for a broker destination" },
    // never pre-filled: an admin's endpoint body holds the broker URL's password
    { name: "destination", label: "broker destination", type: "json",
      help: `${edit ? "empty: unchanged" : "empty: HTTP at url"}; {"type": "redis", "url": ` +
        '"redis://host:6379/0", "stream": "..."}, or type "rabbitmq" with exchange and ' +
        'routing_key, or "nats" with subject and stream (a url of amqp:// or nats://)' },
    { name: "description", label: "description", value: v.description, empty: edit ? null : undefined },
    { name: "event_types", label: "event types", type: "list", value: v.event_types,
      help: "order.paid, invoice.* (empty: every type)" },
    { name: "filter", label: "payload filter", type: "json", value: v.filter,
      empty: edit ? null : undefined, help: 'e.g. {"amount": {"$gte": 100}} (empty: none)' },
    { name: "headers", label: "headers", type: "lines", value: v.headers,
      empty: edit ? null : undefined, help: "one Name: value a line" },
    { name: "rate_limit_per_s", label: "rate limit per s", type: "number", value: v.rate_limit_per_s },
    { name: "max_in_flight", label: "max in flight", type: "number", value: v.max_in_flight },
    { name: "payload_format", label: "payload format", type: "select",
      options: ["raw", "standard-webhooks"], value: v.payload_format || "raw" },
  ];
}

function destinationType(ep) {
  return (ep.destination && ep.destination.type) || "http";
}

function destinationText(ep) {
  // The broker's names, never destination.url: its password is shown to no one here
  // (ep.url is the broker's URL without it).
  const d = ep.destination || { type: "http" };
  const names = ["exchange", "routing_key", "subject", "stream"]
    .filter((k) => d[k]).map((k) => `${k.replace("_", " ")} ${d[k]}`);
  return names.length ? `${d.type}: ${names.join(", ")}` : d.type;
}

async function endpointsPage(tenant) {
  const base = `/v1/tenants/${enc(tenant)}/endpoints`;
  const list = pagedTable("endpoints", base, {}, [
    ["id", (e) => h("a", { href: `#/t/${enc(tenant)}/endpoints/${enc(e.id)}` }, e.id)],
    ["destination", (e) => destinationType(e)],
    ["url", (e) => e.url],
    ["state", (e) => stateCell(e.state)],
    ["failing since", (e) => text(e.failing_since)],
    ["event types", (e) => (e.event_types.length ? e.event_types.join(", ") : "every type")],
  ], { attrs: (e) => ({ "data-endpoint": e.id }) });
  const create = canManage() ? fold("New endpoint", apiForm("new-endpoint", null,
    endpointFields(null), "Create endpoint", async (body) => {
      const e = await api("POST", base, body);
      flash(`endpoint ${e.id} created`);
      location.hash = `#/t/${enc(tenant)}/endpoints/${enc(e.id)}`;
    })) : null;
  show(
    h("h1", {}, `Endpoints of ${tenant}`),
    h("p", {}, h("a", { href: `#/t/${enc(tenant)}/events` }, "Event log"), " · ",
      h("a", { href: `#/t/${enc(tenant)}/event-types` }, "Event types"),
      isAdmin() ? [" · ", h("a", { href: `#/t/${enc(tenant)}/settings` }, "Settings")] : null),
    searchForm(tenant), create, list.el);
  await list.loadMore();
  onRefresh(list.reload);
}

function endpointActions(tenant, base, ep, reload) {
  const act = (label, cls, fn) => guarded(label, cls, null, null, fn);
  const patch = (body, done) => async () => { await api("PATCH", base, body); flash(done); await reload(); };
  const job = (kind) => async () => {
    const since = rfc3339(document.querySelector(`input[name=${kind}-since]`).value);
    const j = await api("POST", `${base}/${kind}`, { since });
    flash(`${kind} job ${j.id} started`);
    await followJob(tenant, j, reload);
  };
  return h("div", { class: "actions" },
    ep.paused ? act("Resume", "resume", patch({ paused: false }, "resumed"))
      : guarded("Pause", "pause", `Pause ${ep.id}?`,
        "No attempt is made while paused; deliveries wait and are sent on resume.",
        patch({ paused: true }, "paused")),
    ep.state === "disabled" ? act("Re-enable", "reenable", patch({ disabled: false }, "re-enabled"))
      : guarded("Disable", "disable", `Disable ${ep.id}?`,
        "A disabled endpoint gets no new deliveries until re-enabled.",
        patch({ disabled: true }, "disabled")),
    guarded("Rotate secret", "rotate", `Rotate the secret of ${ep.id}?`,
      "A new secret signs from now on; the previous one keeps signing for the overlap period.",
      async () => {
        await api("POST", `${base}/rotate-secret`);
        flash("secret rotated (the previous one keeps signing for the overlap period)");
        await reload();
      }),
    guarded("Delete", "danger delete", `Delete endpoint ${ep.id}?`,
      "It gets no more deliveries, in any region; this cannot be undone.",
      async () => {
        await api("DELETE", base);
        flash(`endpoint ${ep.id} deleted`);
        location.hash = `#/t/${enc(tenant)}/endpoints`;
      }),
    h("span", { class: "inline" }, sinceInput("recover-since"),
      act("Recover since", "recover", job("recover"))),
    h("span", { class: "inline" }, sinceInput("replay-missing-since"),
      act("Replay missing since", "replay", job("replay-missing"))));
}

function endpointFacts(tenant, ep) {
  const secret = h("code", {}, ep.secret.endsWith("…") ? ep.secret : `${ep.secret.slice(0, 12)}…`);
  const reveal = ep.secret.endsWith("…") ? null : h("button", { type: "button", id: "reveal-secret",
    onclick: (ev) => { secret.textContent = ep.secret; ev.target.remove(); } }, "Show");
  return [
    h("dt", {}, "tenant"), h("dd", {}, h("a", { href: `#/t/${enc(tenant)}/endpoints` }, tenant)),
    h("dt", {}, "destination"), h("dd", { id: "endpoint-destination" }, destinationText(ep)),
    h("dt", {}, "url"), h("dd", {}, ep.url),
    h("dt", {}, "state"), h("dd", { id: "endpoint-state" }, stateCell(ep.state)),
    h("dt", {}, "failing since"), h("dd", {}, text(ep.failing_since)),
    h("dt", {}, "event types"), h("dd", {}, ep.event_types.join(", ") || "every type"),
    h("dt", {}, "filter"), h("dd", {}, ep.filter ? h("code", {}, JSON.stringify(ep.filter)) : "-"),
    h("dt", {}, "rate limit"), h("dd", {}, `${text(ep.rate_limit_per_s)}/s, ${text(ep.max_in_flight)} in flight`),
    h("dt", {}, "payload format"), h("dd", {}, ep.payload_format),
    h("dt", {}, "secret"), h("dd", { id: "secret" }, secret, " ", reveal),
    h("dt", {}, "updated"), h("dd", {}, text(ep.updated_at)),
  ];
}

async function endpointPage(tenant, endpointId) {
  const base = `/v1/tenants/${enc(tenant)}/endpoints/${enc(endpointId)}`;
  let ep = await api("GET", base);
  const facts = h("dl", { class: "kv", id: "endpoint" }, endpointFacts(tenant, ep));
  const actionsSlot = h("div", { id: "endpoint-actions" });
  const refreshFacts = async () => {
    ep = await api("GET", base);
    facts.replaceChildren(...endpointFacts(tenant, ep));
    if (canManage()) actionsSlot.replaceChildren(endpointActions(tenant, base, ep, reloadAll));
  };
  const open = new Set(); // attempts whose details are shown, kept across refreshes
  const key = (a) => `${a.delivery}:${a.generation}:${a.n}`;
  const deliveries = pagedTable("deliveries", `${base}/deliveries`, {}, [
    ["delivery", (d) => h("code", {}, d.id)],
    ["event", (d) => h("a", { href: `#/t/${enc(tenant)}/events/${enc(d.event)}` }, d.event)],
    ["status", (d) => statusCell(d.status)],
    ["attempts", (d) => d.attempts, { class: "num" }],
    ["next attempt", (d) => text(d.next_attempt_at)],
    ["region", (d) => d.region],
    ["custodian", (d) => d.custodian],
    ["", (d) => retryButton(tenant, d, reloadAll)],
  ], { attrs: (d) => ({ "data-delivery": d.id, "data-status": d.status }) });
  const attempts = pagedTable("attempts", `${base}/attempts`, {}, [
    ["at", (a) => a.at],
    ["delivery", (a) => h("code", {}, a.delivery)],
    ["#", (a) => (a.generation ? `${a.n} (gen ${a.generation})` : `${a.n}`), { class: "num" }],
    ["status", (a) => h("span", { class: a.status_code >= 200 && a.status_code < 300 ? "ok" : "bad" },
      text(a.status_code))],
    ["latency ms", (a) => a.latency_ms.toFixed(1), { class: "num" }],
    ["region", (a) => a.region],
    ["error", (a) => text(a.error)],
    ["", (a) => h("button", { type: "button", class: "open-attempt", onclick: () => {
      if (open.has(key(a))) open.delete(key(a)); else open.add(key(a));
      attempts.render();
    } }, open.has(key(a)) ? "close" : "open")],
  ], {
    attrs: () => ({ class: "attempt-row" }),
    after: (a) => {
      if (!open.has(key(a))) return null;
      const event = (deliveries.items().find((d) => d.id === a.delivery) || {}).event;
      const details = attemptDetails(a, event, null, ep);
      if (event) {
        details.prepend(h("p", {}, h("a", { class: "event-link",
          href: `#/t/${enc(tenant)}/events/${enc(event)}` }, `event ${event}`)));
      }
      return h("tr", { class: "details" }, h("td", { colspan: 8 }, details));
    },
  });
  const reloadAll = async () => { await refreshFacts(); await deliveries.reload(); await attempts.reload(); };
  const edit = canManage() ? fold("Edit endpoint", apiForm("edit-endpoint", null, endpointFields(ep),
    "Save", async (body) => {
      await api("PATCH", base, body);
      flash("endpoint saved");
      await route();
    }, { changedOnly: true })) : null;
  const result = h("pre", { id: "filter-result", hidden: true });
  const testFilter = canManage() ? fold("Test the filter", [apiForm("test-filter", null, [
    { name: "payload", label: "sample payload", type: "json", rows: 4, placeholder: '{"amount": 120}' },
  ], "Test", async (body) => {
    const r = await api("POST", `${base}/test-filter`, body);
    result.hidden = false;
    result.textContent = r.matches ? "matches" : `does not match: ${JSON.stringify(r.failed_clause)}`;
  }), result]) : null;
  const tested = h("pre", { id: "test-result", hidden: true });
  const testEvent = canManage() ? fold("Send a test event", [apiForm("test-event", null, [
    { name: "event_type", label: "event type", placeholder: "regionsync.test" },
    { name: "payload", label: "payload", type: "json", rows: 4, placeholder: '{"test": true}' },
  ], "Send", async (body) => {
    const r = await api("POST", `${base}/test`, body);
    tested.hidden = false;
    tested.textContent = `${r.ok ? "delivered" : "FAILED"}: ${text(r.status_code)} ` +
      `${r.error || ""} in ${r.latency_ms.toFixed(1)} ms (${r.id}, not stored)\n\n` +
      `${r.request_headers}\n\n${r.response_excerpt || "(empty response)"}`;
  }), tested]) : null;
  if (canManage()) actionsSlot.append(endpointActions(tenant, base, ep, reloadAll));
  show(
    h("h1", {}, `Endpoint ${ep.id}`), facts, actionsSlot, h("div", { id: "job" }), edit, testFilter, testEvent,
    h("h2", {}, "Deliveries (newest first)"), deliveries.el,
    h("h2", {}, "Attempts (newest first)"), attempts.el);
  await deliveries.loadMore();
  await attempts.loadMore();
  onRefresh(reloadAll);
}
