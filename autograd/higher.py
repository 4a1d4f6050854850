"""Higher-order gradients: backward is a computation too, so under create_graph=True it is recorded as one.

    g, = ag.grad(loss, x, create_graph=True)   # ∂L/∂x, a Tensor with a graph of its own
    (g * g).sum().backward()                   # differentiate it again: x.grad = 2 H g
    ag.hvp(fn, x, v)                           # (fn(x), H v) by two backward passes
    ag.hessian(fn, x)                          # the full matrix, for small teaching inputs

Each op's VJP is written once (autograd/ops.py), against `self.xp`. A plain
backward hands it arrays and the array module. Under create_graph,
`vjp_in_graph` hands the same `backward` a copy of the op whose `xp` is
`Namespace`, NumPy's names spelled with engine ops, and whose `saved` are the
tensors those arrays came from (the op's `saved_in_graph`): the lines that
computed a number now record ops, and the gradient they return has a graph. A
fused op's copy runs its composed rule, every step an engine op, instead of
its kernel; an op that cannot say what its VJP reads (Checkpoint, an op
defined elsewhere without `saved_in_graph`) raises, naming itself, rather
than return a second derivative that treats its arrays as constants.
"""
import contextlib
import copy
import functools
import numbers

from . import anomaly, backend, functional, ops
from . import tensor as _tensor
from .gradcheck import jacobian
from .tensor import Function, Tensor, _as_array, array_of, enable_grad, name_scope, root_grad, vjp_gradients


class Namespace:
    """The array module's names for what the ops' VJPs call, recording engine ops on tensors: the `xp` of an op's
    backward under create_graph. `out=` is accepted and ignored (a tensor is never written in place), so a VJP
    spells an update as `a = xp.f(..., out=a)`; integer results (indices) stay arrays."""

    def __init__(self, device):
        self.device = device
        self.array = backend.xp_for(device)

    def _constant(self, array):
        return Tensor._make(array, self.device, False, None)

    def zeros(self, shape, dtype=None):
        return self._constant(self.array.zeros(shape, dtype=dtype))

    def zeros_like(self, a, dtype=None):
        return self._constant(self.array.zeros_like(array_of(a), dtype=dtype))

    def ones(self, shape, dtype=None):
        return self._constant(self.array.ones(shape, dtype=dtype))

    def empty_like(self, a):
        return None  # only ever an `out=` buffer, which the functions here never write

    def arange(self, *args, **kwargs):
        return self.array.arange(*args, **kwargs)

    def logical_and(self, a, b):
        return self.array.logical_and(array_of(a), array_of(b))  # of masks (comparisons), constants of the rule

    def where(self, cond, a, b):
        return functional.where(cond, a, b)

    def clip(self, a, low, high):
        """a where it lies in [low, high], its graph kept; the bound, a constant, where it does not."""
        held = self.array.clip(array_of(a), low, high)
        return functional.where(held == array_of(a), a, self._constant(held))

    def multiply(self, a, b, out=None):
        return a * b

    def matmul(self, a, b):
        return a @ b

    def exp(self, x, out=None):
        return x.exp()

    def log(self, x, out=None):
        return x.log()

    def broadcast_to(self, x, shape):
        return ops.BroadcastTo.apply(x, shape=tuple(shape))

    def split(self, x, indices_or_sections, axis=0):
        return functional.split(x, indices_or_sections, axis)

    def concatenate(self, xs, axis=0):
        return functional.concat(xs, axis)

    def moveaxis(self, x, source, destination):
        axes = [a for a in range(x.ndim) if a != source % x.ndim]
        axes.insert(destination % x.ndim, source % x.ndim)
        return x.transpose(axes)


@functools.cache
def namespace(device):
    return Namespace(device)


def vjp_in_graph(op, out, g, step):
    """op's VJP of the gradient `g` (a Tensor) as ops of the graph: one gradient Tensor (or None) per input.

    A copy of the op runs its own `backward` with the engine's namespace for `xp` and
    `saved_in_graph`'s tensors for `saved`, with recording on and the recorded ops
    named after this step of backward ("backward 3: Tanh", within the op's module).
    The op itself is left as it was recorded.
    """
    twin = copy.copy(op)
    twin.xp, twin.last_use = namespace(out.device), False
    inputs, out, g = _as_computed(op, op.inputs, out, g)
    twin.saved = twin.saved_in_graph(inputs, out)
    label = f"backward {step}: {op.name}"
    # unchecked as forward ops: backward checks the gradients the VJP returns, as it checks an array VJP's, and
    # reports a NaN as the backward of `op`, not as the forward of an op its VJP is written with
    with enable_grad(), anomaly.paused(), name_scope(f"{op.scope}.{label}" if op.scope else label):
        outer, _tensor._mode.vjp = _tensor._mode.vjp, op.name  # np.where(t, ...) and the like refuse (Tensor)
        try:
            returned = twin.backward(g)
        except TypeError as exc:
            if "__array_ufunc__" not in str(exc):  # only a ufunc refusing a Tensor; the op's own errors pass as raised
                raise
            raise TypeError(_tensor.numpy_in_vjp(op.name, f"NumPy's ufuncs refuse them ({exc})")) from None
        finally:
            _tensor._mode.vjp = outer
    grads = vjp_gradients(op, returned)
    return tuple(pg if pg is None or isinstance(pg, Tensor) else Tensor._make(pg, out.device, False, None)
                 for pg in grads)


def _as_computed(op, inputs, out, g):
    """The op's inputs, output and gradient in the dtype its forward computed in, as the plain backward has them:
    an op that widens float16 (Function.widens_float16) computed in float32, one of mixed floats in the widest.
    Left in float16, the rule rebuilt what it reads there: layer norm's squares passed 65504 from |x − μ| = 256
    (a zero gradient), attention's scores were rounded to float16. The casts are ops: the gradients still reach
    the narrower inputs, and backward casts each result back to its input's dtype."""
    if not op.widens_float16:
        return inputs, out, g
    dtype = "float32" if op.widened else out.dtype
    inputs = [x.astype(dtype) if x.dtype.kind == "f" else x for x in inputs]
    return inputs, out.astype(dtype), g.astype(dtype)


def root_tensor(root, grad, op):
    """The gradient a create_graph backward starts from, as a Tensor: `grad` itself when it is one (its graph
    kept, so that the result can be differentiated with respect to it too), else root_grad's array."""
    if isinstance(grad, Tensor):
        root_grad(root, grad.data, op)  # the same checks: root requires grad, the shapes agree
        return grad if grad.dtype == root.dtype else grad.astype(root.dtype)
    return Tensor._make(root_grad(root, grad, op), root.device, False, None)


def arrays(g, input_grads):
    """A create_graph step's gradients as arrays, for detect_anomaly's scan."""
    return g.data, tuple(None if pg is None else pg.data for pg in input_grads)


def _tensors(xs, what):
    """A Tensor or a sequence of them, as a list."""
    xs = [xs] if isinstance(xs, Tensor) else list(xs)
    if not xs or not all(isinstance(x, Tensor) for x in xs):
        raise TypeError(f"grad: {what} must be a Tensor or a sequence of Tensors")
    return xs


class Outputs(Function):
    """The root of one backward from several outputs: z = 0, whose VJP hands each output its own gradient,
    doutᵢ = vᵢ (grad's grad_outputs), whatever g.

    The vᵢ are a setting, not inputs: the walk starts from every output and never enters the graph behind a vᵢ.
    As inputs (a root Σᵢ Σ outᵢ ⊙ vᵢ) they would be differentiated too, which adds outᵢ into the gradient of
    an input that vᵢ depends on, and frees vᵢ's graph. Under create_graph the vᵢ are Tensors, so the gradients
    returned still depend on them.
    """

    rule = "doutᵢ = vᵢ"
    input_names = ("out",)

    def forward(self, *outs, seeds):
        self.seeds = seeds
        return self.xp.zeros((), dtype=outs[0].dtype)

    def saved_in_graph(self, inputs, out):
        return ()  # the vᵢ are Tensors already under create_graph

    def backward(self, g):
        return tuple(self.seeds)


def _root(outputs, grad_outputs, create_graph):
    """The root a backward from `outputs` starts from, its gradient, and each output's (its entry of
    grad_outputs, checked): one output is its own root; several join under an Outputs."""
    seeds = [root_tensor(out, v, "grad") if create_graph else root_grad(out, array_of(v), "grad")
             for out, v in zip(outputs, grad_outputs)]
    if len(outputs) == 1:
        return outputs[0], seeds[0], seeds
    with enable_grad():  # the root must require grad, whatever the caller's mode
        root = Outputs.apply(*outputs, seeds=seeds)
    one = backend.xp_for(root.device).ones_like(root.data)
    return root, Tensor._make(one, root.device, False, None) if create_graph else one, seeds


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False, allow_unused=False):
    """The gradients of `outputs` with respect to `inputs`, as torch.autograd.grad: a tuple, one Tensor per input.

    outputs: a Tensor or a sequence; a non-scalar one needs its entry of `grad_outputs` (an array or a
        Tensor of its shape: with create_graph, a Tensor that requires grad keeps its graph, so the result
        can be differentiated with respect to it too); a scalar one may take a number, as backward(2.0) does.
    inputs: a Tensor or a sequence, each requiring grad; leaves or not.
    retain_graph: keep the graph for another backward (default: what create_graph says).
    create_graph: the gradients are Tensors with a graph of their own, to differentiate again; without
        it they are the very arrays backward() would have added into .grad, wrapped in Tensors without one.
    allow_unused: an input the outputs do not depend on gets None; without it, that is an error.
    No `.grad` is touched.
    """
    outputs, inputs = _tensors(outputs, "outputs"), _tensors(inputs, "inputs")
    # a number is one output's gradient, as an array is: list() of it would fail in Python's words, 'not iterable'
    if (grad_outputs is None or isinstance(grad_outputs, (Tensor, numbers.Number))
            or backend.device_of(grad_outputs) is not None):
        grad_outputs = [grad_outputs] * len(outputs) if grad_outputs is None else [grad_outputs]
    grad_outputs = list(grad_outputs)
    if len(grad_outputs) != len(outputs):
        raise ValueError(f"grad: {len(grad_outputs)} grad_outputs for {len(outputs)} outputs; give one per output "
                         "(None for a scalar)")
    for i, x in enumerate(inputs):
        if not x.requires_grad:
            raise RuntimeError(f"grad: input {i} does not require grad, so no gradient is defined for it; "
                               "make it with requires_grad=True")
    free = not (create_graph if retain_graph is None else retain_graph)
    wanted = {}
    for i, x in enumerate(inputs):
        wanted.setdefault(id(x), []).append(i)
    outer, _tensor._mode.grad_only = _tensor._mode.grad_only, True
    try:
        with enable_grad() if create_graph else contextlib.nullcontext():  # recorded under no_grad() too
            root, seed, seeds = _root(outputs, grad_outputs, create_graph)
            found, adopted = [None] * len(inputs), {id(v) for v in seeds}  # the caller may hold them (grad_outputs)
            for t, g, _ in _tensor.backward_steps(root, seed, free, create_graph):
                for i in wanted.get(id(t), ()):
                    found[i] = g if create_graph else Tensor._make(_tensor.own_gradient(g, t, adopted), t.device,
                                                                   False, None)
    finally:
        _tensor._mode.grad_only = outer
    missing = [i for i, g in enumerate(found) if g is None]
    if missing and not allow_unused:
        raise RuntimeError(f"grad: input {missing[0]} was not used to compute the outputs (no path leads from it "
                           "to them), so its gradient is undefined; pass allow_unused=True to get None for it")
    return tuple(found)


def _leaves(xs):
    return [Tensor(array_of(x), requires_grad=True) for x in xs]


def hvp(fn, inputs, v):
    """(fn(*inputs), H v): the Hessian of the scalar fn at `inputs` applied to `v`, as torch.autograd.functional.hvp.

    `inputs` and `v` are a Tensor (or array) each, or matching sequences. Two backward passes, no Hessian built:
    g = ∇fn with create_graph, then ∇(g · v) = H v (H is symmetric). The results are Tensors without a graph;
    fresh leaves are made from the inputs' data, so the caller's tensors are left alone.
    """
    single = not isinstance(inputs, (list, tuple))
    xs = _leaves([inputs] if single else inputs)
    vs = [v] if single else list(v)
    if len(vs) != len(xs):
        raise ValueError(f"hvp: {len(vs)} vectors for {len(xs)} inputs; give v the inputs' structure")
    vs = [_as_array(u, x.dtype, x.device)[0] for u, x in zip(vs, xs)]
    for u, x in zip(vs, xs):
        if u.shape != x.shape:
            raise ValueError(f"hvp: v has shape {u.shape} but its input has shape {x.shape}")
    with enable_grad():  # fn and its gradient recorded inside no_grad() too, as PyTorch's hvp records them
        out, gradients = _gradients(fn, xs, "hvp")
        terms = [(g * u).sum() for g, u in zip(gradients, vs)
                 if g is not None and g.requires_grad]  # a gradient without a graph is constant: its H v is 0
        products = grad(sum(terms[1:], terms[0]), xs, allow_unused=True) if terms else [None] * len(xs)
    products = [p if p is not None else namespace(x.device).zeros(x.shape, x.dtype) for p, x in zip(products, xs)]
    return out.detach(), products[0] if single else tuple(products)


def _gradients(fn, xs, op):
    """fn(*xs), a scalar Tensor, and its gradient with respect to each x with a graph of its own (None where it is
    0: an x fn does not reach, or every x when fn's output does not depend on them, as a constant's)."""
    out = fn(*xs)
    if not isinstance(out, Tensor) or out.data.size != 1:
        raise ValueError(f"{op}: fn must return a scalar Tensor (a Hessian is of one number), "
                         f"got {out.shape if isinstance(out, Tensor) else type(out).__name__}")
    if not out.requires_grad:
        return out, [None] * len(xs)
    return out, grad(out, xs, create_graph=True, allow_unused=True)


def hessian(fn, x):
    """The Hessian H[i..., j...] = ∂²fn(x)/∂x[i...]∂x[j...], as a host float64 array of shape x.shape + x.shape.

    The Jacobian of the gradient: g = ∇fn with create_graph=True, then one backward per element of g
    (ag.jacobian, which records fn inside no_grad() too), as torch.autograd.functional.hessian gives it; for a
    few elements, for teaching.
    """
    def gradient(t):
        _, (g,) = _gradients(fn, [t], "hessian")
        return g if g is not None else namespace(t.device).zeros(t.shape, t.dtype)
    return jacobian(gradient, x)


# Tensor.backward(create_graph=True) and backward_steps reach these through tensor.py's _higher: tensor.py
# cannot import this file, which builds on it.
vars(_tensor._higher).update(root_tensor=root_tensor, vjp_in_graph=vjp_in_graph, arrays=arrays)
