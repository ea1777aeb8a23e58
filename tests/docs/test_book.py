"""The ember book (docs/book/*.md, built by `make docs`): every ```python block runs, and the
book builds with `mkdocs build --strict` (no warnings, every internal link and anchor resolves).

Blocks of one page run in order in one namespace, in a fresh temporary folder (files a block
writes stay out of the checkout). A block that cannot run here starts with the line
`# book: skip (REASON)`; each one is compiled (it must stay valid Python) and reported as a
skipped test naming its page, line and reason, so `pytest -rs` lists them all. A block that runs
here but not in the page (the site's Run buttons, web/book.js: PyTorch, files it writes) starts
with `# book: native (REASON)`: it runs here, and the page shows the reason instead of a button.
"""

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import ember

DOCS = Path(__file__).resolve().parents[2] / "docs"
BOOK = DOCS / "book"
FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)
MARK = re.compile(r"#\s*book:")
SKIP = re.compile(r"^#\s*book:\s*skip\s*\((.+)\)\s*$")
NATIVE = re.compile(r"^#\s*book:\s*native\s*\((.+)\)\s*$")  # web/book.js reads the same


def blocks(page):
    """(line of the block's first code line, source, skip reason or None) of each block."""
    text = page.read_text(encoding="utf-8")
    out = []
    for m in FENCE.finditer(text):
        code = m.group(1)
        line = text.count("\n", 0, m.start(1)) + 1
        first = code.split("\n", 1)[0].strip()
        skip = SKIP.match(first)
        marks = len(MARK.findall(code))
        if marks and (marks > 1 or not (skip or NATIVE.match(first))):
            raise AssertionError(f"{page.name}:{line}: a '# book:' mark must be the block's first "
                                 "line and read '# book: skip (the reason)' or "
                                 "'# book: native (the reason)'")
        out.append((line, code, skip.group(1) if skip else None))
    return out


PAGES = sorted(BOOK.glob("*.md"))
SKIPPED = [(p, line, why) for p in PAGES for line, _, why in blocks(p) if why]


def test_the_book_has_code():
    assert sum(1 for p in PAGES for _, _, why in blocks(p) if not why) >= 20


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_page_blocks_run(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    before = ember.default_backend()
    namespace = {"__name__": f"book_{page.stem.replace('-', '_')}"}
    try:
        for line, code, why in blocks(page):
            if why:
                continue
            # line numbers of tracebacks point into the page
            source = "\n" * (line - 1) + code
            exec(compile(source, str(page), "exec"), namespace)  # noqa: S102
    finally:
        ember.set_default_backend(before)


@pytest.mark.parametrize("page,line,why", SKIPPED,
                         ids=[f"{p.name}:{line}" for p, line, _ in SKIPPED])
def test_marked_block(page, line, why):
    # it cannot run here, but it must still be valid Python (top-level await allowed, as in
    # the page and the playground), so that it cannot rot unseen
    code = next(c for at, c, _ in blocks(page) if at == line)
    compile("\n" * (line - 1) + code, str(page), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    pytest.skip(f"{page.name}:{line}: {why}")


def test_marks_are_well_formed():
    for page in PAGES:
        blocks(page)  # raises on a malformed mark


def test_book_builds_strict(tmp_path):
    pytest.importorskip("mkdocs", reason="the docs extra: pip install -e '.[docs]'")
    pytest.importorskip("material", reason="the docs extra: pip install -e '.[docs]'")
    pytest.importorskip("mkdocstrings", reason="the docs extra: pip install -e '.[docs]'")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q",
                        "-f", str(DOCS / "mkdocs.yml"), "-d", str(tmp_path / "book")],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, f"mkdocs build --strict failed:\n{r.stdout}\n{r.stderr}"
    assert (tmp_path / "book" / "index.html").is_file()
    assert (tmp_path / "book" / "api" / "index.html").is_file()


def test_blocks_are_found_with_their_lines_and_marks(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# t\n\n```python\nx = 1\n```\n\ntext\n\n```python\n# book: skip (needs a GPU)"
                    "\ny = 2\n```\n\n```sh\nmake docs\n```\n", encoding="utf-8")
    assert blocks(page) == [(4, "x = 1\n", None),
                            (10, "# book: skip (needs a GPU)\ny = 2\n", "needs a GPU")]
    page.write_text("```python\nx = 1  # book: skip (late)\n```\n", encoding="utf-8")
    with pytest.raises(AssertionError, match="first line"):
        blocks(page)
    page.write_text("```python\n# book: native (needs PyTorch)\nimport torch\n```\n",
                    encoding="utf-8")
    assert blocks(page) == [(2, "# book: native (needs PyTorch)\nimport torch\n", None)]
    page.write_text("```python\n# book: nativ (typo)\nx = 1\n```\n", encoding="utf-8")
    with pytest.raises(AssertionError, match="book: native"):
        blocks(page)
