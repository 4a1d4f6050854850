"""autograd.seeded: a block with random streams of its own, every device's, leaving the caller's seed and streams."""
import numpy as np
import pytest

import autograd as ag
from autograd import backend

from ._helpers import assert_streams_untouched


def test_a_seeded_block_draws_as_after_manual_seed():
    ag.manual_seed(3)
    expected = ag.randn(5).numpy(), ag.rand(2).numpy()
    ag.manual_seed(11)
    with ag.seeded(3):
        got = ag.randn(5).numpy(), ag.rand(2).numpy()
    for e, g in zip(expected, got, strict=True):
        np.testing.assert_array_equal(g, e)


def test_a_seeded_block_leaves_the_callers_seed_and_every_device_stream(monkeypatch):
    def block():
        with ag.seeded(0):
            ag.randn(8)
            backend.generator("cuda").standard_normal(8)  # a device the caller has not drawn on yet
            ag.manual_seed(5)  # reseeding inside stays inside
            ag.randn(3)
    assert_streams_untouched(block, monkeypatch)


def test_the_callers_streams_come_back_when_the_block_raises(monkeypatch):
    def block():
        with pytest.raises(RuntimeError, match="inside"), ag.seeded(0):
            ag.randn(8)
            raise RuntimeError("inside")
    assert_streams_untouched(block, monkeypatch)
