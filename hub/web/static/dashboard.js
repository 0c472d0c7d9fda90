// The hub dashboard: devices (presence, last seen, pair, revoke), the accepted and refused
// messages, and for the owner's phone the operator panels: packages, models, brain
// providers, payments and the audit log with its verification result.
import { loadTexts, applyTexts, switchLanguage, t, refusal } from "/static/i18n.js";
import { ApiError, api, loadDevice, signIn } from "/static/device.js";

const $ = (id) => document.getElementById(id);

function cell(text, cls = "") {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  return td;
}

function row(cells, data = {}) {
  const tr = document.createElement("tr");
  for (const [k, v] of Object.entries(data)) tr.dataset[k] = v;
  tr.append(...cells);
  return tr;
}

const fill = (id, rows) => $(id).tBodies[0].replaceChildren(...rows);
const when = (ms) => (ms ? new Date(ms).toLocaleString() : "-");
const OPERATOR_EVERY_MS = 5000;
let operator = null; // the owner's phone sees the operator panels (true); others get 403

function money(minor, currency) {
  return minor === null || minor === undefined ? "-" : `${(minor / 100).toFixed(2)} ${currency}`;
}

function revokeButton(d) {
  const td = document.createElement("td");
  if (d.state === "revoked" || operator !== true) return td;
  const b = document.createElement("button");
  b.className = "small revoke";
  b.textContent = t("dash.revoke");
  b.onclick = async () => {
    if (!window.confirm(t("dash.revoke_confirm", { name: d.name }))) return;
    try {
      await api("/api/operator/revoke", { name: d.name });
      $("device-outcome").textContent = t("dash.revoked_done", { name: d.name });
      await render();
    } catch (err) {
      $("device-outcome").textContent = err instanceof ApiError ? refusal(err.body) : String(err);
    }
  };
  td.append(b);
  return td;
}

async function renderOperator() {
  if (operator === false) return;
  let data;
  try {
    data = await api("/api/operator");
  } catch (err) {
    if (err instanceof ApiError && err.status === 403) {
      operator = false; // not the owner's phone: devices and counters only
      for (const el of document.querySelectorAll(".operator")) el.hidden = true;
      $("operator-only").hidden = false;
      return;
    }
    throw err;
  }
  operator = true;
  const p = data.packages;
  fill("packages", [
    ...p.running.map((n) => row([cell(n), cell(t("dash.running"), "state online")], { package: n })),
    ...p.failed.map((f) => row(
      [cell(f.name), cell(`${t("dash.failed")}: ${f.why}`, "state failed")], { package: f.name },
    )),
    ...p.loaded.filter((n) => !p.running.includes(n) && !p.failed.some((f) => f.name === n))
      .map((n) => row([cell(n), cell(t("dash.loaded"))], { package: n })),
  ]);
  fill("models", data.models.map((m) => row([
    cell(m.role), cell(m.selected), cell(m.effective ?? "-"),
    cell(m.progress === null ? "-" : `${Math.round(m.progress * 100)} %`),
    cell(m.error ?? m.activity ?? (m.pending ? `→ ${m.pending}` : "-"), m.error ? "state failed" : ""),
  ], { role: m.role })));
  const b = data.brain;
  fill("brain", [
    ...(b.providers.some((e) => e.role === "brain") ? [] : [row([cell("brain"), cell(t("dash.brain_builtin"))])]),
    ...b.providers.map((e) => row([cell(e.role), cell(e.endpoint + (e.key_id ? `, key ${e.key_id}` : ""))], { role: e.role })),
    row([cell(t("dash.prefer_local")), cell(b.prefer_local ? "✓" : "✗")]),
  ]);
  fill("payments", data.payments.map((x) => {
    const tr = row([
      cell(x.payee || x.description), cell(money(x.amount_minor, x.currency), "num"),
      cell(x.state, `state ${x.state}`), cell(when(x.updated_ms)),
    ], { payment: x.payment_id, state: x.state });
    tr.title = x.reason; // why it is in this state (the read-back of a waiting one)
    return tr;
  }));
  const a = data.audit;
  const verdict = $("audit-verdict");
  verdict.textContent = a.ok
    ? t("dash.audit_ok", { records: a.records })
    : t("dash.audit_bad", { line: a.line, problem: a.problem });
  verdict.className = a.ok ? "audit-ok" : "audit-bad";
  verdict.dataset.ok = a.ok ? "yes" : "no";
  fill("audit", a.recent.map((r) => row(
    [cell(String(r.seq), "num"), cell(when(r.ts_ms)), cell(r.kind), cell(r.trace_id)], { seq: r.seq },
  )));
  document.body.dataset.operator = "shown";
}

async function render() {
  const data = await api("/api/dashboard");
  const rows = data.devices.map((d) => {
    const tr = document.createElement("tr");
    tr.dataset.device = d.name;
    const state = t(`dash.${d.state}`);
    const seen = d.last_seen_ms ? new Date(d.last_seen_ms).toLocaleString() : t("dash.never");
    const name = d.this ? `${d.name} (${t("dash.web")})` : d.name;
    tr.append(cell(name), cell(d.profile), cell(state, `state ${d.state}`), cell(seen), revokeButton(d));
    return tr;
  });
  $("devices").tBodies[0].replaceChildren(...rows);
  const counters = Object.entries(data.counters).map(([name, value]) => {
    const tr = document.createElement("tr");
    tr.dataset.counter = name;
    tr.className = name.startsWith("accepted") ? "accepted" : "refused";
    tr.append(cell(name), cell(String(value), "num"));
    return tr;
  });
  $("counters").tBodies[0].replaceChildren(...counters);
  document.body.dataset.state = "shown";
}

async function main() {
  await loadTexts();
  applyTexts();
  $("lang").onclick = async () => {
    await switchLanguage();
    await render();
    await renderOperator();
  };
  $("pair-new").onclick = async () => {
    try {
      const r = await api("/api/operator/pair-code", {});
      $("pair-code-shown").textContent =
        t("dash.pair_code", { code: r.code, until: new Date(r.expires_ms).toLocaleTimeString() });
      $("pair-code-shown").dataset.code = r.code;
    } catch (err) {
      $("pair-code-shown").textContent = err instanceof ApiError ? refusal(err.body) : String(err);
    }
  };
  try {
    await render();
  } catch (err) {
    const device = await loadDevice();
    if (!(err instanceof ApiError) || err.status !== 401 || !device) {
      $("status").textContent = err instanceof ApiError ? refusal(err.body) : String(err);
      return;
    }
    try { await signIn(device); await render(); } catch (e) {
      $("status").textContent = e instanceof ApiError ? refusal(e.body) : String(e);
    }
  }
  const operatorPanels = () => renderOperator().catch((err) => {
    $("status").textContent = err instanceof ApiError ? refusal(err.body) : String(err);
  });
  await operatorPanels();
  await render(); // the revoke buttons: only for the operator
  setInterval(() => render().catch(() => {}), 1000); // counters are flushed every half second
  // the panels verify the audit log and the model digests: not every second
  setInterval(operatorPanels, OPERATOR_EVERY_MS);
  const events = new EventSource("/api/events");
  events.addEventListener("changed", () => render().catch(() => {}));
  events.addEventListener("logout", () => { events.close(); $("status").textContent = t("session.out"); });
}

main();
