"""Checks a learner can read: backward() against finite differences, and a Jacobian written out in full.

gradcheck: for f: inputs → output and a fixed random projection v, the scalar
L = Σ v ⊙ f(inputs) has ∂L/∂x = VJP(v). The engine computes that with one
backward(); the check estimates each component as
Σ v ⊙ (f(x + εeᵢ) − f(x − εeᵢ)) / 2ε, which has error O(ε²). Each output
element is differenced before the projection (as torch.autograd.gradcheck
differences each one): an element that xᵢ does not reach then contributes
exactly 0, where differencing L itself would put L's rounding, about
max|f|·2⁻⁵²/ε, on every component however small its true value. Use float64
inputs: in float32 the rounding error of f swamps any ε small enough. On a
mismatch it raises with a table of the worst entries: input, index, analytic,
numeric, error; with `picture=PATH` it also draws, for each input that failed,
the analytic gradient, the numeric one and their difference as three heatmaps
(autograd/heatmaps.py), where a wrong row or a swapped block shows at a glance.

jacobian: the full matrix ∂f/∂x, one backward pass per output element. The ops
never build it (they apply it as a VJP); this is for looking at one, e.g.
softmax's diag(p) − ppᵀ, on inputs of a few elements.
"""
from pathlib import Path

import numpy as np

from . import backend, heatmaps
from .intervals import check
from .tensor import Tensor, array_of, backward_steps, enable_grad, no_grad

WORST_SHOWN = 5
LARGEST_JACOBIAN = 1024  # elements of jacobian's x, and of fn's output: its matrix is at most 8 MB


class GradcheckError(AssertionError):
    pass


def _output(fn, inputs):
    return backend.to_host(fn(*inputs).data).astype(np.float64)


def _finite_differences(fn, inputs, t, v, eps):
    """∂L/∂t by central differences of each output element, projected on v, one entry of t at a time."""
    numeric = np.zeros(t.shape)
    original = t._data
    # Nudge a copy, not the caller's array (it may be shared, read-only or broadcast), and set the slot rather
    # than .data, whose setter would count the swap as a change and refuse backward through graphs that saved t.
    t._data = original.copy()
    try:
        for index in np.ndindex(t.shape):
            value = original[index].item()
            t._data[index] = value + eps
            plus = _output(fn, inputs)
            t._data[index] = value - eps
            minus = _output(fn, inputs)
            t._data[index] = value
            numeric[index] = float((v * (plus - minus)).sum()) / (2 * eps)
    finally:
        t._data = original
    return numeric


def _number(x):
    return f"{x:.8g}"


def _failure_table(failures, atol, rtol):
    """The worst mismatches over all inputs, largest error first, as lines of text."""
    failures = sorted(failures, key=lambda row: -row[4])
    header = ("input", "index", "analytic", "numeric", "error")
    rows = [(str(i), "[" + ", ".join(str(int(k)) for k in index) + "]", _number(a), _number(n), f"{err:.3g}")
            for i, index, a, n, err in failures[:WORST_SHOWN]]
    widths = [max(len(r[c]) for r in rows + [header]) for c in range(len(header))]
    lines = ["  " + "  ".join(cell.rjust(w) for cell, w in zip(row, widths)) for row in [header] + rows]
    more = len(failures) - WORST_SHOWN
    if more > 0:
        lines.append(f"  … and {more} more")
    lines.append(f"  (an entry fails when |analytic − numeric| > {atol:g} + {rtol:g}·|numeric|)")
    return "\n".join(lines)


def gradcheck(fn, inputs, eps=1e-6, atol=1e-6, rtol=1e-4, seed=0, picture=None):
    """True if backward() matches finite differences for every input that requires grad; raises otherwise.

    `inputs` is the Tensor fn takes, or a sequence of fn's arguments (as in torch.autograd.gradcheck).

    The error lists the worst entries: which input, the index in it, the
    gradient backward() gave (analytic), the finite-difference estimate
    (numeric) and their absolute difference. `picture`: a path (.png, .svg or
    .pdf) where a failure also draws each failing input's analytic gradient,
    numeric gradient and difference as heatmaps; the error names the file (a device or a pipe without a suffix,
    /dev/null, gets a PNG).
    Each checked input's `.grad` is left holding what backward() gave for the
    check's random projection of fn's output (what was there before is dropped;
    a non-leaf input is made to retain_grad() for it). A parameter fn reads
    without taking it as an input gets that gradient added into its `.grad`,
    as any backward() adds it: set its `.grad = None` after the check.
    The inputs' arrays are left as they were, the same objects with the same
    values, even when fn raises: the entries are nudged in a copy.
    """
    inputs = [inputs] if isinstance(inputs, Tensor) else list(inputs)  # list() would split one tensor into its rows
    checked = {position: t for position, t in enumerate(inputs) if isinstance(t, Tensor) and t.requires_grad}
    if not checked:
        raise ValueError("gradcheck: no input requires grad; pass Tensors with requires_grad=True")
    # a step of 0 divides by zero, and a NaN or negative tolerance fails every right VJP
    check("gradcheck", "eps", eps, "(0, inf)")
    check("gradcheck", "atol", atol, "[0, inf)")
    check("gradcheck", "rtol", rtol, "[0, inf)")
    fmt = None if picture is None else heatmaps.picture_format(picture, "gradcheck: picture=")
    for position, t in checked.items():
        if t.dtype != np.float64:
            raise TypeError(f"gradcheck: input {position} is {t.dtype}, and finite differences need float64 to be "
                            "exact enough; make it with dtype=np.float64")
    for t in checked.values():
        t.grad = None
        if not t.is_leaf:  # backward() keeps a non-leaf's .grad only when asked, and the analytic side reads it
            t.retain_grad()
    with enable_grad():  # called inside no_grad(), fn would make no graph, and a right VJP would read as 0
        out = fn(*inputs)
    if not isinstance(out, Tensor):
        raise TypeError(f"gradcheck: fn must return a Tensor, got {type(out).__name__}")
    if out.dtype != np.float64:  # differences of a float32 output are its rounding over 2ε: a right VJP would fail
        raise TypeError(f"gradcheck: fn returned a Tensor of {out.dtype}, and finite differences need float64 to be "
                        f"exact enough; compute fn's output in float64 (leave out the cast to {out.dtype})")
    v = np.random.default_rng(seed).standard_normal(out.shape)
    if out.requires_grad:  # else fn's output does not depend on the inputs by the graph: backward() gives 0
        out.backward(backend.xp_for(out.device).asarray(v, dtype=out.dtype))
    failures, failed_inputs, drawn = [], [], []
    with no_grad():
        for position, t in checked.items():
            analytic = np.zeros(t.shape) if t.grad is None else backend.to_host(t.grad).astype(np.float64)
            numeric = _finite_differences(fn, inputs, t, v, eps)
            error = np.abs(analytic - numeric)
            bad = ~(error <= atol + rtol * np.abs(numeric))  # written so that a NaN counts as bad
            if not bad.any():
                continue
            failed_inputs.append(f"input {position} (shape {t.shape})")
            drawn.append((position, analytic, numeric))
            failures += [(position, index, analytic[index], numeric[index], error[index])
                         for index in np.ndindex(bad.shape) if bad[index]]
    if failures:
        drawing = "" if picture is None else "\n" + _draw_failures(drawn, picture, fmt)
        raise GradcheckError(f"gradcheck: backward() disagrees with finite differences for "
                             f"{', '.join(failed_inputs)}; the worst entries:\n"
                             + _failure_table(failures, atol, rtol) + drawing)
    return True


def _draw_failures(drawn, path, fmt):
    """Write the heatmaps of each failing input (analytic | numeric | analytic − numeric) to `path` as `fmt`; the
    line the error ends with: where the picture is, or why it could not be written (the mismatch is reported
    anyway)."""
    rows = [[heatmaps.array_panel(f"input {position}: analytic (backward)", analytic, group=2 * position),
             heatmaps.array_panel(f"input {position}: numeric (central differences)", numeric, group=2 * position),
             heatmaps.array_panel(f"input {position}: analytic − numeric", analytic - numeric, group=2 * position + 1)]
            for position, analytic, numeric in drawn]
    picture = heatmaps.figure(rows, "gradcheck: backward() against finite differences")
    try:
        Path(path).write_bytes(heatmaps.picture_bytes(picture, fmt))
    except OSError as exc:  # a folder that is missing or not writable must not hide the mismatch itself
        return f"  picture: not written to {path} ({type(exc).__name__}: {exc})"
    return f"  picture: {path} (analytic, numeric and their difference for each failing input)"


def _check_small(what, size, detail=""):
    if size > LARGEST_JACOBIAN:
        raise ValueError(f"jacobian: {what} has {size} elements{detail}; the full matrix is for small teaching "
                         f"inputs (≤ {LARGEST_JACOBIAN}), use backward() for a vector-Jacobian product instead")


def jacobian(fn, x):
    """The full Jacobian J[i..., j...] = ∂fn(x)[i...]/∂x[j...] as a host float64 array of shape out.shape + x.shape.

    `x` is a Tensor or array of floats (a new leaf is made from its data, so
    the caller's tensor is left alone; the entries carry its dtype's rounding,
    float32's for float32); `fn` maps one Tensor to one Tensor.
    It runs one backward pass per element of the output: for teaching on a few
    elements (x and the output at most LARGEST_JACOBIAN each), never inside a
    model. The passes write no `.grad`: not x's, not that of a parameter fn reads.
    """
    leaf = Tensor(array_of(x))
    if leaf.dtype.kind != "f":  # requires_grad's own refusal would name neither jacobian nor the float64 it wants
        raise TypeError(f"jacobian: x holds {leaf.dtype} values, and a Jacobian is taken with respect to floats; "
                        "pass np.asarray(x, dtype=np.float64)")
    leaf.requires_grad = True
    _check_small("x", leaf.size)
    with enable_grad():  # inside no_grad() (an evaluation loop) too: unrecorded, every entry would read 0
        out = fn(leaf)
    if not isinstance(out, Tensor):
        raise TypeError(f"jacobian: fn must return a Tensor, got {type(out).__name__}")
    # before the out.size × x.size matrix and its out.size backward passes
    _check_small("fn's output", out.size, f" (shape {tuple(out.shape)}), one backward pass each")
    xp = backend.xp_for(out.device)
    result = np.zeros(out.shape + leaf.shape)
    for flat_index in range(out.size):
        index = np.unravel_index(flat_index, out.shape)
        seed = xp.zeros(out.shape, dtype=out.dtype)
        seed[index] = 1
        if out.requires_grad:  # backward's walk, not backward(), which would add into every leaf's .grad
            for t, g, _ in backward_steps(out, seed, free=False):
                if t is leaf:
                    result[index] = backend.to_host(g)
    return result
