// The page texts (hub/web/texts.py), in the chosen language: the switch, else Accept-Language.
let texts = {};
let lang = "en";

export async function loadTexts() {
  const chosen = localStorage.getItem("yimi.lang");
  const url = chosen ? `/texts.json?lang=${chosen}` : "/texts.json";
  const res = await fetch(url);
  const data = await res.json();
  texts = data.texts;
  lang = data.lang;
  document.documentElement.lang = lang === "zh" ? "zh-CN" : "en";
  return lang;
}

export function t(key, fields = {}) {
  const template = texts[key] ?? key;
  return template.replace(/\{(\w+)\}/g, (_, name) => String(fields[name] ?? ""));
}

export function applyTexts(root = document) {
  for (const el of root.querySelectorAll("[data-t]")) el.textContent = t(el.dataset.t);
  for (const el of root.querySelectorAll("[data-t-placeholder]")) {
    el.placeholder = t(el.dataset.tPlaceholder);
  }
}

export async function switchLanguage() {
  localStorage.setItem("yimi.lang", lang === "en" ? "zh" : "en");
  await loadTexts();
  applyTexts();
}

export function refusal(body) {
  // a refusal from the server: {error: key, fields: {...}}
  if (body && body.error) return t(body.error, body.fields || {});
  return String(body);
}
