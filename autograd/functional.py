"""The top-level functions of `autograd`: checked entry points to the ops, and constructors.

These validate what the user passed (shapes, dtypes, devices) and say how to
fix it, then hand arrays to one op in ops.py (or, for split, a few). The
math and the VJPs live in ops.py.
"""
import numbers

import numpy as np

from . import backend, ops
from .intervals import check
from .tensor import (Tensor, ShapeError, _as_array, _axis, _check_in_range, _check_ints, float_alike,
                     get_default_dtype, is_grad_enabled)


def _tensor(x, like=None):
    """`x` as a Tensor on the device of `like` (Python numbers take like's float dtype)."""
    if isinstance(x, Tensor):
        return x
    return like._lift(x) if like is not None else Tensor(x)


def _constant(x, device, op, kinds, what):
    """A non-differentiable array input (targets, ids, masks) on `device`, of an allowed dtype kind."""
    array, _ = _as_array(x, None, device)
    if array.dtype.kind not in kinds:
        raise TypeError(f"{op}: {what} must be {'integer' if 'i' in kinds else 'boolean'}, got {array.dtype}")
    return array


# ---- joining and splitting ---------------------------------------------------------


def concat(tensors, axis=0, *, dim=None):
    """Join tensors along an existing axis (numpy.concatenate; `dim` is torch.cat's name for it)."""
    axis = _axis("concat", axis, dim, 0, single=True)
    tensors = list(tensors)
    if not tensors:
        raise ValueError("concat: needs at least one tensor")
    ref = next((t for t in tensors if isinstance(t, Tensor)), None)
    tensors = float_alike([_tensor(t, ref) for t in tensors])
    _check_ints("concat", "axis", axis)
    _check_in_range("concat", tensors[0].shape, (axis,))  # an existing axis: Concat reads its length
    return ops.Concat.apply(*tensors, axis=axis)


def stack(tensors, axis=0, *, dim=None):
    """Join same-shaped tensors along a new axis (numpy.stack; `dim` is torch.stack's name for it)."""
    axis = _axis("stack", axis, dim, 0, single=True)
    tensors = list(tensors)
    if not tensors:
        raise ValueError("stack: needs at least one tensor")
    ref = next((t for t in tensors if isinstance(t, Tensor)), None)
    return ops.Stack.apply(*float_alike([_tensor(t, ref) for t in tensors]), axis=axis)


def split(x, indices_or_sections, axis=0):
    """numpy.split: an int is the number of equal pieces, a list the indices to cut at. An array or list x becomes
    a Tensor first, as concat's and stack's inputs do: the pieces are Tensors."""
    x = _tensor(x)
    if isinstance(axis, bool) or not isinstance(axis, int) or not -x.ndim <= axis < x.ndim:
        raise ShapeError(f"split: axis {axis!r} is not an axis of shape {x.shape} ({x.ndim} axes, "
                         f"{-x.ndim} to {x.ndim - 1})")
    if isinstance(indices_or_sections, bool) or not (isinstance(indices_or_sections, int) or (
            isinstance(indices_or_sections, (list, tuple)) and all(
                isinstance(i, int) and not isinstance(i, bool) for i in indices_or_sections))):
        raise TypeError(f"split: indices_or_sections must be an int (the number of equal pieces) or a list of "
                        f"int indices to cut at, got {indices_or_sections!r}")
    length = x.shape[axis]
    if isinstance(indices_or_sections, int):
        pieces = indices_or_sections
        if pieces <= 0 or length % pieces:
            raise ShapeError(
                f"split: axis {axis} of shape {x.shape} has length {length}, which does not divide into "
                f"{pieces} equal pieces; pass the indices to cut at instead")
        bounds = [i * length // pieces for i in range(pieces + 1)]
    else:
        bounds = [0, *indices_or_sections, length]
    index = [slice(None)] * x.ndim
    out = []
    for start, stop in zip(bounds, bounds[1:]):
        index[axis] = slice(start, stop)
        out.append(x[tuple(index)])
    return out


def where(cond, a, b):
    """a where cond is True, else b (broadcast together)."""
    ref = next((t for t in (a, b, cond) if isinstance(t, Tensor)), None)
    a, b = float_alike([_tensor(a, ref), _tensor(b, ref)])
    cond = _constant(cond, a.device, "where", "b", "cond")
    return ops.Where.apply(a, b, cond=cond)


# ---- the transformer's fused ops -----------------------------------------------------


def softmax(x, axis=-1, mask=None, *, dim=None):
    """softmax along `axis` (or PyTorch's `dim`); `mask` (boolean, broadcastable, True = visible) gives hidden
    positions 0, and a row with nothing visible all zeros. A visible −inf is a score: a row whose visible scores
    are all −inf is NaN, as without a mask."""
    axis = _axis("softmax", axis, dim, -1)
    if mask is not None:
        mask = _constant(mask, x.device, "softmax", "b", "mask (True = visible)")
        try:
            fits = np.broadcast_shapes(mask.shape, x.shape) == x.shape  # the mask may not enlarge x
        except ValueError:
            fits = False
        if not fits:
            raise ShapeError(f"softmax: mask of shape {mask.shape} does not broadcast to scores of shape {x.shape}")
    return ops.Softmax.apply(x, axis=axis, mask=mask)


def log_softmax(x, axis=-1, *, dim=None):
    return ops.LogSoftmax.apply(x, axis=_axis("log_softmax", axis, dim, -1))


def cross_entropy(logits, targets, ignore_index=None, reduction="mean", classes=None, reuse_logits=False):
    """Mean (or summed, or per-row) −log p[target], classes on the last axis of `logits`.

    `classes`: only the first `classes` columns are classes (a padded
    vocabulary); the others get no probability and no gradient.
    `reuse_logits`: the fused kernel (a GPU's, or on the CPU numba's for
    float32 from 16K logits) may write the gradient over the logits' array,
    which must then not be read again, by the caller or by the op that made
    it: a training step's logits from a product, not from an op that keeps
    its output for backward (exp, tanh, sigmoid).
    float16 logits are scored in float32 and the loss rounded once (Function.widens_float16): summed in float16,
    the losses of 8192 rows of 30 pass 65504, float16's largest, long before their mean does.
    """
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"cross_entropy: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    if ignore_index is not None and (isinstance(ignore_index, bool) or not isinstance(ignore_index, numbers.Integral)):
        # compared with integer targets, 1.5 or "-100" equals none of them: no row would be skipped, silently
        raise TypeError(f"cross_entropy: ignore_index must be an int (the target value of the rows to skip, e.g. "
                        f"-100) or None, got {ignore_index!r}")
    if logits.ndim == 0:
        raise ShapeError("cross_entropy: logits of shape () have no axis of classes; give them one, the last, "
                         "e.g. logits of shape (N, C) with targets of shape (N,)")
    targets = _constant(targets, logits.device, "cross_entropy", "iu", "targets (class ids)")
    if targets.shape != logits.shape[:-1]:
        raise ShapeError(
            f"cross_entropy: targets have shape {targets.shape} but logits {logits.shape} need targets of "
            f"shape {logits.shape[:-1]} (one class id per row; classes on the last axis)")
    width = logits.shape[-1]
    if classes is not None and (isinstance(classes, bool) or not isinstance(classes, int) or not 0 < classes <= width):
        raise ValueError(f"cross_entropy: classes must be an int in [1, {width}] (the logits' last axis), "
                         f"got {classes!r}")
    return ops.CrossEntropy.apply(logits, targets=targets, ignore_index=ignore_index, reduction=reduction,
                                  classes=None if classes == width else classes, reuse_logits=reuse_logits)


def embedding(weight, ids):
    """Rows of `weight` (V, C) picked by integer `ids` of any shape: shape (*ids.shape, C)."""
    if weight.ndim != 2:
        raise ShapeError(f"embedding: weight must be a table of shape (V, C), one row of C features per id, got "
                         f"shape {weight.shape}; reshape it to (V, C)")
    ids = _constant(ids, weight.device, "embedding", "iu", "ids (token ids)")
    return ops.Embedding.apply(weight, ids=ids)


def layer_norm(x, weight, bias=None, eps=1e-5):
    """Normalise the last axis to zero mean and unit variance, (x − μ) / √(var + eps) with the biased variance
    (over n, as PyTorch's), then scale by `weight` and shift by `bias`.

    A float16 x is normalised in float32 and rounded once (Function.widens_float16): a row's sum passes 65504,
    float16's largest, long before its mean does (768 features of 100), and so does a square from |x − μ| = 256.
    Floats of mixed dtypes (x, weight, bias) are all normalised in the widest of them, and the output is of it, as
    x * weight + bias's is (Function.widens_float16); each gradient comes back in its input's own dtype."""
    if x.ndim == 0:
        raise ShapeError("layer_norm: the input has shape (), no axis of features to normalise (the last axis); "
                         "give it one, e.g. x.reshape(1, -1)")
    check("layer_norm", "eps", eps, "[0, inf)")  # a negative or NaN eps makes rows of small variance NaN
    features = x.shape[-1]
    if not isinstance(weight, Tensor):
        raise TypeError(f"layer_norm: weight must be a Tensor of shape ({features},), got {type(weight).__name__}; "
                        f"for no scaling pass ones, Tensor(numpy.ones({features}, numpy.float32))")
    if bias is not None and not isinstance(bias, Tensor):
        raise TypeError(f"layer_norm: bias must be a Tensor of shape ({features},) or None, got "
                        f"{type(bias).__name__}; wrap it, Tensor(bias), or pass None for no shift")
    for name, p in (("weight", weight), ("bias", bias)):
        if p is not None and p.shape != (features,):
            raise ShapeError(f"layer_norm: {name} has shape {p.shape} but the input's last axis has "
                             f"{features} features; it must be ({features},)")
    inputs = (x, weight) if bias is None else (x, weight, bias)
    return ops.LayerNorm.apply(*inputs, eps=eps)


def dropout(x, p, training=True):
    """Zero each element with probability p and scale the rest by 1/(1−p); identity when not training."""
    if isinstance(p, bool) or not isinstance(p, numbers.Real) or not 0 <= p <= 1:  # True would drop everything
        raise (ValueError if isinstance(p, numbers.Real) else TypeError)(
            f"dropout: p must be a probability in [0, 1], got {p!r}")
    if not training or p == 0:
        return x
    return ops.Dropout.apply(x, p=p)


def scaled_dot_product_attention(q, k, v, causal=True, dropout_p=0.0):
    """softmax(q kᵀ / √D, causal mask) v on (B, H, T, D) tensors, fused (see ops.ScaledDotProductAttention).

    With fewer queries than keys (generation with a KV cache), query i is the
    (Tk − Tq + i)-th position, so it sees the keys up to and including it.
    `dropout_p` drops attention weights (pass 0 when not training).
    """
    if (min(q.ndim, k.ndim, v.ndim) < 2 or q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]
            or q.shape[:-2] != k.shape[:-2] or k.shape[:-2] != v.shape[:-2]):
        raise ShapeError(f"scaled_dot_product_attention: q {q.shape}, k {k.shape}, v {v.shape} do not fit; "
                         "expected (B, H, Tq, D), (B, H, Tk, D), (B, H, Tk, Dv)")
    check("scaled_dot_product_attention", "dropout_p", dropout_p, "[0, 1)")
    # integers would be scored in float64 (NumPy's rule); they take the default float, as exp's operands do
    q, k, v = float_alike((q, k, v), floating=True)
    mask = None
    tq, tk = q.shape[-2], k.shape[-2]
    if causal and tq > 1:  # a single query is the newest position: it sees every key
        xp = backend.xp_for(q.device)
        mask = xp.arange(tk)[None, :] <= xp.arange(tq)[:, None] + (tk - tq)  # (Tq, Tk)
    return ops.ScaledDotProductAttention.apply(q, k, v, mask=mask, dropout_p=dropout_p, causal=mask is not None)


def linear(x, weight, bias=None):
    """x @ weight + bias in one op, weight of shape (in_features, out_features) as GPT-2 stores it."""
    if x.ndim == 0 or weight.ndim != 2 or x.shape[-1] != weight.shape[0]:
        features = x.shape[-1] if x.ndim else "a last axis"
        raise ShapeError(f"linear: input {x.shape} does not fit weight {weight.shape}: the weight must be "
                         f"(in_features, out_features) = ({features}, ...)")
    if bias is not None and bias.shape != (weight.shape[1],):
        raise ShapeError(f"linear: bias has shape {bias.shape}, expected ({weight.shape[1]},)")
    inputs = (x, weight) if bias is None else (x, weight, bias)
    return ops.Linear.apply(*float_alike(inputs))


# ---- constructors ---------------------------------------------------------------------


def checkpoint(fn, *inputs, params=None):
    """fn(*inputs) without keeping fn's activations: backward recomputes them (ops.Checkpoint), bit for bit.

    `fn` takes the input Tensors and returns one Tensor; the parameters it reads
    get their gradients as without checkpointing. The random numbers fn draws
    from autograd's generator (dropout), NumPy's global one (np.random.*) or
    Python's `random` are drawn again alike in backward; a generator fn makes
    or keeps itself (np.random.default_rng()) is not replayed: draw from one of
    those three, or pass the random values in as an input. An input must require grad,
    or one of `params`, the parameters fn reads that do (a frozen model's LoRA
    adapters behind inputs that need none): else backward could not reach fn.
    An activation fn closes over (a result of ops outside fn that requires
    grad) gets its gradient as without checkpointing, added to those of its
    other uses; fn must read the same ones when backward runs it again.
    """
    params = () if params is None else tuple(params)
    if not inputs or not all(isinstance(x, Tensor) for x in (*inputs, *params)):
        raise TypeError("checkpoint: pass fn and the Tensors it takes, e.g. checkpoint(block, x)")
    if not is_grad_enabled():
        return fn(*inputs)  # nothing will be backpropagated: nothing to save or recompute
    params = [p for p in params if p.requires_grad]
    if not any(x.requires_grad for x in inputs) and not params:
        # the op is recorded only for an input that needs a gradient: the activations fn closes over, found as it
        # runs, are added to a recorded op's inputs
        raise ValueError("checkpoint: no input requires grad, so backward would never reach fn (its parameters, or "
                         "an activation it closes over); pass the activations it reads as inputs, checkpoint(fn, x, "
                         "it), or name the parameters it trains in params=")
    return ops.Checkpoint.apply(*inputs, *params, fn=fn, device=inputs[0].device, n_inputs=len(inputs))


def _shape(who, shape):
    """The sizes given (as arguments, or one tuple or list), each checked to be a count."""
    shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
    for size in shape:
        if isinstance(size, bool) or not isinstance(size, numbers.Integral) or size < 0:
            raise (ValueError if isinstance(size, numbers.Integral) else TypeError)(
                f"{who}: sizes are whole numbers from 0 up, got {size!r} in the shape {shape}")
    return shape


def _made(who, make, shape, dtype, requires_grad):
    """A tensor from `make(shape, dtype=...)`: an array-module constructor or a generator's sampler."""
    dtype = np.dtype(dtype) if dtype is not None else get_default_dtype()
    return Tensor(make(_shape(who, shape), dtype=dtype), requires_grad=requires_grad)


def zeros(*shape, dtype=None, device="cpu", requires_grad=False):
    return _made("zeros", backend.xp_for(device).zeros, shape, dtype, requires_grad)


def ones(*shape, dtype=None, device="cpu", requires_grad=False):
    return _made("ones", backend.xp_for(device).ones, shape, dtype, requires_grad)


def _sampled(who, sample, shape, dtype, requires_grad):
    """A tensor of samples from a generator's `sample`, which draws float32 or float64 only: float16 is drawn in
    float32 and rounded."""
    dtype = np.dtype(dtype) if dtype is not None else get_default_dtype()
    if dtype.kind != "f":
        raise TypeError(f"{who}: draws floating-point numbers, got dtype {dtype}; ask for float32 or float64 "
                        "(and .astype the result for integers)")
    drawn = sample(_shape(who, shape), dtype=dtype if dtype.itemsize >= 4 else "float32")
    return Tensor(drawn.astype(dtype, copy=False), requires_grad=requires_grad)


def randn(*shape, dtype=None, device="cpu", requires_grad=False):
    """Standard normal samples from the device's seeded generator (`autograd.manual_seed`)."""
    return _sampled("randn", backend.generator(device).standard_normal, shape, dtype, requires_grad)


def rand(*shape, dtype=None, device="cpu", requires_grad=False):
    """Uniform samples in [0, 1) from the device's seeded generator."""
    return _sampled("rand", backend.generator(device).random, shape, dtype, requires_grad)


def arange(start, stop=None, step=1, dtype=None, device="cpu", requires_grad=False):
    """numpy.arange: integers from integer arguments, the default float dtype otherwise."""
    if stop is None:
        start, stop = 0, start
    if step == 0:
        raise ValueError(f"arange: step must be nonzero, got step={step!r} from {start!r} to {stop!r}; a step of 0 "
                         "never reaches stop")
    if dtype is None and any(isinstance(a, float) for a in (start, stop, step)):
        dtype = get_default_dtype()
    xp = backend.xp_for(device)
    if dtype is not None and np.dtype(dtype).kind in "iu":
        # counted in int64 (or float64) first: counted in a narrow dtype, 250 to 260 in uint8 would wrap
        # past 255 to 0, where Tensor refuses values its dtype cannot hold
        return Tensor(xp.arange(start, stop, step), dtype=dtype, requires_grad=requires_grad)
    return Tensor(xp.arange(start, stop, step, dtype=dtype), requires_grad=requires_grad)
