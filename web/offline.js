// Registers the site's service worker (/sw.js, written by `ember site` from
// web/service-worker.js): loadEmber calls it once a page is ready, so the worker's first
// caching (the pages and the runtime, then in the browser's HTTP cache) never competes with
// the boot. Pages served by a bare static server without /sw.js simply stay online-only.
export function registerOffline() {
  const sw = globalThis.navigator?.serviceWorker;
  if (!sw || !globalThis.isSecureContext) return null;
  const root = new URL("../", import.meta.url);
  return sw.register(new URL("sw.js", root), { scope: root.pathname }).catch((e) => {
    console.warn(`ember: no offline copy of the site (${e.message})`);
    return null;
  });
}
