// The phone companion: pairing, chat, timeline and cards (JavaScript modules, no build step).
import { loadTexts, applyTexts, switchLanguage, t, refusal } from "/static/i18n.js";
import {
  ApiError, api, pair, signIn, loadDevice, registerPasskey, answerCard, trustMe,
  whileAuthenticating, signBody,
  outboxAll, outboxPut, outboxDelete, keepEntries, keptEntries, newId,
} from "/static/device.js";
import { refreshReminders } from "/static/reminders.js";
import { refreshWorldlines } from "/static/worldlines.js";

const $ = (id) => document.getElementById(id);
let device = null;
let events = null;
let newestSeq = 0;
let oldestSeq = 0;
let cards = [];
const RETRY_MS = 1000;
const shown = new Set(); // seq of every entry on the page (refreshes may overlap)

function status(text) { $("status").textContent = text; }

function show(view) {
  for (const el of document.querySelectorAll(".view")) el.hidden = el.id !== `view-${view}`;
  for (const b of document.querySelectorAll("nav button")) {
    b.classList.toggle("active", b.dataset.view === view);
  }
}

function entryItem(e) {
  const li = document.createElement("li");
  li.className = `entry ${e.kind}`;
  li.dataset.seq = e.seq;
  const who = document.createElement("span");
  who.className = "who";
  who.textContent = `#${e.seq} ${e.device}`;
  const text = document.createElement("span");
  text.className = "text";
  text.textContent = e.text;
  li.append(who, text);
  return li;
}

async function rendered(entries) {
  // the replies this page shows are ACKed "rendered" (the hub ignores those not sent here)
  const ids = entries.filter((e) => e.kind === "reply").map((e) => e.id);
  if (ids.length) await api("/api/rendered", { reply_ids: ids });
}

function showEntries(entries) {
  for (const e of entries) {
    if (shown.has(e.seq)) continue;
    shown.add(e.seq);
    if (e.kind === "utterance" || e.kind === "reply") $("chat-log").append(entryItem(e));
    $("timeline-log").append(entryItem(e));
    newestSeq = Math.max(newestSeq, e.seq);
    if (!oldestSeq || e.seq < oldestSeq) oldestSeq = e.seq;
  }
  for (const li of document.querySelectorAll("#chat-log .pending")) $("chat-log").append(li);
}

async function refreshChat() {
  const { entries } = await api(`/api/timeline?after=${newestSeq}`);
  rendered(entries).catch(onError);
  keepEntries(entries).catch(() => {});
  showEntries(entries);
  if (entries.length) $("chat-log").lastElementChild?.scrollIntoView({ block: "end" });
}

async function firstPage() {
  const { entries } = await api("/api/timeline?before=0");
  rendered(entries).catch(onError);
  keepEntries(entries).catch(() => {});
  showEntries(entries);
}

async function olderPage() {
  if (oldestSeq <= 1) return;
  const { entries } = await api(`/api/timeline?before=${oldestSeq}`);
  const log = $("timeline-log");
  for (const e of entries.reverse()) {
    if (!shown.has(e.seq)) log.prepend(entryItem(e));
    shown.add(e.seq);
  }
  if (entries.length) oldestSeq = Math.min(...entries.map((e) => e.seq));
}

function cardItem(card) {
  const li = document.createElement("li");
  li.className = "card" + (card.payment ? " payment" : "");
  li.dataset.card = card.card_id;
  const expires = new Date(card.expires_ms).toLocaleTimeString();
  li.innerHTML = `<h3></h3><dl>
    <dt>${t("cards.effect")}</dt><dd class="effect"></dd>
    <dt>${t("cards.target")}</dt><dd class="target"></dd>
    <dt>${t("cards.expires")}</dt><dd class="expires"></dd></dl>
    <pre class="preview"></pre>
    ${card.payment ? `<p class="verify">${t("cards.verify")}</p>` : ""}
    <div class="actions"><button class="approve">${t("cards.approve")}</button>
    <button class="deny">${t("cards.deny")}</button></div>`;
  li.querySelector("h3").textContent = card.title;
  li.querySelector(".effect").textContent = card.effect;
  li.querySelector(".target").textContent = card.target;
  li.querySelector(".expires").textContent = expires;
  li.querySelector(".preview").textContent = card.preview;
  li.querySelector(".approve").onclick = () => answer(card, "approve");
  li.querySelector(".deny").onclick = () => answer(card, "deny");
  return li;
}

async function refreshCards() {
  ({ cards } = await api("/api/cards"));
  const list = $("cards-list");
  list.replaceChildren(...cards.map(cardItem));
  $("cards-empty").hidden = cards.length > 0;
  $("cards-count").textContent =
    cards.length ? ` (${cards.length})` : "";
}

async function answer(card, decision) {
  const out = $("card-outcome");
  out.textContent = "…";
  try {
    const r = await answerCard(device, card, decision);
    const reason = r.reason_key ? t(r.reason_key) : r.reason;
    const words = r.outcome === "refused"
      ? t("outcome.refused", { reason })
      : t(`outcome.${r.outcome}`);
    out.textContent = r.uvFailed ? `${t("outcome.uv_failed")} — ${words}` : words;
    out.dataset.outcome = r.outcome;
  } catch (err) {
    out.textContent = err instanceof ApiError ? refusal(err.body) : String(err);
    out.dataset.outcome = "error";
  }
  await refreshCards();
}

// ---- typed messages: kept in the outbox until the hub has them (offline too), sent once:
// the hub takes a repeated id as the same message
let flushing = false;

function pendingItem(item) {
  const li = entryItem({ seq: "…", device: t("chat.pending"), kind: "utterance", text: item.text });
  li.classList.add("pending");
  li.dataset.pending = item.id;
  return li;
}

async function flush() {
  if (flushing || !device) return;
  flushing = true;
  try {
    for (const item of await outboxAll()) {
      try {
        await api("/api/say", item);
      } catch (err) {
        if (!(err instanceof ApiError) || err.status === 401 || err.status >= 500) return;
        status(refusal(err.body)); // refused for good: not sent again
      }
      await outboxDelete(item.id);
      document.querySelector(`[data-pending="${item.id}"]`)?.remove();
    }
    await refreshChat();
  } catch (err) {
    if (!(err instanceof TypeError)) onError(err); // a TypeError: still offline
  } finally {
    flushing = false;
  }
}

async function send(text) {
  const item = { id: newId(), text, typed_ms: Date.now() };
  await outboxPut(item);
  $("chat-log").append(pendingItem(item));
  await flush();
}

async function showOffline() {
  // no hub: the timeline this page has, and typed messages wait in the outbox
  $("pairing").hidden = true;
  $("app").hidden = false;
  document.body.dataset.state = "offline";
  status(t("offline"));
  showEntries(await keptEntries());
  for (const item of await outboxAll()) $("chat-log").append(pendingItem(item));
}

function reconnect() {
  // offline: try the hub again every RETRY_MS (and at once when the browser is back online)
  let trying = false;
  const attempt = async () => {
    if (trying) return;
    trying = true;
    try {
      await start();
      clearInterval(timer);
    } catch (err) {
      if (!(err instanceof TypeError)) { clearInterval(timer); onError(err); }
    } finally {
      trying = false;
    }
  };
  const timer = setInterval(attempt, RETRY_MS);
  window.addEventListener("online", attempt, { once: true });
}

async function refresh() {
  await Promise.all([refreshChat(), refreshCards(), refreshReminders()]);
}

function signedOut() {
  if (events) events.close();
  events = null;
  $("app").hidden = true;
  $("pairing").hidden = false;
  document.body.dataset.state = "signed-out";
  status(t("session.out"));
}

function listen() {
  events = new EventSource("/api/events");
  events.addEventListener("changed", () => refresh().catch(onError));
  events.addEventListener("open", () => flush());
  events.addEventListener("logout", () => resume());
  events.onerror = () => {
    // a network error reconnects by itself; a refused stream (the hub restarted and forgot
    // the session) closes it: sign in again
    if (events && events.readyState === EventSource.CLOSED) resume();
  };
}

let resuming = false;

async function resume() {
  // the session ended: an expired one (or a hub restart) signs in again with the key; a
  // revoked device cannot and is signed out; an unreachable hub is retried
  if (resuming) return;
  resuming = true;
  if (events) events.close();
  events = null;
  try {
    await signIn(device);
    listen();
    await refresh();
  } catch (err) {
    if (err instanceof TypeError) reconnect();
    else signedOut();
  } finally {
    resuming = false;
  }
}

function onError(err) {
  if (err instanceof TypeError) status(t("offline"));
  else if (err instanceof ApiError && err.status === 401) {
    if (document.body.dataset.state === "signed-in") resume();
    else signedOut();
  } else status(err instanceof ApiError ? refusal(err.body) : String(err));
}

async function start() {
  status(t("session.signing"));
  const me = await signIn(device);
  const who = await api("/api/me");
  // the phone's biometric for payments and "it's me": registered only when asked
  document.body.dataset.passkey = who.passkey ? "yes" : "no";
  status(t("pair.done", { name: me.name }));
  $("pairing").hidden = true;
  $("app").hidden = false;
  document.body.dataset.state = "signed-in";
  await firstPage();
  await refreshCards();
  await refreshReminders();
  listen();
}

// ---- notes: the hub's notes replica, written as this device
function noteItem(n) {
  const li = document.createElement("li");
  li.dataset.note = n.id;
  li.className = n.done ? "done" : "";
  const text = document.createElement("span");
  text.className = "text";
  text.textContent = n.text;
  const meta = document.createElement("span");
  meta.className = "meta";
  meta.textContent = `${t(`notes.kind_${n.kind}`) || n.kind} · ${n.by} · ${new Date(n.updated_at).toLocaleString()}`;
  if (n.kind === "todo") {
    const box = document.createElement("input");
    box.type = "checkbox";
    box.className = "done";
    box.checked = n.done;
    box.style.width = "auto";
    box.onchange = () => api(`/api/notes/${n.id}`, { field: "done", value: String(box.checked) })
      .then(refreshNotes).catch(onError);
    li.append(box);
  }
  li.append(text, meta);
  return li;
}

async function refreshNotes() {
  const { notes } = await api("/api/notes");
  $("notes-list").replaceChildren(...notes.map(noteItem));
  $("notes-empty").hidden = notes.length > 0;
}

// ---- memory: search, explain, forget (a plan first, then confirmed)
let forgetting = null; // {id, plan_id} of the plan shown

function memoryItem(m) {
  const li = document.createElement("li");
  li.dataset.memory = m.id;
  const text = document.createElement("span");
  text.className = "text";
  text.textContent = m.text;
  const explain = document.createElement("button");
  explain.className = "small explain";
  explain.textContent = t("memory.explain");
  explain.onclick = () => explainMemory(m.id).catch(onMemoryError);
  const forget = document.createElement("button");
  forget.className = "small forget";
  forget.textContent = t("memory.forget");
  forget.onclick = () => planForget(m.id).catch(onMemoryError);
  li.append(text, explain, forget);
  return li;
}

function onMemoryError(err) {
  $("memory-outcome").textContent = err instanceof ApiError ? refusal(err.body) : String(err);
}

async function searchMemory() {
  const q = $("memory-query").value.trim();
  if (!q) return;
  const { found } = await api(`/api/memory/search?q=${encodeURIComponent(q)}`);
  $("memory-list").replaceChildren(...found.map(memoryItem));
  $("memory-none").hidden = found.length > 0;
  document.body.dataset.memory = "searched";
}

function lines(el, items) {
  el.replaceChildren(...items.map((text) => {
    const li = document.createElement("li");
    li.textContent = text;
    return li;
  }));
}

async function explainMemory(id) {
  const e = await api(`/api/memory/${encodeURIComponent(id)}/explain`);
  const box = $("memory-detail");
  box.replaceChildren();
  const h = document.createElement("h3");
  h.textContent = `${e.id}: ${e.status}, v${e.version}, ${e.sensitivity}`;
  const versions = document.createElement("ul");
  versions.className = "versions";
  lines(versions, e.versions.map((v) => `v${v.version} ${v.status} ${new Date(v.created_ms).toLocaleString()} ${v.text}`));
  const sources = document.createElement("p");
  sources.className = "sources";
  sources.textContent = `${t("memory.sources")}: ${e.sources.join(", ") || t("dash.none")}`;
  const deps = document.createElement("p");
  deps.textContent = `${t("memory.dependents")}: ${e.dependents.map((d) => d.id).join(", ") || t("dash.none")}`;
  const vh = document.createElement("p");
  vh.textContent = t("memory.versions");
  box.append(h, sources, vh, versions, deps);
  box.hidden = false;
}

async function planForget(id) {
  const p = await api(`/api/memory/${encodeURIComponent(id)}/plan`);
  forgetting = { id, plan_id: p.plan_id };
  lines($("memory-plan-list"), [
    ...p.assertions.map((a) => t("memory.plan_assertion", { id: a })),
    ...p.derived_delete.map((d) => t("memory.plan_derived", { id: d })),
    ...p.derived_rederive.map((d) => t("memory.plan_rederive", { id: d })),
    ...p.sources.map((src) => t("memory.plan_source", { source: src })),
    ...p.index.map((i) => t("memory.plan_index", { id: i })),
    t("memory.plan_not_claimed"),
  ]);
  $("memory-plan").hidden = false;
  $("memory-outcome").textContent = "";
}

async function confirmForget() {
  if (!forgetting) return;
  const { id, plan_id } = forgetting;
  forgetting = null;
  $("memory-plan").hidden = true;
  const r = await api(`/api/memory/${encodeURIComponent(id)}/forget`, { plan_id });
  $("memory-outcome").textContent = t("memory.forgotten", { id, count: r.deleted.length });
  $("memory-outcome").dataset.outcome = "forgotten";
  document.querySelector(`[data-memory="${id}"]`)?.remove();
  $("memory-detail").hidden = true;
}

// ---- model and brain switches: the hub builds the body, this device's key signs it
let switching = false;

function roleItem(r) {
  const li = document.createElement("li");
  li.dataset.role = r.role;
  const name = document.createElement("span");
  name.className = "text";
  name.textContent = `${r.role}: ${r.effective ?? "-"}`;
  const pick = document.createElement("select");
  for (const n of r.names) {
    const o = document.createElement("option");
    o.value = n;
    o.textContent = n;
    o.selected = n === r.selected;
    pick.append(o);
  }
  const go = document.createElement("button");
  go.className = "small switch";
  go.textContent = t("settings.switch");
  go.onclick = () => prepareSwitch("/api/switches/model", { role: r.role, name: pick.value });
  li.append(name, pick, go);
  return li;
}

async function refreshSettings() {
  const { roles } = await api("/api/switches");
  $("model-roles").replaceChildren(...roles.map(roleItem));
}

async function prepareSwitch(path, body) {
  const out = $("switch-outcome");
  out.removeAttribute("data-outcome");
  out.textContent = "…";
  try {
    const r = await api(path, body);
    switching = r;
    $("switch-summary").textContent = r.summary;
    $("switch-confirm").hidden = false;
    out.textContent = "";
  } catch (err) {
    out.textContent = err instanceof ApiError ? refusal(err.body) : String(err);
    out.dataset.outcome = "refused";
  }
}

async function confirmSwitch() {
  const r = switching;
  if (!r) return;
  switching = null;
  $("switch-confirm").hidden = true;
  const out = $("switch-outcome");
  try {
    const signature = await signBody(device, r.context, r.body);
    const done = await api("/api/switches/confirm", { signature });
    await refreshSettings();
    out.textContent = t("settings.done", { outcome: done.outcome });
    out.dataset.outcome = "confirmed";
  } catch (err) {
    out.textContent = err instanceof ApiError ? refusal(err.body) : String(err);
    out.dataset.outcome = "refused";
  }
}

// views read when opened (the versions list is a gateway call: never on every change)
const VIEW_LOADERS = { notes: refreshNotes, settings: refreshSettings, worldlines: refreshWorldlines };

async function setUpPasskey() {
  const out = $("me-outcome");
  try {
    await registerPasskey();
    document.body.dataset.passkey = "yes";
    out.textContent = t("passkey.done");
  } catch (err) {
    out.textContent = err instanceof ApiError ? refusal(err.body) : String(err);
  }
}

async function itsMe() {
  const out = $("me-outcome");
  out.removeAttribute("data-outcome");
  try {
    const r = await trustMe();
    out.textContent = t("trust.open", { until: new Date(r.closes_ms).toLocaleTimeString() });
    out.dataset.outcome = "open";
  } catch (err) {
    out.textContent = err instanceof ApiError ? refusal(err.body) : String(err);
    out.dataset.outcome = "refused";
  }
}

function blockInput(busy) {
  // while the authenticator asks for a fingerprint, face or PIN nothing else takes a tap
  $("app").inert = busy;
  if (busy) document.body.dataset.busy = "authenticator";
  else delete document.body.dataset.busy;
  $("busy").hidden = !busy;
}

async function main() {
  await loadTexts();
  applyTexts();
  whileAuthenticating(blockInput);
  $("passkey-setup").onclick = () => setUpPasskey();
  $("trust-me").onclick = () => itsMe();
  $("lang").onclick = async () => {
    await switchLanguage();
    await refreshCards();
  };
  for (const b of document.querySelectorAll("nav button")) {
    b.onclick = () => {
      show(b.dataset.view);
      VIEW_LOADERS[b.dataset.view]?.().catch(onError);
    };
  }
  $("note-form").onsubmit = async (ev) => {
    ev.preventDefault();
    const text = $("note-input").value.trim();
    if (!text) return;
    try {
      await api("/api/notes", { text, kind: $("note-kind").value });
      $("note-input").value = "";
      await refreshNotes();
    } catch (err) { onError(err); }
  };
  $("memory-form").onsubmit = (ev) => { ev.preventDefault(); searchMemory().catch(onMemoryError); };
  $("memory-forget-confirm").onclick = () => confirmForget().catch(onMemoryError);
  $("memory-forget-cancel").onclick = () => { forgetting = null; $("memory-plan").hidden = true; };
  $("brain-form").onsubmit = (ev) => {
    ev.preventDefault();
    const rules = $("brain-rules").checked;
    prepareSwitch("/api/switches/brain", rules
      ? { rule_based: true }
      : { base_url: $("brain-url").value.trim(), model: $("brain-model").value.trim() });
  };
  $("switch-sign").onclick = () => confirmSwitch();
  $("switch-cancel").onclick = () => { switching = null; $("switch-confirm").hidden = true; };
  $("timeline-older").onclick = () => olderPage().catch(onError);
  show("chat");
  $("pair-form").onsubmit = async (ev) => {
    ev.preventDefault();
    try {
      device = await pair($("pair-code").value, $("pair-name").value.trim());
      await start();
    } catch (err) {
      status(err instanceof ApiError ? refusal(err.body) : String(err));
    }
  };
  $("chat-form").onsubmit = async (ev) => {
    ev.preventDefault();
    const text = $("chat-input").value.trim();
    if (!text) return;
    $("chat-input").value = "";
    await send(text);
  };
  device = await loadDevice();
  if (!device) {
    $("pairing").hidden = false;
    document.body.dataset.state = "unpaired";
    return;
  }
  window.addEventListener("online", () => flush());
  setInterval(() => flush(), 2000);
  try {
    await start();
  } catch (err) {
    if (err instanceof TypeError) {
      await showOffline();
      reconnect();
    } else onError(err);
  }
}

if ("serviceWorker" in navigator) navigator.serviceWorker.register("/sw.js").catch(() => {});

main();
