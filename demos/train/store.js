// The model trained in /demos/train/, kept in this browser's IndexedDB so that the drawing demo
// (/demos/mnist/) can use it: one record {weights: Uint8Array (safetensors), config: {channels,
// hidden}, accuracy, valid, steps, backend, saved: ISO time}. Nothing leaves the browser.
const DB = "ember-demos", STORE = "models", KEY = "mnist-trained";

function open() {
  return new Promise((resolve, reject) => {
    const req = indexedDB.open(DB, 1);
    req.onupgradeneeded = () => req.result.createObjectStore(STORE);
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error);
  });
}

async function transact(mode, f) {
  const db = await open();
  try {
    return await new Promise((resolve, reject) => {
      const tx = db.transaction(STORE, mode), req = f(tx.objectStore(STORE));
      tx.oncomplete = () => resolve(req.result);
      tx.onerror = tx.onabort = () => reject(tx.error);
    });
  } finally {
    db.close();
  }
}

export const saveTrained = (record) => transact("readwrite", (s) => s.put(record, KEY));
export const loadTrained = () => transact("readonly", (s) => s.get(KEY));
