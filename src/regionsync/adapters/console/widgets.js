// regionsync console widgets (issue 43): forms whose errors are the API's problem bodies,
// shown next to the field they name; the confirmation dialog of destructive actions; live
// refresh that redraws data only (never a form); paged tables over the API's `next`
// cursors; the payload text exactly as the API returns it. Loaded after console.js (its
// h, api, flash); every value is inserted as text, never as HTML.
"use strict";

// ---------------------------------------------------------------- forms

class RawJson {
  // JSON text sent as written (numbers keep their digits): never parsed and re-serialised
  constructor(text) { this.text = text; }
}

function jsonBody(body) {
  // the request body text: members in order, RawJson members verbatim
  return "{" + Object.entries(body).map(([k, v]) =>
    `${JSON.stringify(k)}:${v instanceof RawJson ? v.text : JSON.stringify(v)}`).join(",") + "}";
}

class FieldError extends Error {
  constructor(field, message) { super(message); this.field = field; }
}

function fieldInput(id, f) {
  const common = { id, name: f.name, placeholder: f.placeholder || "", "aria-describedby": `${id}-error` };
  if (f.type === "checkbox") return h("input", { ...common, type: "checkbox", checked: !!f.value });
  if (f.type === "select") {
    return h("select", common, f.options.map((o) => h("option", { value: o, selected: o === f.value }, o || "-")));
  }
  if (["json", "lines", "textarea"].includes(f.type)) {
    return h("textarea", { ...common, rows: f.rows || 3 }, initialText(f));
  }
  return h("input", { ...common, type: "text", value: initialText(f), autocomplete: "off" });
}

function initialText(f) {
  const v = f.value;
  if (v === null || v === undefined) return "";
  if (f.type === "json") return f.text !== undefined ? f.text : JSON.stringify(v, null, 2);
  if (f.type === "lines") return Object.entries(v).map(([k, x]) => `${k}: ${x}`).join("\n");
  if (f.type === "list") return v.join(", ");
  return String(v);
}

function readField(el, f) {
  // the member's value, or undefined to leave it out; FieldError for text that is no JSON
  if (f.type === "checkbox") return el.checked;
  const raw = el.value.trim();
  if (raw === "") return f.type === "list" ? [] : f.empty;
  if (f.type === "number") return /^-?\d+(\.\d+)?([eE][-+]?\d+)?$/.test(raw) ? Number(raw) : raw;
  if (f.type === "list") return raw.split(/[\s,]+/).filter(Boolean);
  if (f.type === "json") {
    try { JSON.parse(raw); } catch (err) { throw new FieldError(f.name, `not JSON: ${err.message}`); }
    return new RawJson(raw);
  }
  if (f.type === "lines") {
    const out = {};
    for (const line of raw.split("\n").map((l) => l.trim()).filter(Boolean)) {
      const at = line.indexOf(":");
      if (at < 1) throw new FieldError(f.name, `"${line}" is not "Name: value"`);
      out[line.slice(0, at).trim()] = line.slice(at + 1).trim();
    }
    return out;
  }
  return raw;
}

function formBody(form, fields, changedOnly) {
  // every member given (create) or only those changed from their first value (edit)
  const body = {};
  for (const f of fields) {
    const el = form.elements[f.name];
    if (changedOnly && f.type !== "checkbox" && el.value === initialText(f)) continue;
    if (changedOnly && f.type === "checkbox" && el.checked === !!f.value) continue;
    const v = readField(el, f);
    if (v !== undefined) body[f.name] = v;
  }
  return body;
}

function showFieldError(form, field, message) {
  // the message next to the field the problem names (`headers.X-Key`, `event_types[2]`: the
  // field `headers`, `event_types`); false if the form has no such field
  const base = String(field || "").split(/[.[]/)[0];
  const slot = form.querySelector(`[data-error-for="${CSS.escape(base)}"]`);
  if (!slot) return false;
  slot.textContent = field === base ? message : `${field}: ${message}`;
  const input = form.elements[base];
  if (input) { input.setAttribute("aria-invalid", "true"); input.focus(); }
  return true;
}

function clearErrors(form) {
  for (const el of form.querySelectorAll(".field-error, .form-error")) el.textContent = "";
  for (const el of form.querySelectorAll("[aria-invalid]")) el.removeAttribute("aria-invalid");
}

function apiForm(id, title, fields, submitLabel, onSubmit, opts) {
  // a form sending its members to the API; a problem body is shown next to its field
  const o = opts || {};
  const form = h("form", { id, class: "api-form", novalidate: true });
  if (title) form.append(h("h2", {}, title));
  for (const f of fields) {
    const fid = `${id}-${f.name}`;
    form.append(h("div", { class: "field", "data-field": f.name },
      h("label", { for: fid }, f.label || f.name), fieldInput(fid, f),
      f.help ? h("small", { class: "muted help" }, f.help) : null,
      h("span", { class: "field-error", id: `${fid}-error`, role: "alert", "data-error-for": f.name })));
  }
  const submit = h("button", { class: "primary", type: "submit" }, submitLabel);
  form.append(h("div", { class: "actions" }, submit),
    h("p", { class: "form-error bad", role: "alert" }));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    clearErrors(form);
    try {
      const body = formBody(form, fields, o.changedOnly);
      if (o.changedOnly && Object.keys(body).length === 0) {
        form.querySelector(".form-error").textContent = "nothing changed";
        return;
      }
      submit.disabled = true;
      await onSubmit(body, form);
    } catch (err) {
      const field = err instanceof FieldError ? err.field : err.problem && err.problem.field;
      const detail = err instanceof FieldError ? err.message : err.problem && err.problem.detail;
      if (!(field && showFieldError(form, field, detail))) {
        form.querySelector(".form-error").textContent = err.message;
      }
    } finally {
      submit.disabled = false;
    }
  });
  return form;
}

function fold(label, content, open) {
  // a form behind a disclosure, so long pages stay short
  return h("details", { class: "fold", open: !!open }, h("summary", {}, label), content);
}

// ---------------------------------------------------------------- confirmation

function confirmAction(title, message, confirmLabel) {
  // a modal dialog; resolves true only if the operator confirms
  return new Promise((resolve) => {
    const ok = h("button", { type: "button", class: "danger", id: "confirm-ok" }, confirmLabel);
    const cancel = h("button", { type: "button", id: "confirm-cancel" }, "Cancel");
    const dlg = h("dialog", { id: "confirm", class: "confirm", "aria-labelledby": "confirm-title" },
      h("h2", { id: "confirm-title" }, title), h("p", {}, message),
      h("div", { class: "actions" }, cancel, ok));
    ok.addEventListener("click", () => dlg.close("ok"));
    cancel.addEventListener("click", () => dlg.close("cancel"));
    dlg.addEventListener("close", () => { dlg.remove(); resolve(dlg.returnValue === "ok"); });
    document.body.append(dlg);
    dlg.showModal();
    cancel.focus();
  });
}

function guarded(label, cls, title, message, fn) {
  // a button whose action runs after confirmation (null title: without)
  return h("button", { type: "button", class: cls, onclick: async () => {
    if (title && !(await confirmAction(title, message, label))) return;
    try { await fn(); } catch (err) { flash(err.message, true); }
  } }, label);
}

// ---------------------------------------------------------------- live refresh

const LIVE_KEY = "regionsync.live";
const live = { loaders: [], timer: null, busy: false };

function onRefresh(fn) { live.loaders.push(fn); }

async function refreshNow() {
  if (live.busy) return;
  live.busy = true;
  try {
    await serial(async () => { for (const fn of live.loaders) await fn(); });
    document.getElementById("live-at").textContent = `updated ${new Date().toLocaleTimeString()}`;
  } catch (err) {
    flash(err.message, true);
  } finally {
    live.busy = false;
  }
}

function setupLive() {
  const box = document.getElementById("live");
  const every = document.getElementById("live-interval");
  const saved = JSON.parse(sessionStorage.getItem(LIVE_KEY) || "null");
  if (saved) { box.checked = saved.on; every.value = String(saved.s); }
  const restart = () => {
    clearInterval(live.timer);
    sessionStorage.setItem(LIVE_KEY, JSON.stringify({ on: box.checked, s: Number(every.value) }));
    live.timer = box.checked
      ? setInterval(() => { if (!document.hidden) refreshNow(); }, Number(every.value) * 1000) : null;
  };
  box.addEventListener("change", restart);
  every.addEventListener("change", restart);
  restart();
}

// ---------------------------------------------------------------- paged tables

function pagedTable(id, path, params, cols, opts) {
  // a table over the API's pages: "More" follows `next`; reload() fetches again the pages
  // shown (live refresh), keeping rows' open details (opts.after)
  const o = opts || {};
  const limit = String(o.limit || 25);
  const tbody = h("tbody");
  const more = h("button", { type: "button", class: "more", id: `${id}-more` }, "More");
  const info = h("span", { class: "muted", id: `${id}-info` });
  let items = [], cursor = null, pages = 0;
  const render = () => {
    const rows = items.flatMap((r) => [
      h("tr", o.attrs ? o.attrs(r) : {}, cols.map(([, cell, td]) => h("td", td || {}, cell(r)))),
      o.after ? o.after(r) : null].filter(Boolean));
    tbody.replaceChildren(...rows);
    more.hidden = !cursor;
    info.textContent = items.length
      ? `${items.length} shown${cursor ? ", more on the next page" : ""}` : "none";
  };
  const page = (c) => api("GET", path, undefined, o.unpaged ? params : { ...params, cursor: c, limit });
  const loadMore = async () => {
    const p = await page(cursor);
    items.push(...p.items); cursor = p.next; pages += 1; render();
  };
  const reload = async () => {
    const fresh = []; let c = null, n = 0;
    do { const p = await page(c); fresh.push(...p.items); c = p.next; n += 1; } while (c && n < pages);
    items = fresh; cursor = c; pages = n; render();
  };
  more.addEventListener("click", () => loadMore().catch((err) => flash(err.message, true)));
  const el = h("div", { class: "paged" },
    h("table", { id }, h("thead", {}, h("tr", {}, cols.map(([name]) => h("th", {}, name)))), tbody),
    h("div", { class: "actions" }, more, info));
  return { el, loadMore, reload, render, items: () => items };
}

// ---------------------------------------------------------------- payload text

function jsonValueEnd(text, start) {
  // the index after the JSON value starting at `start` (valid JSON, as the API sends)
  let depth = 0, i = start;
  for (; i < text.length; i++) {
    const c = text[i];
    if (c === '"') {
      for (i++; text[i] !== '"'; i++) if (text[i] === "\\") i++;
      if (depth === 0) return i + 1;
    } else if (c === "{" || c === "[") depth++;
    else if (c === "}" || c === "]") { depth--; if (depth === 0) return i + 1; }
    else if (depth === 0 && /[,}\]\s]/.test(text[i + 1] || ",")) return i + 1;
  }
  return i;
}

function payloadText(raw) {
  // the event body of GET .../events/{id} puts the stored payload text first, verbatim
  // (core.jsontext.embed): the text between `{"payload":` and the value's end, byte-exact
  const head = '{"payload":';
  if (!raw.startsWith(head)) return null;
  return raw.slice(head.length, jsonValueEnd(raw, head.length));
}
