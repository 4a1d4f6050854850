"""Small helpers for the autograd tests: float64 leaves, a gradcheck that fails the test loudly, what a call
does to the random streams (also for the model tests that promise to leave them alone), the matrices a
heatmap picture shows (also for viz.jacobian's tests), and a second thread paused inside a mode (also for nn's)."""
import threading

import numpy as np

import autograd as ag
from autograd import Tensor, backend


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


def while_another_thread_pauses(hold, probe):
    """probe()'s result, run in this thread while another thread is paused where hold(pause) calls pause(), say
    inside a no_grad() block: events, not timing, force the interleaving; an error in that thread fails the test."""
    paused, resume, errors = threading.Event(), threading.Event(), []

    def pause():
        paused.set()
        resume.wait(10)

    def other():
        try:
            hold(pause)
        except BaseException as exc:
            errors.append(exc)
            paused.set()

    worker = threading.Thread(target=other)
    worker.start()
    paused.wait(10)
    try:
        return probe()
    finally:
        resume.set()
        worker.join(10)
        if errors:
            raise errors[0]


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


def draws_after(call, monkeypatch, draw_first):
    """After manual_seed(7) (and a CPU draw if `draw_first`), run `call()`; return every draw made before and after.

    After: the CPU generator's next numbers, and those of a generator first made
    after the call, a second device's. NumPy stands in for CuPy there, so that a
    machine without a GPU sees whether that generator still starts from seed 7.
    """
    monkeypatch.setattr(backend, "xp_for", lambda device: np)
    monkeypatch.setattr(backend, "_generators", {})  # the stand-in device's generator goes when the test ends
    monkeypatch.setattr(backend, "_seed", None)
    ag.manual_seed(7)
    draws = [ag.randn(4).numpy()] if draw_first else []
    call()
    return draws + [ag.randn(4).numpy(), backend.generator("cuda").standard_normal(4)]


def assert_streams_untouched(call, monkeypatch):
    """Every draw after `call()` is the one it would be without the call, whether or not the CPU had drawn before."""
    for draw_first in (False, True):
        untouched = draws_after(lambda: None, monkeypatch, draw_first)
        after_call = draws_after(call, monkeypatch, draw_first)
        for expected, got in zip(untouched, after_call, strict=True):
            np.testing.assert_array_equal(got, expected)


PNG = b"\x89PNG\r\n\x1a\n"  # the first bytes of every PNG file


def drawn_matrices(figure):
    """The matrices an autograd.heatmaps figure shows, left to right, row by row (colour bars have no image)."""
    return [np.asarray(ax.images[0].get_array()) for ax in figure.axes if ax.images]
