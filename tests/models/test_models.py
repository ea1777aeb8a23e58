"""The trained models shipped in the wheel: they load with no network, in eval mode, take
[B, 1, 28, 28] float32 in [0, 1] and give logits [B, 10], and reach their accuracy on the test
sets (printed: run pytest with -s to see it)."""

import os
import subprocess
import sys

import numpy as np
import pytest

import ember
from ember import Tensor, data, models
from ember.backend import NdArray


def accuracy(model, dataset, batch=500):
    x, y = dataset.get_batch(np.arange(len(dataset)))
    correct = 0
    with ember.no_grad():
        for i in range(0, len(y), batch):
            logits = model(Tensor.from_data(x[i:i + batch]))
            correct += int((logits.to_numpy().argmax(axis=1) == y[i:i + batch]).sum())
    return correct / len(y)


@pytest.mark.parametrize("name", models.available())
def test_shipped_files_are_small_and_documented(name):
    path = models.weights_path(name)
    assert path.is_file() and os.path.getsize(path) < 5 * 2**20
    info = models.info(name)
    assert info["dataset"] == name and info["command"].startswith(f"ember train {name}")
    assert float(info["test_accuracy"]) > 0.9 and int(info["train_seconds"]) > 0
    assert info["config"]["channels"] == [32, 64]


@pytest.mark.parametrize("name", models.available())
def test_loads_in_eval_mode_with_the_promised_shapes(name):
    model = models.load(name, backend=NdArray())
    assert not model.training and not model.dropout.training
    x = Tensor.from_data(np.random.default_rng(0).random((3, 1, 28, 28), dtype=np.float32))
    a, b = model(x).to_numpy(), model(x).to_numpy()
    assert a.shape == (3, 10) and a.dtype == np.float32
    np.testing.assert_array_equal(a, b)  # eval: no dropout, running BatchNorm statistics


def test_loading_draws_no_random_numbers():
    # the weights replace every parameter, so ConvNet's random initialisation is skipped
    # (nn.init.skip): in a page, numpy.random's first import is ~0.1 s of the demos' start-up
    code = ("import sys, ember; ember.models.load('mnist'); "
            "print('numpy.random' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False", out.stderr
    ember.seed(0)
    drawn = Tensor.random([3]).to_numpy()
    ember.seed(0)
    models.load("mnist")
    np.testing.assert_array_equal(Tensor.random([3]).to_numpy(), drawn)


def test_unknown_name():
    with pytest.raises(ValueError, match="available: mnist, fashion-mnist"):
        models.load("cifar10")


def test_mnist_model_accuracy(mnist_ready):
    acc = accuracy(models.load("mnist"), data.MNIST("test"))
    print(f"\nember.models.load('mnist'): {acc * 100:.2f}% on the MNIST test split "
          f"(2,004 digits)")
    assert acc >= 0.98


def test_fashion_mnist_model_accuracy(fashion_ready):
    acc = accuracy(models.load("fashion-mnist"), data.FashionMNIST("test"))
    print(f"\nember.models.load('fashion-mnist'): {acc * 100:.2f}% on the official "
          f"Fashion-MNIST test set (10,000 images)")
    assert acc >= 0.91
