"""gradcheck: compare backward() with central finite differences.

For f: inputs → output and a fixed random projection v, the scalar
L = Σ v ⊙ f(inputs) has ∂L/∂x = VJP(v). The engine computes that with one
backward(); the check estimates each component as
(L(x + εeᵢ) − L(x − εeᵢ)) / 2ε, which has error O(ε²). Use float64 inputs:
in float32 the rounding error of L swamps any ε small enough.
"""
import numpy as np

from . import backend
from .tensor import Tensor, no_grad


class GradcheckError(AssertionError):
    pass


def _projected(fn, inputs, v):
    out = fn(*inputs)
    return float((backend.to_host(out.data).astype(np.float64) * v).sum())


def gradcheck(fn, inputs, eps=1e-6, atol=1e-6, rtol=1e-4, seed=0):
    """True if backward() matches finite differences for every input that requires grad; raises otherwise."""
    inputs = list(inputs)
    checked = [t for t in inputs if isinstance(t, Tensor) and t.requires_grad]
    if not checked:
        raise ValueError("gradcheck: no input requires grad; pass Tensors with requires_grad=True")
    for t in checked:
        if t.dtype != np.float64:
            raise TypeError(f"gradcheck: inputs must be float64 for finite differences to be exact enough, got {t.dtype}")
        t.grad = None
    out = fn(*inputs)
    v = np.random.default_rng(seed).standard_normal(out.shape)
    out.backward(backend.xp_for(out.device).asarray(v, dtype=out.dtype))
    with no_grad():
        for index, t in enumerate(inputs):
            if not (isinstance(t, Tensor) and t.requires_grad):
                continue
            analytic = np.zeros(t.shape) if t.grad is None else backend.to_host(t.grad)
            numeric = np.zeros(t.shape)
            t.data = backend.xp_for(t.device).ascontiguousarray(t.data)
            flat = t.data.reshape(-1)  # a view: perturbing it perturbs the input
            for i in range(flat.size):
                original = flat[i].item()
                flat[i] = original + eps
                plus = _projected(fn, inputs, v)
                flat[i] = original - eps
                minus = _projected(fn, inputs, v)
                flat[i] = original
                numeric.reshape(-1)[i] = (plus - minus) / (2 * eps)
            if not np.allclose(analytic, numeric, atol=atol, rtol=rtol):
                worst = np.unravel_index(np.argmax(np.abs(analytic - numeric)), t.shape)
                raise GradcheckError(
                    f"gradcheck: input {index} (shape {t.shape}): backward gives {analytic[worst]:.8g} "
                    f"at {worst}, finite differences {numeric[worst]:.8g} "
                    f"(max abs error {np.abs(analytic - numeric).max():.3g})")
    return True
