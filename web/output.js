// Where a page shows what Python prints (the playground, the book's Run buttons). Writes are
// buffered and reach the element once per animation frame: a DOM node and a scroll (a forced
// layout) per write made the page freeze, quadratically in the lines printed (100,000 lines
// never finished). Each frame's complete lines go into a block of their own, so the browser
// lays out only what is new (appending to one text node re-laid out all of it, every frame);
// the unfinished last line stays in a small tail block that each frame redraws. The element's
// textContent is exactly the text written.
//
//   const out = outputWriter(pre);  out.write(text, cls);  out.flush();  out.clear();
export function outputWriter(element) {
  let pending = []; // [text, cls] not yet shown
  let tail = []; // [text, cls] of the unfinished last line, shown in tailBlock
  let tailBlock = null;
  let frame = 0;

  function flush() {
    if (frame) cancelAnimationFrame(frame);
    frame = 0;
    if (!pending.length) return;
    const chunks = merged([...tail, ...pending]);
    pending = [];
    // split after the last newline: complete lines, then the rest
    let at = chunks.length - 1;
    while (at >= 0 && !chunks[at][0].includes("\n")) at--;
    let done = chunks.slice(0, at + 1);
    tail = chunks.slice(at + 1);
    if (at >= 0) {
      const [text, cls] = done[at];
      const cut = text.lastIndexOf("\n") + 1;
      if (cut < text.length) tail.unshift([text.slice(cut), cls]);
      done = [...done.slice(0, at), [text.slice(0, cut), cls]];
    }
    const follow = element.scrollHeight - element.scrollTop - element.clientHeight < 32;
    tailBlock?.remove();
    if (done.length) element.append(block(done));
    tailBlock = tail.length ? block(tail) : null;
    if (tailBlock) element.append(tailBlock);
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
      tail = [];
      tailBlock = null;
      flush();
      element.textContent = "";
    },
  };
}

function block(chunks) {
  const div = document.createElement("span");
  div.style.display = "block";
  for (const [text, cls] of chunks) {
    const span = document.createElement("span");
    span.className = cls;
    span.textContent = text;
    div.append(span);
  }
  return div;
}

// consecutive chunks of one style joined
function merged(chunks) {
  const out = [];
  for (const [text, cls] of chunks) {
    const last = out[out.length - 1];
    if (last && last[1] === cls) last[0] += text;
    else out.push([text, cls]);
  }
  return out;
}
