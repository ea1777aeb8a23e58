// The playground's code editor: CodeMirror 6 (self-hosted under web/vendor/, resolved by the
// page's import map) over the textarea #code, which stays the value behind it. Every edit is
// written back to the textarea; an `input` event on the textarea (a script or a test setting
// its value) is read into the editor. Escape then Tab leaves the editor (CodeMirror's own tab
// focus mode), so Tab can indent without trapping the keyboard.
import { EditorState } from "@codemirror/state";
import {
  EditorView, drawSelection, highlightActiveLine, highlightSpecialChars, keymap, lineNumbers,
} from "@codemirror/view";
import { defaultKeymap, history, historyKeymap, indentWithTab } from "@codemirror/commands";
import {
  HighlightStyle, bracketMatching, indentOnInput, indentUnit, syntaxHighlighting,
} from "@codemirror/language";
import { python } from "@codemirror/lang-python";
import { tags as t } from "@lezer/highlight";

// colours with at least 4.5:1 contrast on the editor's white (WCAG AA)
const highlight = HighlightStyle.define([
  { tag: t.keyword, color: "#7a1fa2" },
  { tag: [t.string, t.special(t.string)], color: "#a31515" },
  { tag: [t.number, t.bool, t.null], color: "#116644" },
  { tag: t.comment, color: "#5f6368", fontStyle: "italic" },
  { tag: [t.function(t.definition(t.variableName)), t.definition(t.className)], color: "#0b57d0" },
  { tag: [t.operator, t.punctuation], color: "#3c3c3c" },
  { tag: t.invalid, color: "#b00020" },
]);

const theme = EditorView.theme({
  "&": { fontSize: "13px", border: "1px solid #c4c4c8", borderRadius: "4px", background: "#fff" },
  "&.cm-focused": { outline: "2px solid #0b57d0", outlineOffset: "1px" },
  ".cm-scroller": { fontFamily: "ui-monospace, Menlo, Consolas, monospace", lineHeight: "1.45" },
  ".cm-gutters": { background: "#f3f3f5", color: "#55555a", borderRight: "1px solid #ddd" },
  ".cm-activeLine": { background: "#f2f6fc" },
});

export function attachEditor(textarea, { onRun, label }) {
  const view = new EditorView({
    state: EditorState.create({
      doc: textarea.value,
      extensions: [
        lineNumbers(), highlightSpecialChars(), history(), drawSelection(), indentOnInput(),
        bracketMatching(), highlightActiveLine(), python(), syntaxHighlighting(highlight),
        indentUnit.of("    "), EditorState.tabSize.of(4), theme,
        keymap.of([{ key: "Mod-Enter", run: () => { onRun(); return true; } },
                   indentWithTab, ...defaultKeymap, ...historyKeymap]),
        // (tabindex: axe counts the scroller's content as focusable only with one)
        EditorView.contentAttributes.of({ "aria-label": label, "aria-describedby": "code-help",
                                          tabindex: "0" }),
        EditorView.updateListener.of((u) => {
          if (u.docChanged) textarea.value = u.state.doc.toString();
        }),
      ],
    }),
  });
  textarea.after(view.dom);
  textarea.addEventListener("input", () => {
    if (textarea.value !== view.state.doc.toString()) {
      view.dispatch({ changes: { from: 0, to: view.state.doc.length, insert: textarea.value } });
    }
  });
  textarea.classList.add("behind-editor");
  textarea.tabIndex = -1;
  textarea.setAttribute("aria-hidden", "true");
  return view;
}
