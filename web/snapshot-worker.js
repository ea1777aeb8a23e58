// A throwaway worker that boots one more interpreter and keeps a memory snapshot of it
// (makeSnapshot in boot.js), started by ember.js once a page that found none is ready, so that
// the next visits boot from it. One message in, {indexURL}; one out: {bytes} or {error}.
import { makeSnapshot } from "./boot.js";

self.onmessage = async ({ data: { indexURL } }) => {
  try {
    postMessage({ bytes: await makeSnapshot(indexURL) });
  } catch (e) {
    postMessage({ error: String(e?.message ?? e) });
  }
};
