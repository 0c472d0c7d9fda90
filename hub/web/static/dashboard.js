// The hub dashboard: devices (presence, last seen) and the accepted and refused messages.
import { loadTexts, applyTexts, switchLanguage, t, refusal } from "/static/i18n.js";
import { ApiError, api, loadDevice, signIn } from "/static/device.js";

const $ = (id) => document.getElementById(id);

function cell(text, cls = "") {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  return td;
}

async function render() {
  const data = await api("/api/dashboard");
  const rows = data.devices.map((d) => {
    const tr = document.createElement("tr");
    tr.dataset.device = d.name;
    const state = t(`dash.${d.state}`);
    const seen = d.last_seen_ms ? new Date(d.last_seen_ms).toLocaleString() : t("dash.never");
    const name = d.this ? `${d.name} (${t("dash.web")})` : d.name;
    tr.append(cell(name), cell(d.profile), cell(state, `state ${d.state}`), cell(seen));
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
  $("lang").onclick = async () => { await switchLanguage(); await render(); };
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
  setInterval(() => render().catch(() => {}), 1000); // counters are flushed every half second
  const events = new EventSource("/api/events");
  events.addEventListener("changed", () => render().catch(() => {}));
  events.addEventListener("logout", () => { events.close(); $("status").textContent = t("session.out"); });
}

main();
