// Where a page shows what Python prints (the playground, the book's Run buttons). Writes are
// buffered and reach the element once per animation frame, appended to the text node of the
// last run of the same style: a DOM node and a scroll (a forced layout) per write made the page
// freeze, quadratically in the lines printed (100,000 lines never finished).
//
//   const out = outputWriter(pre);  out.write(text, cls);  out.flush();  out.clear();
export function outputWriter(element) {
  let pending = []; // [text, cls] not yet in the element
  let frame = 0;

  function flush() {
    if (frame) cancelAnimationFrame(frame);
    frame = 0;
    if (!pending.length) return;
    const follow = element.scrollHeight - element.scrollTop - element.clientHeight < 32;
    for (const [text, cls] of merged(pending)) {
      const last = element.lastChild;
      if (last?.nodeType === Node.ELEMENT_NODE && last.className === cls && last.firstChild) {
        last.firstChild.appendData(text);
      } else {
        const span = document.createElement("span");
        span.className = cls;
        span.textContent = text;
        element.append(span);
      }
    }
    pending = [];
    if (follow) element.scrollTop = element.scrollHeight; // the reader may have scrolled up
  }

  return {
    write(text, cls = "") {
      if (!text) return;
      pending.push([text, cls]);
      if (!frame) frame = requestAnimationFrame(flush);
    },
    flush,
    clear() {
      pending = [];
      flush();
      element.textContent = "";
    },
  };
}

// consecutive chunks of one style joined: one append each
function merged(chunks) {
  const out = [];
  for (const [text, cls] of chunks) {
    const last = out[out.length - 1];
    if (last && last[1] === cls) last[0] += text;
    else out.push([text, cls]);
  }
  return out;
}
