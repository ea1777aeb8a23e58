"""Every page of the site scanned by axe-core (npm, fetched into the site's cache at the version
below and injected by this test: nothing comes from elsewhere) once it is ready; a "serious" or
"critical" violation fails the page's test, with each rule, its help text and the elements it
found. Offline as every e2e test (conftest.py)."""

import tarfile

import pytest

from ember import site

AXE = "axe-core@4.14.1"
PAGES = ["", "demos/mnist/", "demos/image-classification/", "demos/train/", "playground/",
         "book/", "book/tensors/", "examples/browser-training/", "demos/pyscript/"]
READY = """() => { const s = document.querySelector('#status');
  return !s || /^(ready|error)/.test(s.textContent.trim()); }"""
SCAN = """async () => {
  const r = await axe.run(document, { resultTypes: ["violations"] });
  return r.violations.filter(v => v.impact === "serious" || v.impact === "critical")
    .map(v => ({ id: v.id, impact: v.impact, help: v.help,
                 nodes: v.nodes.slice(0, 6).map(n => [n.target.join(" "), n.failureSummary]) }));
}"""


@pytest.fixture(scope="module")
def axe_source():
    tgz = site.npm_pack(AXE, site.cache_dir(site.source_root()))
    with tarfile.open(tgz) as tar:
        return tar.extractfile("package/axe.min.js").read().decode()


def scan(page, path, axe_source):
    page.goto(page.base + path)
    page.wait_for_load_state("load")
    page.wait_for_function(READY)
    page.add_script_tag(content=axe_source)
    return page.evaluate(SCAN)


def describe(violations):
    return "\n".join(f"{v['impact']} {v['id']}: {v['help']}\n" + "\n".join(
        f"    {target}: {summary}" for target, summary in v["nodes"]) for v in violations)


@pytest.mark.parametrize("width", [1280, 390])  # (at 390 px more boxes scroll: keyboard access)
@pytest.mark.parametrize("path", PAGES)
def test_no_serious_accessibility_violations(page, path, width, axe_source):
    page.set_viewport_size({"width": width, "height": 844})
    violations = scan(page, path, axe_source)
    assert not violations, f"/{path} at {width} px:\n{describe(violations)}"


def test_the_playground_after_a_run_and_with_the_editor_focused(page, axe_source):
    """What a scan of the fresh page cannot see: long output (a scrolled region), the editor
    focused, the share link shown."""
    from conftest import run_code
    scan(page, "playground/", axe_source)
    run_code(page, "for i in range(300):\n    print('line', i)\n")
    page.click("#share")
    page.click(".cm-content")
    violations = page.evaluate(SCAN)
    assert not violations, f"/playground/ after a run:\n{describe(violations)}"
