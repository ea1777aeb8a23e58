"""Build and check ember's WebAssembly kernels (kernels.c -> ember_kernels_<variant>.wasm).

`python -m ember.backends.wasm.build` (what `make kernels` runs) and `ember site` (before it
packs the wheel) write the .wasm files beside this file; they are build outputs (gitignored)
that the wheel carries as artifacts. Natively nothing loads them.

Debian's clang-19 + lld-19 (.ci/deps installs them) compile kernels.c twice:
- simd128: SIMD128, which every browser and Node 20 run;
- relaxed: relaxed SIMD (fused multiply-add, a larger tile), chosen at load time where the
  engine compiles it (Chromium does; Node 20 does not).
Both are Emscripten-style side modules (dylink.0), so that Pyodide's own dynamic loader links
them into its memory and `ctypes.CDLL` calls them (see __init__.py for why no JS glue).

A kernel that wrote outside its arguments would corrupt Pyodide's heap silently (a default
link once placed a shadow stack inside Pyodide's static data). `check` therefore refuses a
module that has data segments, defines or imports a global other than the loader's two
immutable bases, or imports anything but memory; and it must export the kernels.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "kernels.c"
VARIANTS = {"relaxed": ["-mrelaxed-simd"], "simd128": []}
EXPORTS = ("sgemm", "sgemm_work_size", "sgemm_mr", "sgemm_nr", "sgemm_kc", "sgemm_mc",
           "copy_strided", "max_pool2d_indices", "take_f32", "select_f32",
           "compare_f32", "rows_f32", "conv2d_winograd_f32", "conv2d_winograd_work_size",
           "run_program")
CLANGS = ("clang-19", "clang")
FLAGS = ["--target=wasm32", "-O3", "-msimd128", "-mbulk-memory", "-ffreestanding", "-nostdlib",
         "-fno-builtin", "-fPIC", "-fvisibility=hidden", "-shared", "-Wall", "-Werror",
         "-Wl,--experimental-pic", "-Wl,--no-entry", "-Wl,--stack-first", "-Wl,-z,stack-size=0",
         "-Wl,--no-export-dynamic"]
# what a side module may import besides its memory: the loader's two immutable bases (where its
# data and function-table entries would go; ours has neither) and the shared function table
# (imported by every PIC module; ours puts nothing in it: no element segments)
ALLOWED = {(3, "__memory_base"), (3, "__table_base"), (1, "__indirect_function_table")}
# Pyodide 0.27.7 creates WebAssembly.Memory({initial: 320, maximum: 65536}), not shared: an
# importing module must not ask for more at the start, nor declare another maximum
PYODIDE_INITIAL_PAGES = 320


class KernelBuildError(RuntimeError):
    """The kernels cannot be built or failed a check; the message says what to do."""


def path(variant):
    return HERE / f"ember_kernels_{variant}.wasm"


def compiler():
    for name in (os.environ.get("EMBER_CLANG"), *CLANGS):
        if name and shutil.which(name):
            return name
    raise KernelBuildError("no clang found to build the WebAssembly kernels (clang-19 and lld-19 "
                           "from Debian: `bash .ci/deps` as root, or set EMBER_CLANG)")


def build(force=False, log=print):
    """Compile every variant that is missing or older than kernels.c; check each; their paths."""
    out = []
    for variant, extra in VARIANTS.items():
        target = path(variant)
        if force or not target.is_file() or target.stat().st_mtime < SOURCE.stat().st_mtime:
            log(f"building {target.name}")
            tmp = target.with_suffix(".tmp")
            cmd = [compiler(), *FLAGS, *extra, "-o", str(tmp), str(SOURCE)]
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode:
                tmp.unlink(missing_ok=True)
                hint = " (relaxed SIMD needs clang-19 + lld-19)" if extra else ""
                raise KernelBuildError(f"building {target.name} failed{hint}: {' '.join(cmd)}\n"
                                       f"{done.stdout[-2000:]}{done.stderr[-2000:]}")
            try:
                check(tmp.read_bytes(), target.name)
            except KernelBuildError:
                tmp.unlink()
                raise
            tmp.replace(target)
        else:
            check(target.read_bytes(), target.name)
        out.append(target)
    return out


# ---- reading a .wasm (just the sections the checks need) -----------------------------------
def _uleb(data, i):
    value = shift = 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, i


def _name(data, i):
    n, i = _uleb(data, i)
    return data[i:i + n].decode(), i + n


def sections(data):
    """[(id, custom name or None, payload bytes)] of a WebAssembly binary."""
    if data[:8] != b"\0asm\1\0\0\0":
        raise KernelBuildError("not a WebAssembly (version 1) binary")
    out, i = [], 8
    while i < len(data):
        sid = data[i]
        size, i = _uleb(data, i + 1)
        body = data[i:i + size]
        name = None
        if sid == 0:
            name, start = _name(body, 0)
            body = body[start:]
        out.append((sid, name, body))
        i += size
    return out


def inspect(data):
    try:
        return _inspect(data)
    except (IndexError, UnicodeDecodeError):
        raise KernelBuildError("a truncated or malformed WebAssembly binary") from None


def _inspect(data):
    """{'imports': [(module, name, kind)], 'exports': [name], 'globals': n, 'data': n,
    'elements': n, 'dylink': bool} (kind: 0 func, 1 table, 2 memory, 3 global)."""
    info = {"imports": [], "exports": [], "globals": 0, "data": 0, "elements": 0,
            "dylink": False}
    for sid, name, body in sections(data):
        if sid == 0 and name == "dylink.0":
            info["dylink"] = True
        elif sid == 2:  # imports
            count, i = _uleb(body, 0)
            for _ in range(count):
                module, i = _name(body, i)
                field, i = _name(body, i)
                kind = body[i]
                i += 1
                if kind == 0:
                    _, i = _uleb(body, i)
                elif kind == 1:
                    i += 1
                    flags, i = _uleb(body, i + 0)
                    _, i = _uleb(body, i)
                    if flags & 1:
                        _, i = _uleb(body, i)
                elif kind == 2:
                    flags, i = _uleb(body, i)
                    initial, i = _uleb(body, i)
                    maximum = None
                    if flags & 1:
                        maximum, i = _uleb(body, i)
                    info["memory"] = {"initial": initial, "maximum": maximum,
                                      "shared": bool(flags & 2)}
                elif kind == 3:
                    i += 2
                info["imports"].append((module, field, kind))
        elif sid == 6:
            info["globals"] = _uleb(body, 0)[0]
        elif sid == 9:
            info["elements"] = _uleb(body, 0)[0]
        elif sid == 11:
            info["data"] = _uleb(body, 0)[0]
        elif sid == 12:
            info["data"] = max(info["data"], _uleb(body, 0)[0])
        elif sid == 7:
            count, i = _uleb(body, 0)
            for _ in range(count):
                field, i = _name(body, i)
                _, i = _uleb(body, i + 1)
                info["exports"].append(field)
    return info


def check(data, what="the kernel module"):
    """Refuse a module that could write memory it does not own, or lacks a kernel."""
    info = inspect(data)
    problems = []
    if info["data"]:
        problems.append(f"{info['data']} data segment(s)")
    if info["globals"]:
        problems.append(f"{info['globals']} global(s) of its own (a stack pointer?)")
    if info["elements"]:
        problems.append(f"{info['elements']} element segment(s) (function-table entries)")
    for module, field, kind in info["imports"]:
        if kind != 2 and (kind, field) not in ALLOWED:
            what = ("function", "table", "memory", "global")[kind]
            problems.append(f"imports the {what} {module}.{field}")
    memory = info.get("memory")
    if memory is None:
        problems.append("does not import its memory")
    elif (memory["shared"] or memory["initial"] > PYODIDE_INITIAL_PAGES
          or memory["maximum"] not in (None, 65536)):
        problems.append(f"declares its memory as {memory}: Pyodide's is not shared, starts at "
                        f"{PYODIDE_INITIAL_PAGES} pages and has no maximum below 65536")
    if not info["dylink"]:
        problems.append("is not a side module (no dylink.0 section)")
    missing = [e for e in EXPORTS if e not in info["exports"]]
    if missing:
        problems.append(f"does not export {', '.join(missing)}")
    if problems:
        raise KernelBuildError(f"{what}: refusing it, it " + "; ".join(problems) +
                               " (kernels.c must use no static data, no globals and no stack)")
    return info


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        for target in build(force="--force" in argv):
            info = inspect(target.read_bytes())
            print(f"{target.name}: {target.stat().st_size} bytes, exports "
                  f"{', '.join(info['exports'])}; no data, no globals, no stack")
    except KernelBuildError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
