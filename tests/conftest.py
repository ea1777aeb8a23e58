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
