// The phone companion: pairing, chat, timeline and cards (JavaScript modules, no build step).
import { loadTexts, applyTexts, switchLanguage, t, refusal } from "/static/i18n.js";
import {
  ApiError, api, pair, signIn, loadDevice, registerPasskey, answerCard,
  outboxAll, outboxPut, outboxDelete, keepEntries, keptEntries, newId,
} from "/static/device.js";
import { refreshReminders } from "/static/reminders.js";

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
    const words = r.outcome === "refused"
      ? t("outcome.refused", { reason: r.reason })
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
  document.body.dataset.passkey = who.passkey ? "yes" : "no";
  if (!who.passkey) {
    // the phone's biometric for payments: registered once, without holding up the pages
    registerPasskey()
      .then(() => { document.body.dataset.passkey = "yes"; })
      .catch((err) => console.warn("no passkey", err));
  }
  status(t("pair.done", { name: me.name }));
  $("pairing").hidden = true;
  $("app").hidden = false;
  document.body.dataset.state = "signed-in";
  await firstPage();
  await refreshCards();
  await refreshReminders();
  listen();
}

async function main() {
  await loadTexts();
  applyTexts();
  $("lang").onclick = async () => {
    await switchLanguage();
    await refreshCards();
  };
  for (const b of document.querySelectorAll("nav button")) b.onclick = () => show(b.dataset.view);
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
