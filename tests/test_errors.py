"""ember.errors: one base class, and each error is also the builtin a Python user catches."""

import pytest

import ember
from ember import errors


@pytest.mark.parametrize("cls, builtin", [
    (ember.ShapeError, ValueError),
    (ember.DTypeError, TypeError),
    (ember.BackendError, RuntimeError),
])
def test_each_error_is_an_ember_error_and_a_builtin(cls, builtin):
    assert issubclass(cls, ember.EmberError)
    assert issubclass(cls, builtin)
    assert issubclass(ember.EmberError, Exception)


def test_top_level_names_are_the_module_classes():
    assert ember.EmberError is errors.EmberError
    assert ember.ShapeError is errors.ShapeError
    assert ember.DTypeError is errors.DTypeError
    assert ember.BackendError is errors.BackendError


def test_errors_are_distinct():
    assert not issubclass(ember.ShapeError, ember.DTypeError)
    assert not issubclass(ember.DTypeError, ember.ShapeError)
    assert not issubclass(ember.BackendError, (ember.ShapeError, ember.DTypeError))


@pytest.mark.parametrize("action, builtin", [
    (lambda: ember.Tensor.ones([2, 3]).reshape(4), ValueError),
    (lambda: ember.Tensor.ones([2]).cast("complex64"), TypeError),
    (lambda: ember.Tensor.ones([2]).backward(), RuntimeError),
])
def test_raised_errors_are_caught_by_builtin_handlers(action, builtin):
    with pytest.raises(builtin) as info:
        action()
    assert isinstance(info.value, ember.EmberError)
