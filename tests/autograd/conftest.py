"""Fixtures shared by the autograd tests: every test starts and ends with the engine's global settings untouched."""
import numpy as np
import pytest

import autograd as ag


@pytest.fixture(autouse=True)
def _restore_engine_globals():
    """A test that changes the default dtype or leaves no_grad switched on must not leak it into the next."""
    dtype = ag.get_default_dtype()
    grad_enabled = ag.is_grad_enabled()
    yield
    ag.set_default_dtype(dtype)
    assert ag.is_grad_enabled() == grad_enabled, "a test left gradient recording switched off"


@pytest.fixture
def float64_default():
    """Make Python numbers and lists float64 for one test, then restore the previous default."""
    previous = ag.get_default_dtype()
    ag.set_default_dtype(np.float64)
    yield
    ag.set_default_dtype(previous)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
