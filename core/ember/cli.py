"""ember's command line. `ember bench` runs the benchmark suite of a source checkout; `ember site`
builds the static browser site and `ember demo` builds and serves it (core/ember/site.py);
`ember train` trains the models of ember.models (core/ember/train/command.py); and `ember export`
writes one as ONNX (ember.onnx.save)."""

import argparse
import importlib.util
import json
import signal
import sys
from pathlib import Path

import ember


def _bench_dir():
    """bench/ of the current directory, else of the source tree an editable install points at."""
    for root in (Path.cwd(), Path(ember.__file__).resolve().parents[2]):
        if (root / "bench" / "runner.py").is_file():
            return root / "bench"
    return None


def _load_runner(bench_dir):
    spec = importlib.util.spec_from_file_location("ember_bench.runner", bench_dir / "runner.py")
    runner = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = runner
    spec.loader.exec_module(runner)
    return runner


def _bench(args):
    bench_dir = _bench_dir()
    if bench_dir is None:
        print("ember bench: no bench/ folder found (looked in ./bench and beside the ember "
              "sources). The benchmarks live in the source repository, not in the wheel: run "
              "`ember bench` from a checkout of ember (e.g. with `pip install -e .`).",
              file=sys.stderr)
        return 2
    runner = _load_runner(bench_dir)
    try:
        return runner.main(bench_dir, names=args.names, json_path=args.json,
                           repeat=args.repeat, quick=args.quick)
    except runner.UnknownBenchmark as e:
        print(f"ember bench: {e.args[0]}", file=sys.stderr)
        return 2


def _site(args):
    from . import site
    try:
        info = site.build_site(args.out, fast_start=args.fast_start,
                               log=lambda m: print(f"ember site: {m}", file=sys.stderr))
    except (site.SiteError, OSError) as e:
        print(f"ember site: {e}", file=sys.stderr)
        return 2 if isinstance(e, site.FolderError) else 1  # 2: a refused --out
    print(f"built {args.out}: ember {info['ember']} on Pyodide {info['pyodide']}; "
          f"start-up: {', '.join(info['techniques']) or 'stock files'}")
    return 0


def _demo(args):
    from . import site
    out = Path(args.out) if args.out else None
    try:
        if out is None:
            out = site.source_root() / "build" / "site"
        if not args.no_build:
            site.build_site(out, fast_start=args.fast_start,
                            log=lambda m: print(f"ember demo: {m}", file=sys.stderr))
        elif not (out / "index.html").is_file():
            raise site.SiteError(f"--no-build, but {out} holds no built site")
        server = site.SiteServer(out, port=args.port, verbose=args.verbose)
    except (site.SiteError, OSError) as e:
        print(f"ember demo: {e}", file=sys.stderr)
        return 2 if isinstance(e, site.FolderError) else 1
    print(f"ember demo: serving {out} at {server.url} (the playground: {server.url}playground/)"
          "; Ctrl-C stops it", flush=True)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # `kill` stops it as Ctrl-C does
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("\nember demo: stopped", file=sys.stderr)
    finally:
        server.server_close()
    return 0


def _train(args):
    from .train import command
    return command.run(args)


def _export(args):
    import numpy as np

    from . import models, onnx, record
    from .tensor import Tensor
    try:
        if args.model in models.available():
            model = models.load(args.model)
        elif Path(args.model).is_file():  # weights as `ember train` writes them
            _, meta = record.read_safetensors(args.model)
            model = models.ConvNet(**json.loads(meta.get("config", "{}")))
            record.load(model, args.model)
            model.eval()
        else:
            print(f"ember export: {args.model!r} is neither a shipped model "
                  f"({', '.join(models.available())}) nor a weights file", file=sys.stderr)
            return 2
        x = np.random.default_rng(0).random((args.batch, model.config["in_channels"],
                                             model.config["image_size"],
                                             model.config["image_size"]), dtype=np.float32)
        want = model(Tensor.from_data(x)).to_numpy()
        onnx.save(model, args.out, Tensor.from_data(x))
        got = onnx.load(args.out)(x).to_numpy()  # read back: the file gives the model's outputs
    except (OSError, ValueError, TypeError) as e:  # (onnx's and record's errors are ValueErrors)
        print(f"ember export: {e}", file=sys.stderr)
        return 1
    print(f"wrote {args.out}: {args.model} as ONNX (opset 17), float32 {list(x.shape)} -> "
          f"{list(want.shape)}; read back by ember.onnx.load: max |diff| "
          f"{float(np.abs(got - want).max()):.2g}")
    return 0


def int_range(low, high=None):
    """An argparse type: an integer in [low, high]."""
    def integer(text):  # (argparse names it in "invalid integer value")
        value = int(text)
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(
                f"must be at least {low}" + (f" and at most {high}" if high is not None else "")
                + f", got {value}")
        return value
    return integer


_positive = int_range(1)


def build_parser():
    parser = argparse.ArgumentParser(
        prog="ember", description="ember: a deep-learning framework after Rust's Burn.")
    parser.add_argument("--version", action="version", version=f"ember {ember.__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    bench = commands.add_parser(
        "bench", help="the benchmark suite: a table on stdout, JSON with --json FILE",
        description="Time ember against its references (NumPy, ...). NAME is a benchmark "
                    "module (e.g. ndarray_vs_numpy) or MODULE.NAME; none: all of them. "
                    "Ratios are printed, never asserted.")
    bench.add_argument("names", nargs="*", metavar="NAME", help="benchmarks to run (default: all)")
    bench.add_argument("--json", metavar="FILE", help="also write the results and machine info")
    bench.add_argument("--repeat", type=_positive, metavar="N",
                       help="samples per measurement (default 15; 3 with --quick)")
    bench.add_argument("--quick", action="store_true",
                       help="few, short samples: a smoke run, not a measurement")
    bench.set_defaults(run=_bench)

    site = commands.add_parser(
        "site", help="build the static site: Pyodide + numpy + the ember wheel + web/ + demos/",
        description="Build ember's static browser site into DIR (a new or empty folder, or an "
                    "earlier build, which is replaced once the new one is complete): a self-hosted "
                    "Pyodide with numpy and the ember wheel, web/ (ember.js), the pages of "
                    "demos/ and /playground/. Downloads are cached in .cache/ember-site/.")
    site.add_argument("--out", required=True, metavar="DIR", help="where to build the site")
    site.add_argument("--no-fast-start", dest="fast_start", action="store_false",
                      help="ship the stock files (no precompiled .pyc): for comparisons")
    site.set_defaults(run=_site)

    demo = commands.add_parser(
        "demo", help="build the site into build/site and serve it on 127.0.0.1",
        description="Build the static site (as `ember site`) and serve it on 127.0.0.1 with "
                    "the headers workers need (COOP/COEP). Ctrl-C stops it.")
    demo.add_argument("--port", type=int_range(0, 65535), default=8000,
                      help="port (default 8000; 0: any free)")
    demo.add_argument("--out", metavar="DIR", help="site folder (default: build/site)")
    demo.add_argument("--no-build", action="store_true", help="serve the site already built")
    demo.add_argument("--no-fast-start", dest="fast_start", action="store_false",
                      help="ship the stock files (no precompiled .pyc)")
    demo.add_argument("--verbose", action="store_true", help="log every request")
    demo.set_defaults(run=_demo)

    export = commands.add_parser(
        "export", help="write a shipped model (or `ember train`'s weights) as an ONNX file",
        description="Write MODEL (mnist, fashion-mnist, or a .safetensors file that `ember "
                    "train` wrote) as an ONNX file (ember.onnx.save, opset 17) that onnxruntime, "
                    "PyTorch's tools or ember.onnx.load read; it is read back once to check it.")
    export.add_argument("model", metavar="MODEL", help="mnist, fashion-mnist or a weights file")
    export.add_argument("out", metavar="OUT", help="the .onnx file to write")
    export.add_argument("--batch", type=_positive, default=1,
                        help="the batch size of the model's input (default 1)")
    export.set_defaults(run=_export)

    from .train.command import add_arguments as _train_arguments
    train = commands.add_parser(
        "train", help="train the ConvNet of ember.models on mnist or fashion-mnist",
        description="Train ember.models.ConvNet with a live dashboard; Ctrl-C (or q) stops "
                    "after the current step with a checkpoint, --resume continues.")
    _train_arguments(train)
    train.set_defaults(run=_train)
    return parser


def main(argv=None):
    """Entry point of the `ember` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
