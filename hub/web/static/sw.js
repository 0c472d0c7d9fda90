// The companion's service worker: the page shell (HTML, modules, texts) from the network,
// else from the cache, so the installed app opens offline; the API is never cached here
// (the page keeps its own timeline and outbox in IndexedDB).
const CACHE = "yimi-shell-v1";
const SHELL = [
  "/", "/dashboard", "/texts.json", "/static/companion.js", "/static/dashboard.js",
  "/static/device.js", "/static/i18n.js", "/static/reminders.js", "/static/style.css",
  "/static/worldlines.js",
  "/static/manifest.webmanifest",
  "/static/icon.svg",
];

self.addEventListener("install", (ev) => {
  ev.waitUntil(caches.open(CACHE).then((c) => c.addAll(SHELL)).then(() => self.skipWaiting()));
});

self.addEventListener("activate", (ev) => ev.waitUntil(self.clients.claim()));

self.addEventListener("fetch", (ev) => {
  const url = new URL(ev.request.url);
  if (ev.request.method !== "GET" || url.origin !== location.origin) return;
  if (url.pathname.startsWith("/api/")) return;
  ev.respondWith(
    fetch(ev.request)
      .then((res) => {
        if (res.ok) {
          const copy = res.clone();
          caches.open(CACHE).then((c) => c.put(ev.request, copy));
        }
        return res;
      })
      .catch(() => caches.match(ev.request).then((hit) => hit || Response.error())),
  );
});
