"""The kernels' build and its safety checks (CPython: the .wasm is only inspected here; the
Pyodide conformance run in e2e/ executes it against NumPy)."""

import pytest

from ember.backends.wasm import build


@pytest.fixture(scope="module")
def modules():
    try:
        return build.build(log=lambda m: None)
    except build.KernelBuildError as e:
        if "no clang" in str(e):
            pytest.skip(str(e))
        raise


def test_every_variant_builds_and_passes_the_checks(modules):
    assert [p.name for p in modules] == [f"ember_kernels_{v}.wasm" for v in build.VARIANTS]
    for path in modules:
        info = build.check(path.read_bytes(), path.name)
        assert info["data"] == 0 and info["globals"] == 0 and info["elements"] == 0
        assert info["dylink"]
        assert info["memory"] == {"initial": 0, "maximum": None, "shared": False}
        assert set(build.EXPORTS) <= set(info["exports"])


def test_build_is_reproducible(modules):
    before = [p.read_bytes() for p in modules]
    after = [p.read_bytes() for p in build.build(force=True, log=lambda m: None)]
    assert before == after


# ---- the checks refuse what could write memory the kernels do not own -----------------------
def _leb(n):
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _name(s):
    return _leb(len(s)) + s.encode()


def _section(sid, body):
    return bytes([sid]) + _leb(len(body)) + body


def _module(imports=(), globals_=0, data=0, exports=build.EXPORTS, dylink=True,
            memory=b"\x00\x00"):
    parts = [b"\0asm\1\0\0\0"]
    if dylink:
        parts.append(_section(0, _name("dylink.0")))
    entries = [_name("env") + _name("memory") + b"\x02" + memory]
    for kind, field in imports:
        entries.append(_name("env") + _name(field) + bytes([kind]) +
                       (b"\x7f\x00" if kind == 3 else b"\x00"))
    parts.append(_section(2, _leb(len(entries)) + b"".join(entries)))
    if globals_:
        parts.append(_section(6, _leb(globals_) + b"\x7f\x01\x41\x00\x0b" * globals_))
    parts.append(_section(7, _leb(len(exports)) + b"".join(
        _name(e) + b"\x00" + _leb(i) for i, e in enumerate(exports))))
    if data:
        parts.append(_section(11, _leb(data) + b"\x00\x41\x00\x0b\x01\x00" * data))
    return b"".join(parts)


def test_a_clean_module_passes():
    info = build.check(_module(imports=[(3, "__memory_base"), (3, "__table_base")]))
    assert info["exports"] == list(build.EXPORTS)


@pytest.mark.parametrize("module, says", [
    (_module(data=1), "1 data segment"),
    (_module(globals_=1), "global(s) of its own"),
    (_module(imports=[(3, "__stack_pointer")]), "imports the global env.__stack_pointer"),
    (_module(imports=[(0, "memcpy")]), "imports the function env.memcpy"),
    (_module(dylink=False), "not a side module"),
    (_module(exports=("sgemm",)), "does not export sgemm_work_size"),
    (_module(memory=b"\x03\x00\x80\x80\x04"), "shared"),
    (_module(memory=b"\x01\x00\x10"), "maximum"),
    (_module(memory=b"\x00\xc1\x02"), "320 pages"),
])
def test_the_checks_refuse(module, says):
    with pytest.raises(build.KernelBuildError, match="refusing") as e:
        build.check(module, "test.wasm")
    assert says in str(e.value)


def test_not_wasm_or_truncated():
    with pytest.raises(build.KernelBuildError, match="not a WebAssembly"):
        build.check(b"\x7fELF....")
    with pytest.raises(build.KernelBuildError, match="truncated"):
        build.check(_module()[:-3])


def test_missing_compiler_says_what_to_install(monkeypatch):
    monkeypatch.setattr(build.shutil, "which", lambda name: None)
    with pytest.raises(build.KernelBuildError, match="clang-19 and lld-19"):
        build.compiler()
