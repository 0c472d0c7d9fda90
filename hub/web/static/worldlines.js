// The companion's worldlines (hub/web/worldlines.py): forks waiting for the owner, each with
// its diff and commit / discard buttons. A commit asks the gateway, which answers with a
// consent card: the owner signs it in Cards like every card.
import { t, refusal } from "/static/i18n.js";
import { ApiError, api } from "/static/device.js";

const $ = (id) => document.getElementById(id);

function say(text) {
  $("worldlines-outcome").textContent = text;
}

function sayError(err) {
  say(err instanceof ApiError ? refusal(err.body) : String(err));
}

function forkItem(f) {
  const li = document.createElement("li");
  li.className = "worldline";
  li.dataset.id = f.target;
  const what = document.createElement("span");
  what.className = "text";
  const stale = f.fields.stale ? ` (${t("worldlines.stale")})` : "";
  what.textContent = `${f.fields.label || f.target}${stale}`;
  const diff = document.createElement("pre");
  diff.className = "worldline-diff";
  diff.hidden = true;
  const path = `/api/worldlines/worldlines/${encodeURIComponent(f.target)}`;
  const show = document.createElement("button");
  show.className = "small worldline-show";
  show.textContent = t("worldlines.show");
  show.onclick = () => api(path).then((r) => {
    diff.textContent = r.diff.diff || [r.diff.added, r.diff.changed, r.diff.removed]
      .filter(Boolean).join("\n") || t("worldlines.no_changes");
    diff.hidden = false;
  }).catch(sayError);
  const commit = document.createElement("button");
  commit.className = "small worldline-commit";
  commit.textContent = t("worldlines.commit");
  commit.onclick = () => api(`${path}/commit`, {})
    .then((r) => say(r.status === "waiting" ? t("worldlines.card") : ""))
    .then(refreshWorldlines).catch(sayError);
  const discard = document.createElement("button");
  discard.className = "small worldline-discard";
  discard.textContent = t("worldlines.discard");
  discard.onclick = () => api(`${path}/discard`, {}).then(refreshWorldlines).catch(sayError);
  li.append(what, show, commit, discard, diff);
  return li;
}

export async function refreshWorldlines() {
  const list = $("worldlines-list");
  if (!list) return;
  let forks = [];
  try {
    ({ forks } = await api("/api/worldlines"));
  } catch (err) {
    if (!(err instanceof ApiError)) throw err;
    forks = [];  // no workspace on this hub, or the gateway is down: nothing to show
  }
  list.replaceChildren(...forks.map(forkItem));
  $("worldlines-empty").hidden = forks.length > 0;
}
