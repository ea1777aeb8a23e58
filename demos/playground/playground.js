// The playground: Python in a Web Worker (the page stays responsive), ember preinstalled,
// top-level await. URL options: ?worker=0 runs Python on the page's thread, ?cdn=1 takes
// Pyodide from the CDN instead of this site.
import { loadEmber } from "../web/ember.js";
import { outputWriter } from "../web/output.js";

const $ = (id) => document.getElementById(id);
const status = $("status"), code = $("code"), output = $("output"), run = $("run"), stop = $("stop");
const params = new URLSearchParams(location.search);

function setStatus(text) {
  status.textContent = text;
  status.classList.toggle("error", text.startsWith("error"));
}

// batched: a DOM update per frame, not per write (100,000 printed lines froze the page)
const out = outputWriter(output);
const append = (text, cls) => out.write(text, cls);

// A share link carries the code in the URL's fragment (#code=<base64url of its UTF-8>): the
// fragment never reaches a server, and the page reads it back on load.
function shareLink(text) {
  const bytes = new TextEncoder().encode(text);
  const b64 = btoa(Array.from(bytes, (b) => String.fromCharCode(b)).join(""));
  const url = new URL(location.href);
  url.hash = `code=${b64.replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "")}`;
  return url.href;
}

function sharedCode() {
  const m = /^#code=([A-Za-z0-9_-]*)$/.exec(location.hash);
  if (!m) return null;
  try {
    const bytes = Uint8Array.from(atob(m[1].replace(/-/g, "+").replace(/_/g, "/")), (c) => c.charCodeAt(0));
    return new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    append("the link's code could not be read (a cut link?); showing the first example\n", "error");
    return null;
  }
}

// The code box's value is the textarea's; setCode tells the editor (attachEditor listens for
// `input`), which loads beside Python. Without it (its modules failed) the textarea is the editor.
function setCode(text) {
  code.value = text;
  code.dispatchEvent(new Event("input"));
}
import("./editor.js").then(
  ({ attachEditor }) => {  // (window.__editor: tests read the editor's document through it)
    window.__editor = attachEditor(code, { onRun: runCode, label: code.getAttribute("aria-label") });
  },
  (e) => console.warn(`the code editor did not load (${e.message}); the plain text box stays`));

// examples load while Python boots; the first one fills the code box, unless a link shared code
code.value = sharedCode() ?? "";
addEventListener("hashchange", () => { const shared = sharedCode(); if (shared !== null) setCode(shared); });
const examples = fetch("examples.json").then((r) => r.json()).then((list) => {
  const select = $("examples");
  for (const ex of list) select.add(new Option(ex.title, ex.name));
  select.onchange = () => setCode(list.find((e) => e.name === select.value).code);
  if (!code.value) setCode(list[0]?.code ?? "");
  return list;
}).catch((e) => append(`could not load the examples: ${e.message}\n`, "error"));

$("share").onclick = async () => {
  const link = $("share-link");
  link.value = shareLink(code.value);
  link.hidden = false;
  link.select();
  history.replaceState(null, "", link.value);
  try {
    await navigator.clipboard.writeText(link.value);
    $("run-ms").textContent = "link copied";
  } catch {
    $("run-ms").textContent = "copy the link";
  }
};

const ember = loadEmber({
  worker: params.get("worker") !== "0",
  cdn: params.get("cdn") === "1",
  onProgress: ({ stage, message, ms }) => {
    if (stage !== "ready") setStatus(`loading: ${stage}`);
    $("progress").textContent = stage === "ready" ? `ready in ${(ms / 1000).toFixed(2)} s` : message;
  },
});

ember.then(async (py) => {
  await examples;
  window.__ember = { timings: py.timings, versions: py.versions, worker: py.worker,
                     readyAt: performance.now() };
  const v = py.versions;
  $("versions").textContent = `ember ${v.ember} · Python ${v.python} · Pyodide ${v.pyodide} · ` +
    `NumPy ${v.numpy} · ${py.worker ? "in a Web Worker" : "on the page's thread"}`;
  run.disabled = false;
  setStatus("ready");
}, (e) => {
  console.error(e);
  setStatus(`error: ${e.message}`);
  append(`${e.stack ?? e}\n`, "error");
});

async function runCode() {
  if (run.disabled) return;
  const py = await ember;
  run.disabled = true;
  stop.disabled = !py.worker;
  setStatus("running");
  const t0 = performance.now();
  let state = "error";
  try {
    const outcome = await py.runPython(code.value, {
      onStdout: (t) => append(t), onStderr: (t) => append(t, "stderr"),
    });
    if (outcome.ok) {
      state = "ok";
      if (outcome.result !== null) append(`${outcome.result}\n`, "result");
    } else {
      append(outcome.error, "error");
    }
    setStatus("ready");
  } catch (e) {
    append(`${e.message}\n`, "error");
    setStatus(`error: ${e.message}`);
  } finally {
    out.flush();
    const ms = performance.now() - t0;
    $("run-ms").textContent = `ran in ${ms.toFixed(0)} ms`;
    output.dataset.state = state;
    output.dataset.runs = String(Number(output.dataset.runs) + 1);
    run.disabled = false;
    stop.disabled = true;
  }
}

run.onclick = runCode;
stop.onclick = async () => (await ember).interrupt();
$("clear-output").onclick = () => out.clear();
// Tab indents; Esc then Tab (or Shift+Tab) leaves the code box, so the keyboard is not trapped
let escaped = false;
code.addEventListener("keydown", (e) => {
  if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); runCode(); }
  if (e.key === "Tab" && !e.shiftKey && !escaped) {
    e.preventDefault();
    code.setRangeText("    ", code.selectionStart, code.selectionEnd, "end");
  }
  escaped = e.key === "Escape";
});
