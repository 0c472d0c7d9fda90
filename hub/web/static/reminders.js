// The companion's reminders (hub/web/reminders.py): listed, moved to another time, cancelled.
import { t, refusal } from "/static/i18n.js";
import { ApiError, api } from "/static/device.js";

const $ = (id) => document.getElementById(id);

function say(err) {
  $("reminders-outcome").textContent = err instanceof ApiError ? refusal(err.body) : String(err);
}

function reminderItem(r) {
  const li = document.createElement("li");
  li.className = "reminder";
  li.dataset.id = r.id;
  const what = document.createElement("span");
  what.className = "text";
  what.textContent = `${r.when} — ${r.what}${r.recurring ? ` (${t("reminders.every")})` : ""}`;
  const at = document.createElement("input");
  at.type = "datetime-local";
  at.className = "reminder-at";
  at.value = r.at || "";
  const move = document.createElement("button");
  move.className = "small reminder-move";
  move.textContent = t("reminders.move");
  move.onclick = () => api(`/api/reminders/${encodeURIComponent(r.id)}/move`, {
    at: at.value, lang: document.documentElement.lang.startsWith("zh") ? "zh" : "en",
  }).then(refreshReminders).catch(say);
  const cancel = document.createElement("button");
  cancel.className = "small reminder-cancel";
  cancel.textContent = t("reminders.cancel");
  cancel.onclick = () => api(`/api/reminders/${encodeURIComponent(r.id)}/cancel`, {})
    .then(refreshReminders).catch(say);
  li.append(what, at, move, cancel);
  return li;
}

export async function refreshReminders() {
  const list = $("reminders-list");
  if (!list) return;
  let reminders = [];
  try {
    ({ reminders } = await api("/api/reminders"));
  } catch (err) {
    if (err instanceof ApiError && err.status === 503) reminders = [];
    else throw err;
  }
  list.replaceChildren(...reminders.map(reminderItem));
  $("reminders-empty").hidden = reminders.length > 0;
}
