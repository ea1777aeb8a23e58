// Registers the site's service worker (/sw.js, written by `ember site` from
// web/service-worker.js) once the page is ready: loadEmber calls it when Python is up, and where
// the page has a #status (API.md's page contract) it waits until that reads `ready`, so the
// worker's first caching (the pages and the runtime, then in the browser's HTTP cache) never
// competes with the page's own start-up (a model to load, a first inference). Pages served by a
// bare static server without /sw.js simply stay online-only.
export function registerOffline() {
  const sw = globalThis.navigator?.serviceWorker;
  if (!sw || !globalThis.isSecureContext) return null;
  const root = new URL("../", import.meta.url);
  return pageReady().then(() => sw.register(new URL("sw.js", root), { scope: root.pathname })
    .catch((e) => {
      console.warn(`ember: no offline copy of the site (${e.message})`);
      return null;
    }));
}

// Resolves once the page's #status reads `ready`: at once where it does or where there is none,
// after 30 s in any case (a page that never says ready). ember.js waits for it too before it
// makes the memory snapshot (boot.js), for the same reason.
export function pageReady() {
  const status = globalThis.document?.getElementById("status");
  if (!status || status.textContent.trim() === "ready") return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => { observer.disconnect(); clearTimeout(timer); resolve(); };
    const observer = new MutationObserver(() => {
      if (status.textContent.trim() === "ready") done();
    });
    observer.observe(status, { childList: true, characterData: true, subtree: true });
    const timer = setTimeout(done, 30_000);
  });
}
