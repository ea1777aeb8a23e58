// The site's service worker: `ember site` writes it to /sw.js with BUILD (a hash of the build)
// and PRECACHE (the pages, their scripts and styles, and the runtime files every page boots
// from) filled in; web/offline.js registers it once a page is ready. After one visit every page
// works with the server gone: the runtime under /pyodide/<tag>/ (whose URLs never change
// meaning) comes from the cache first, everything else from the network first, the cache when
// the network fails. Each response that passes is kept. A new build is a new cache; the old
// one is deleted when the new worker takes over.
const BUILD = "__EMBER_BUILD__";
const PRECACHE = ["__EMBER_PRECACHE__"];
const CACHE = `ember-${BUILD}`;
const PINNED = /\/pyodide\/[0-9a-f]{16}\//;

self.addEventListener("install", (event) => {
  const scope = self.registration.scope;
  event.waitUntil(caches.open(CACHE)
    .then((cache) => cache.addAll(PRECACHE.map((path) => new URL(path, scope).href)))
    .then(() => self.skipWaiting()));
});

self.addEventListener("activate", (event) => {
  event.waitUntil(caches.keys()
    .then((keys) => Promise.all(keys.filter((k) => k.startsWith("ember-") && k !== CACHE)
      .map((k) => caches.delete(k))))
    .then(() => self.clients.claim()));
});

self.addEventListener("fetch", (event) => {
  const request = event.request;
  const url = new URL(request.url);
  if (request.method !== "GET" || url.origin !== location.origin || request.headers.has("range")) return;
  event.respondWith(PINNED.test(url.pathname) ? cacheFirst(event) : networkFirst(event));
});

async function cacheFirst(event) {
  const cache = await caches.open(CACHE);
  return (await cache.match(event.request)) ?? fetchAndKeep(event, cache);
}

async function networkFirst(event) {
  const cache = await caches.open(CACHE);
  try {
    return await fetchAndKeep(event, cache);
  } catch (error) { // offline, or the server is gone
    const navigate = event.request.mode === "navigate"; // playground/?worker=0 is playground/
    const hit = await cache.match(event.request, { ignoreSearch: navigate });
    if (hit) return hit;
    throw error;
  }
}

async function fetchAndKeep(event, cache) {
  const response = await fetch(event.request);
  if (response.ok && response.type === "basic") {
    event.waitUntil(cache.put(event.request, response.clone()));
  }
  return response;
}
