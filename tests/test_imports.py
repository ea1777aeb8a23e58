"""core/ember has no module-level import cycle: each module can be imported on its own, and a
module's imports say what it stands on (imports inside functions are not counted)."""

import ast
from pathlib import Path

import ember

ROOT = Path(ember.__file__).resolve().parent


def _module(path):
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _graph():
    files = {_module(p): p for p in ROOT.rglob("*.py")}
    graph = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges = set()
        for node in ast.parse(path.read_text()).body:  # module level only
            for imp in ast.walk(node) if isinstance(node, (ast.If, ast.Try)) else [node]:
                if isinstance(imp, ast.Import):
                    edges |= {a.name for a in imp.names if a.name in files}
                elif isinstance(imp, ast.ImportFrom):
                    base = imp.module or ""
                    if imp.level:
                        up = package.split(".")[:len(package.split(".")) - imp.level + 1]
                        base = ".".join(up + ([imp.module] if imp.module else []))
                    for a in imp.names:
                        sub = f"{base}.{a.name}"
                        edges.add(sub if sub in files else base)
        graph[name] = edges & files.keys()
    return graph


def _cycle(graph):
    """One cycle as a list of modules, or None (depth-first search, colours)."""
    state, stack = {}, []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == "open":
                return stack[stack.index(n):] + [n]
            if n not in state and (found := visit(n)):
                return found
        state[m] = "done"
        stack.pop()
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_no_module_level_import_cycle():
    graph = _graph()
    assert len(graph) > 50 and "ember.backend.base" in graph["ember.tensor"]
    assert _cycle(graph) is None, " -> ".join(_cycle(graph))


def test_the_backend_protocol_stands_on_errors_alone():
    # the protocol and the registry import no implementation: those import it
    assert _graph()["ember.backend.base"] <= {"ember.errors", "ember.dtype"}
    assert _graph()["ember.ops.table"] <= {"ember.errors", "ember.dtype", "ember.shape"}


def test_the_checker_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]


def test_import_ember_leaves_what_a_page_does_not_need_at_start():
    # `import ember` is on every page's start-up (web/boot.js): the subpackages and autotune
    # (json, tempfile, pathlib) load on first use, through ember.__getattr__
    import subprocess
    import sys
    code = ("import sys, ember; lazy = ['ember.' + m for m in ('autotune', 'nn', 'optim', "
            "'record', 'train', 'data', 'onnx', 'models', 'backends')] + ['json', 'tempfile']; "
            "print([m for m in lazy if m in sys.modules]); print(ember.autotune.choose.__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(ROOT.parent)})
    assert out.stdout.split() == ["[]", "choose"], out
