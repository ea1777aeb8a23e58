"""ember's command line. `ember bench` runs the benchmark suite of a source checkout; the other
commands of API.md (demo, site, train) arrive with their issues."""

import argparse
import importlib.util
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


def _positive(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


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
