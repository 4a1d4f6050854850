"""Small helpers for the autograd tests: float64 leaves and a gradcheck that fails the test loudly."""
import numpy as np

import autograd as ag
from autograd import Tensor


def leaf(array, requires_grad=True):
    """A float64 leaf tensor (gradcheck needs float64)."""
    return Tensor(np.asarray(array, dtype=np.float64), requires_grad=requires_grad)


def rand(rng, *shape, low=-2.0, high=2.0, requires_grad=True):
    return leaf(rng.uniform(low, high, size=shape), requires_grad)


def positive(rng, *shape, low=0.5, high=2.0, requires_grad=True):
    return leaf(rng.uniform(low, high, size=shape), requires_grad)


def away_from_zero(rng, *shape, margin=0.3, scale=2.0, requires_grad=True):
    """Values with |x| >= margin, for ops with a kink or pole at 0 (relu, division)."""
    magnitude = rng.uniform(margin, scale, size=shape)
    sign = np.where(rng.random(size=shape) < 0.5, -1.0, 1.0)
    return leaf(magnitude * sign, requires_grad)


def check(fn, *inputs, **kwargs):
    """Run gradcheck and make the assertion explicit (gradcheck raises on a mismatch, returns True otherwise)."""
    assert ag.gradcheck(fn, list(inputs), **kwargs) is True


def unbroadcast_reference(grad, shape):
    """Brute force: each input element collects the output gradient of every position it was broadcast to.

    Written independently of the engine's own unbroadcast (an explicit loop over output positions).
    """
    out = np.zeros(shape)
    offset = grad.ndim - len(shape)
    for index in np.ndindex(grad.shape):
        source = tuple(0 if n == 1 else i for i, n in zip(index[offset:], shape))
        out[source] += grad[index]
    return out
