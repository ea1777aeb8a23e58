// The site's service worker: `ember site` writes it to /sw.js with BUILD (a hash of the build)
// and PRECACHE (the pages, their scripts and styles, PyScript's, and the runtime files every
// page boots from) filled in; web/offline.js registers it once a page is ready (the landing
// page: at once). After one visit every page works with the server gone: the runtime under
// /pyodide/<tag>/ (whose URLs never change meaning) comes from the cache first, everything
// else from the network first, the cache when the network fails. Each response that passes is
// kept. A new build is a new cache; the old one is deleted when the new worker takes over.
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

// Whether the server answered this worker's last request (null: none asked yet). While it does,
// the pinned runtime is left to the browser: its HTTP cache keeps those files for good
// (immutable), and only a file from there comes with the compiled WebAssembly Chrome keeps
// beside it (its code cache); from this worker's cache the 10 MB wasm would compile again on
// the first visit after this one (~1.5 s here). Offline, or not known yet: the cache first.
let online = null;

self.addEventListener("fetch", (event) => {
  const request = event.request;
  const url = new URL(request.url);
  if (request.method !== "GET" || url.origin !== location.origin || request.headers.has("range")) return;
  if (!PINNED.test(url.pathname)) event.respondWith(networkFirst(event));
  else if (online !== true) event.respondWith(cacheFirst(event));
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
  let response;
  try {
    response = await fetch(event.request);
  } catch (error) {
    online = false;
    throw error;
  }
  online = true;
  if (response.ok && response.type === "basic") {
    event.waitUntil(cache.put(event.request, response.clone()));
  }
  return response;
}
