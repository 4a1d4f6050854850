"""autograd.seeded: a block with random streams of its own, every device's, leaving the caller's seed and streams;
the seeds it and manual_seed take, and dropout's draws in every float dtype."""
import re

import numpy as np
import pytest

import autograd as ag
from autograd import Tensor, backend

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


@pytest.mark.parametrize("seed", [-1, 1.5, "a", True, None, 2 ** 128])
def test_a_seeded_block_checks_its_seed_as_manual_seed_does(seed):
    """seeded(-1) failed at the block's first draw in NumPy's words, seeded(None) drew from the OS, and seeded(True)
    and seeded(2**128) took seeds manual_seed refuses."""
    for call, who in ((lambda: ag.manual_seed(seed), "manual_seed"), (lambda: ag.seeded(seed).__enter__(), "seeded")):
        with pytest.raises(ValueError, match=rf"^{who}: a seed is an integer from 0 up to 2\*\*128 - 1 \(NumPy's "
                                             rf"generators take no negative one\), got {re.escape(repr(seed))}$"):
            call()


def test_numpy_integer_seeds_draw_as_python_ones():
    for seed in (np.int64(5), np.uint64(5)):
        with ag.seeded(seed):
            got = ag.randn(4).numpy()
        with ag.seeded(5):
            np.testing.assert_array_equal(got, ag.randn(4).numpy())


def test_dropout_draws_a_float16_mask_as_float32_draws_it():
    """The generators draw float32 or float64 only: float16 dropout failed with NumPy's 'Unsupported dtype'."""
    x = np.linspace(1, 2, 64)
    with ag.seeded(4):
        half = ag.dropout(Tensor(x.astype(np.float16)), 0.5)
    with ag.seeded(4):
        single = ag.dropout(Tensor(x.astype(np.float32)), 0.5)
    assert half.dtype == np.float16 and 10 < np.count_nonzero(half.numpy()) < 54
    np.testing.assert_array_equal(half.numpy() == 0, single.numpy() == 0)
    np.testing.assert_array_equal(half.numpy(), (x.astype(np.float16) * np.float16(2)) * (single.numpy() != 0))


@pytest.mark.parametrize("p, error", [(True, ValueError), ("0.5", TypeError), (None, TypeError)])
def test_dropout_refuses_a_p_that_is_not_a_probability(p, error):
    """dropout(x, True) dropped everything; dropout(x, "0.5") failed comparing an int with a str."""
    with pytest.raises(error, match=rf"^dropout: p must be a probability in \[0, 1\], got {re.escape(repr(p))}$"):
        ag.dropout(Tensor([1.0, 2.0]), p)
