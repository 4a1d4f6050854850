"""Every differentiable op: its forward and its local derivative, side by side.

Each op is a `Function`. Its docstring gives the local Jacobian in math and
how it is applied as a vector-Jacobian product: `g` is the gradient of the
loss with respect to the op's output, and `backward` returns the gradients
with respect to its inputs. No Jacobian matrix is ever built. Gradients may be
returned in the broadcast shape: the engine sums them back (tensor.py).
`rule` is the short form that `viz` writes on the graph; beside it,
`input_names` and `saved_names` name the inputs and the saved arrays as the
rule does (an op that declares none has one input, x, and saves nothing).

Each VJP is written once, against `self.xp`: the array module in a plain
backward, the engine's own ops under create_graph=True (autograd/higher.py),
when `saved_in_graph` hands `backward` the tensors its saved arrays came from,
so that the same lines build the gradient's graph. A fused op (a CUDA or numba
kernel, see kernels.fused) keeps its kernel for a plain backward; under
create_graph it runs its composed rule, the array-module lines beside the
kernel call, whose every step is an engine op. Where NumPy can only write in
place (x[key] += g), the rule calls `_add_at`, an op of its own on tensors.
"""
import math

from . import backend, kernels, tensor
from .tensor import Function, ShapeError, Tensor, enable_grad, no_grad


def _constants_only(op, inputs, out):
    """saved_in_graph of an op whose VJP reads no tensor of the graph: what it saved, if anything, is a constant
    of its rule (a mask, ids, tie counts), the same whichever way the inputs move."""
    return op.saved


def _inputs(op, inputs, out):
    """saved_in_graph of an op that saved its inputs, in order (Mul's x and y, Log's x)."""
    return inputs


def _output(op, inputs, out):
    """saved_in_graph of an op that saved its output z alone (exp, sqrt, tanh, sigmoid, softmax's p)."""
    return (out,)


def _rows(x):
    """x as a matrix: its last axis kept, the others flattened into rows. The rows are counted, not left to
    reshape's −1, which NumPy cannot infer beside an axis of length 0 ((2, 0) is 2 rows of nothing)."""
    return x.reshape(math.prod(x.shape[:-1]), x.shape[-1])


# ---- elementwise arithmetic --------------------------------------------------


class Add(Function):
    """z = x + y.   ∂z/∂x = ∂z/∂y = I, so dx = g and dy = g."""

    rule = "dx = g, dy = g"
    input_names = ("x", "y")
    saved_in_graph = _constants_only

    def forward(self, x, y):
        return x + y

    def backward(self, g):
        return g, g


class Sub(Function):
    """z = x − y.   ∂z/∂x = I, ∂z/∂y = −I, so dx = g and dy = −g."""

    rule = "dx = g, dy = −g"
    input_names = ("x", "y")
    saved_in_graph = _constants_only

    def forward(self, x, y):
        return x - y

    def backward(self, g):
        return g, (-g if self.needs_grad[1] else None)


class Neg(Function):
    """z = −x.   ∂z/∂x = −I, so dx = −g."""

    rule = "dx = −g"
    saved_in_graph = _constants_only

    def forward(self, x):
        return -x

    def backward(self, g):
        return -g


class Mul(Function):
    """z = x ⊙ y.   ∂z/∂x = diag(y), ∂z/∂y = diag(x), so dx = g ⊙ y and dy = g ⊙ x."""

    rule = "dx = g·y, dy = g·x"
    input_names, saved_names = ("x", "y"), ("x", "y")
    saved_in_graph = _inputs

    def forward(self, x, y):
        # each factor is read for the other's gradient only: x * 3 saves no x, so x changed in place before
        # backward is no reason to refuse it (dx = 3·g), as in PyTorch
        self.save(x if self.needs_grad[1] else None, y if self.needs_grad[0] else None)
        return x * y

    def backward(self, g):
        x, y = self.saved
        return (g * y if self.needs_grad[0] else None,
                g * x if self.needs_grad[1] else None)


class Div(Function):
    """z = x / y.   ∂z/∂x = diag(1/y), ∂z/∂y = diag(−x/y²), so dx = g / y and dy = −g ⊙ z / y."""

    rule = "dx = g/y, dy = −g·z/y"
    input_names, saved_names = ("x", "y"), ("y", "z")

    def forward(self, x, y):
        z = x / y
        self.save(y, z if self.needs_grad[1] else None)  # z is read for dy alone
        return z

    def saved_in_graph(self, inputs, out):
        return inputs[1], out

    def backward(self, g):
        y, z = self.saved
        dx = g / y
        return (dx if self.needs_grad[0] else None,
                -dx * z if self.needs_grad[1] else None)


class Pow(Function):
    """z = x ** y.   ∂z/∂x = diag(y x^(y−1)), ∂z/∂y = diag(z ln x)."""

    rule = "dx = g·y·x^(y−1), dy = g·z·ln x"
    input_names, saved_names = ("x", "y"), ("x", "y", "z")

    def forward(self, x, y):
        z = x ** y
        self.save(x, y, z if self.needs_grad[1] else None)  # z is read for dy alone
        return z

    def saved_in_graph(self, inputs, out):
        return (*inputs, out)

    def backward(self, g):
        x, y, z = self.saved
        dx = dy = None
        with backend.quiet_division(x):  # 0 · inf and ln 0 are computed below, then replaced
            if self.needs_grad[0]:
                # where y = 0, z = 1 for every x, so dx = 0, also at x = 0 where y x^(y−1) is 0 · inf (as PyTorch);
                # there the exponent is 0, not −1, so that no x^(−1) = inf is computed: under create_graph the
                # branch where did not pick is differentiated too, and its 0 · inf made (x ** 0)'' NaN at x = 0
                dx = self.xp.where(y == 0, 0, g * y * x ** (y - 1 + (y == 0)))
            if self.needs_grad[1]:
                # where x = 0 and y ≥ 0, dy = 0 as in PyTorch (z ln x → 0 as x → 0 for y > 0), not 0 · ln 0 = NaN
                dy = self.xp.where(self.xp.logical_and(x == 0, y >= 0), 0, g * z * self.xp.log(x))
        return dx, dy


class MatMul(Function):
    """Z = A @ B (NumPy's matmul: 1-D operands, stacked and broadcast batches).

    For one matrix pair, ∂L/∂A = G Bᵀ and ∂L/∂B = Aᵀ G. A 1-D operand is a
    row (A) or a column (B) whose added axis is dropped again from its gradient.
    """

    rule = "dA = G Bᵀ, dB = Aᵀ G"
    input_names, saved_names = ("A", "B"), ("A", "B")

    def forward(self, a, b):
        if a.ndim == 0 or b.ndim == 0:
            raise ShapeError(f"matmul: operands must have at least 1 dimension, got {a.shape} and {b.shape}; use * for scalars")
        inner_b = b.shape[0] if b.ndim == 1 else b.shape[-2]
        if a.shape[-1] != inner_b:
            raise ShapeError(
                f"matmul: cannot multiply {a.shape} by {b.shape}: the inner dimensions "
                f"{a.shape[-1]} and {inner_b} differ; transpose an operand or check the layer's in/out sizes")
        # NumPy's own refusal speaks of "remapped shapes" and "newaxis"
        if a.ndim > 2 and b.ndim > 2 and any(m != n and 1 not in (m, n)
                                             for m, n in zip(a.shape[-3::-1], b.shape[-3::-1])):
            raise ShapeError(f"matmul: cannot multiply {a.shape} by {b.shape}: the batch axes {a.shape[:-2]} and "
                             f"{b.shape[:-2]} do not broadcast (each axis equal, or 1 in one of them); reshape or "
                             "repeat an operand so its batches match")
        self.save(a, b)
        # rows @ matrix (the LM head): the CPU's product split over the threads, on a's rows flattened
        self.matmul = kernels.fused("matmul", b) if a.ndim >= 2 and b.ndim == 2 else None
        if self.matmul is not None:
            return self.matmul(_rows(a), b).reshape(*a.shape[:-1], b.shape[1])
        return a @ b

    def saved_in_graph(self, inputs, out):
        self.matmul = None  # the CPU's split product works on arrays: the graph's is an engine op
        return inputs

    def backward(self, g):
        a, b = self.saved
        a2 = a[None, :] if a.ndim == 1 else a
        b2 = b[:, None] if b.ndim == 1 else b
        # b's axis first: for 1-D @ 1-D, g is 0-d and gains the column axis, then the row axis
        if b.ndim == 1:
            g = g[..., None]
        if a.ndim == 1:
            g = g[..., None, :]
        matmul = self.matmul or self.xp.matmul
        pair = self.matmul is not None and all(self.needs_grad) and kernels.fused("matmul_pair", b)
        if pair:  # the CPU's dA and dB in one pass over the threads, as Linear's (a has rows, b is a matrix)
            da, db = pair(_rows(g), b.T, *self._weight_product(a, b, g))
            return da.reshape(a.shape), db.T if self._flipped(b) else db
        da = db = None
        if self.needs_grad[0]:
            if self.matmul is not None:
                da = self.matmul(_rows(g), b2.T).reshape(a.shape)
            else:
                da = g @ b2.swapaxes(-1, -2)
            if a.ndim == 1:
                da = da[..., 0, :]
        if self.needs_grad[1]:
            if b2.ndim == 2:
                db = matmul(*self._weight_product(a2, b2, g))
                db = db.T if self._flipped(b2) else db
            else:
                db = a2.swapaxes(-1, -2) @ g
            if b.ndim == 1:
                db = db[..., 0]
        return da, db

    @staticmethod
    def _flipped(b):
        """Whether B is a transposed view (the tied LM head's wteᵀ): dB is then built transposed, contiguous once
        the view's VJP transposes it back, so it adds into wte's other gradient streaming, not striding (3.5x
        faster for GPT-2's 50257 x 768). A tensor (create_graph) has no layout to stream."""
        layout = getattr(b, "flags", None)
        return layout is not None and layout.f_contiguous and not layout.c_contiguous

    @staticmethod
    def _weight_product(a, b, g):
        """The operands of dB's one GEMM over every row of the batch (instead of a stack of products summed
        afterwards): Aᵀ G, or (dB)ᵀ = Gᵀ A where B is _flipped."""
        a_rows, g_rows = _rows(a), _rows(g)
        return (g_rows.T, a_rows) if MatMul._flipped(b) else (a_rows.T, g_rows)


class Linear(Function):
    """y = x @ W + b, fused, with W of shape (in, out) and x of shape (..., in).

    dx = G Wᵀ, dW = xᵀ G summed over every row of the batch, db = Σ G over the
    rows. One op instead of a matmul and an add: one output array instead of
    two, and only x and W kept for backward. Every product runs on x and G
    flattened to 2-D rows: one GEMM instead of one per batch element, 15–25 %
    faster on the CPU and 4–6 times faster through CuPy on a GPU. On the CPU,
    where numba's threads are the only pool (kernels.cpu.SHARED_POOL), each
    product is split over them (forward's with the bias added by each block, and
    backward's dx and dW in one pass); with that pool or without, db's sum is the
    CPU kernel column_sum, in NumPy's order.
    """

    rule = "dx = G Wᵀ, dW = xᵀ G, db = Σ G"
    input_names, saved_names = ("x", "W", "b"), ("x", "W")

    def forward(self, x, weight, bias=None):
        self.save(x, weight)
        rows = _rows(x)
        # the CPU's product, split over the threads (the bias added by each); chosen by the weight's size, as a
        # token's x is one small row
        split = kernels.fused("matmul", weight)
        self.matmul = split or self.xp.matmul
        if split is not None:
            y = split(rows, weight, bias)  # (rows, out)
        else:
            y = rows @ weight  # (rows, out)
            if bias is not None:
                y += bias
        return y.reshape(*x.shape[:-1], weight.shape[1])

    def saved_in_graph(self, inputs, out):
        self.matmul = self.xp.matmul  # the engine's product: the split one computes on arrays only
        return inputs[:2]

    def backward(self, g):
        x, weight = self.saved
        rows = _rows(g)  # (rows, out)
        pair = self.matmul is not self.xp.matmul and all(self.needs_grad[:2]) and kernels.fused("matmul_pair", weight)
        if pair:  # the CPU's two products in one pass over the threads
            dx, dweight = pair(rows, weight.T, _rows(x).T, rows)
            dx = dx.reshape(x.shape)
        else:
            dx = self.matmul(rows, weight.T).reshape(x.shape) if self.needs_grad[0] else None
            dweight = self.matmul(_rows(x).T, rows) if self.needs_grad[1] else None
        if len(self.needs_grad) == 2:
            return dx, dweight
        if not self.needs_grad[2]:
            return dx, dweight, None
        column_sum = kernels.fused("column_sum", rows)  # the CPU's sum over the threads, with NumPy's bits
        return dx, dweight, backend.wide_sum(rows, axis=0) if column_sum is None else column_sum(rows)


# ---- elementwise functions ---------------------------------------------------


class Exp(Function):
    """z = eˣ.   ∂z/∂x = diag(z), so dx = g ⊙ z."""

    rule = "dx = g·z"
    saved_names = ("z",)
    saved_in_graph = _output

    def forward(self, x):
        z = self.xp.exp(x)
        self.save(z)
        return z

    def backward(self, g):
        return g * self.saved[0]


class Log(Function):
    """z = ln x.   ∂z/∂x = diag(1/x), so dx = g / x."""

    rule = "dx = g/x"
    saved_names = ("x",)
    saved_in_graph = _inputs

    def forward(self, x):
        self.save(x)
        return self.xp.log(x)

    def backward(self, g):
        return g / self.saved[0]


class Sqrt(Function):
    """z = √x.   ∂z/∂x = diag(1/(2z)), so dx = g / (2z)."""

    rule = "dx = g/(2z)"
    saved_names = ("z",)
    saved_in_graph = _output

    def forward(self, x):
        z = self.xp.sqrt(x)
        self.save(z)
        return z

    def backward(self, g):
        return g / (2 * self.saved[0])


class Tanh(Function):
    """z = tanh x.   ∂z/∂x = diag(1 − z²), so dx = g ⊙ (1 − z²)."""

    rule = "dx = g·(1 − z²)"
    saved_names = ("z",)
    saved_in_graph = _output

    def forward(self, x):
        z = self.xp.tanh(x)
        self.save(z)
        return z

    def backward(self, g):
        z = self.saved[0]
        return g * (1 - z * z)


class Sigmoid(Function):
    """z = 1 / (1 + e⁻ˣ).   ∂z/∂x = diag(z (1 − z)), so dx = g ⊙ z ⊙ (1 − z)."""

    rule = "dx = g·z·(1 − z)"
    saved_names = ("z",)
    saved_in_graph = _output

    def forward(self, x):
        xp = self.xp
        e = xp.exp(-xp.abs(x))  # never overflows; ½(tanh(x/2) + 1) would cancel for x ≪ 0 (σ(−40) came out 0)
        z = xp.where(x >= 0, 1, e) / (1 + e)  # 1/(1 + e⁻ˣ) for x ≥ 0, eˣ/(1 + eˣ) below: one division
        self.save(z)
        return z

    def backward(self, g):
        z = self.saved[0]
        return g * z * (1 - z)


class ReLU(Function):
    """z = max(x, 0).   ∂z/∂x = diag(1[x > 0]), so dx = g where x > 0, else 0; z > 0 exactly where x > 0,
    so backward reads the output it saved (its rule says so)."""

    rule = "dx = g·1[z > 0]"
    saved_names = ("z",)
    saved_in_graph = _constants_only  # z only masks g, and relu' = 1[x > 0] is flat on either side of 0

    def forward(self, x):
        z = self.xp.maximum(x, False)  # 0 of any kind: a bool x stays bool, as in add and mul (NumPy's 0 makes int64)
        self.save(z)
        return z

    def backward(self, g):
        return self.xp.where(self.saved[0] > 0, g, 0)


class GELU(Function):
    """GPT-2's GELU, the tanh approximation: z = ½ x (1 + tanh u), u = √(2/π) (x + 0.044715 x³).

    Since ½ (1 + tanh u) = σ(2u), z = x s with s = σ(2u) = 1 / (1 + e^(−2u)), and
    ∂z/∂x = s + x s (1 − s) · 2u′, u′ = √(2/π) (1 + 3·0.044715 x²), applied elementwise.
    The σ form costs one exp instead of a tanh (twice the price of exp in NumPy), and
    keeping s makes backward free of transcendentals.
    """

    rule = "dx = g·s·(1 + x(1−s)·2u′), s = σ(2u)"
    saved_names = ("x", "s")
    C = math.sqrt(2 / math.pi)
    A = 0.044715
    SATURATED = 40.0  # from |x| = 40 on, σ(2u) is exactly 1 (x > 0) or 0 (x < 0) in float16, float32 and float64

    def forward(self, x):
        # a subclass with its own backward reads (x, s) as saved below, so it keeps the composed forward
        kernel = kernels.fused("gelu_forward", x) if type(self).backward is GELU.backward else None
        if kernel is not None:
            self.save(x, None)  # the fused kernel (CUDA's or numba's) rebuilds s in backward
            return kernel(x)
        s = self._sigmoid_2u(x)
        self.save(x, s)
        return x * s

    def _sigmoid_2u(self, x):
        # −2u = ±inf once x³ overflows, and e^(−2u) = inf for x ≪ 0: they give s = 0 or 1, the right limits
        with backend.quiet_overflow(x):
            s = self.xp.multiply(x, x, out=self.xp.empty_like(x))  # out=: an array even for 0-d x
            s *= -2 * self.C * self.A
            s -= 2 * self.C
            s *= x  # −2u
            self.xp.exp(s, out=s)
        s += 1
        self.xp.reciprocal(s, out=s)  # s = σ(2u)
        return s

    def saved_in_graph(self, inputs, out):
        x = inputs[0]
        held = self.xp.clip(x, -self.SATURATED, self.SATURATED)  # the same s, whose graph's x³ cannot overflow
        return x, ((held * held * self.A + 1) * held * (2 * self.C)).sigmoid()  # s = σ(2u)

    def backward(self, g):
        x, s = self.saved
        if s is None:  # forward ran the fused kernel: its backward, or s rebuilt where the kernels were turned off
            kernel = kernels.fused("gelu_backward", x)
            if kernel is not None:
                return kernel(x, g)
            s = self._sigmoid_2u(x)
        # x·2u′ grows as x³ and overflows (float32 from |x| ≈ 1.2e13) where s is exactly 0 or 1, so that the
        # (1 − s) or s it meets is 0 and inf·0 made dx NaN; held at ±SATURATED, it is finite and dx exactly g or 0
        x = self.xp.clip(x, -self.SATURATED, self.SATURATED)
        dx = self.xp.multiply(x, x, out=self.xp.empty_like(x))
        dx *= 6 * self.C * self.A
        dx += 2 * self.C  # 2u′
        dx *= x
        dx *= 1 - s
        dx += 1
        dx *= s
        dx *= g
        return dx


# ---- reductions --------------------------------------------------------------


def _reduced_axes(ndim, axis):
    """The axes a reduction over `axis` (None, an int or a tuple) combines, as non-negative ints."""
    if axis is None or ndim == 0:  # a 0-d array has no axis to combine: NumPy takes its axis 0 (or −1) as none
        return tuple(range(ndim))
    return tuple(sorted({a % ndim for a in ((axis,) if isinstance(axis, int) else axis)}))


def _kept_shape(shape, axis):
    """The shape a reduction over `axis` has with keepdims=True."""
    axes = _reduced_axes(len(shape), axis)
    return tuple(1 if i in axes else n for i, n in enumerate(shape))


def _sum_last(xp, x):
    """Σ x over the last axis, kept as an axis of 1: a matrix-vector product with ones, which BLAS
    runs 3–4 times faster than the array module's reduction along a short last axis."""
    return (x @ xp.ones(x.shape[-1], dtype=x.dtype))[..., None]


class Sum(Function):
    """z = Σ x over `axis`.   ∂z/∂x is all ones, so dx = g copied along the summed axes.

    float16 is summed in float32 and rounded once (backend.wide_sum): no copy of x, and g needs none.
    """

    rule = "dx = broadcast(g)"
    saved_in_graph = _constants_only

    def forward(self, x, axis=None, keepdims=False):
        self.in_shape, self.kept = x.shape, _kept_shape(x.shape, axis)
        return backend.wide_sum(x, axis, keepdims)

    def backward(self, g):
        return self.xp.broadcast_to(g.reshape(self.kept), self.in_shape)


class Max(Function):
    """z = max x over `axis`.   ∂z/∂x picks the arg-max; tied maxima share the gradient equally."""

    rule = "dx = g·1[x = max]/#ties"
    saved_names = ("1[x = max]", "#ties")
    saved_in_graph = _constants_only

    def forward(self, x, axis=None, keepdims=False):
        if x.size == 0 and any(x.shape[a] == 0 for a in _reduced_axes(x.ndim, axis)):
            raise ShapeError(f"max: no maximum over an axis of length 0 (shape {x.shape}, axis {axis})")
        m = x.max(axis=axis, keepdims=True)
        winners = (x == m)
        self.save(winners, winners.sum(axis=axis, keepdims=True))
        self.kept = m.shape
        return m if keepdims else m.squeeze(axis=_reduced_axes(x.ndim, axis))

    def backward(self, g):
        winners, ties = self.saved
        return winners * (g.reshape(self.kept) / ties)


# ---- shape ops -----------------------------------------------------------------


class Reshape(Function):
    """z = x viewed with another shape.   The Jacobian is a permutation-free identity: dx = g reshaped back."""

    rule = "dx = reshape(g)"
    saved_in_graph = _constants_only

    def forward(self, x, shape):
        self.in_shape = x.shape
        return x.reshape(shape)

    def backward(self, g):
        return g.reshape(self.in_shape)


class Transpose(Function):
    """z = x with axes permuted.   dx = g with the inverse permutation."""

    rule = "dx = gᵀ"
    saved_in_graph = _constants_only

    def forward(self, x, axes=None):
        self.axes = tuple(range(x.ndim))[::-1] if axes is None else axes
        return x.transpose(self.axes)

    def backward(self, g):
        inverse = [0] * len(self.axes)
        for i, a in enumerate(self.axes):
            inverse[a % len(self.axes)] = i
        return g.transpose(inverse)


class GetItem(Function):
    """z = x[key].   dx is zero except at the picked positions, which receive g.

    With integer arrays a position can be picked twice, so the VJP is a
    scatter-*add* (each pick contributes), not an assignment.
    """

    rule = "dx = scatter-add(g)"

    def forward(self, x, key, advanced):
        self.key, self.advanced = key, advanced
        try:
            return x[key]
        except (IndexError, TypeError) as exc:  # TypeError: a slice's bound not an integer (0.5:2)
            raise IndexError(f"getitem: {exc} (tensor of shape {x.shape}); an index along an axis of length n lies "
                             f"in [-n, n), and at most {x.ndim} axes can be indexed (None and ... aside)") from None

    def saved_in_graph(self, inputs, out):
        self.advanced = True  # a tensor is never written in place: every key's scatter-add is the op AddAt
        return ()

    def backward(self, g):
        # laid out as x is: where x is a transposed view (GPT's q, k, v of one projection), so is dx, and the
        # transpose's and reshape's VJPs after this one are views instead of copies
        dx = self.xp.zeros_like(self.inputs[0].data, dtype=g.dtype)
        if self.advanced:
            return _add_at(dx, self.key, g)
        dx[self.key] = g  # a basic key picks each position once: into zeros, one write is the whole scatter-add
        return dx

    def backward_into(self, g, dx):
        if self.advanced:  # a position picked twice sums its picks first, as backward does: backward's bits
            dx += self.backward(g)
        else:
            dx[self.key] += g


class Concat(Function):
    """z = [x₁, x₂, …] joined along `axis`.   Each dxᵢ is its own slice of g."""

    rule = "dxᵢ = slice of g"
    saved_in_graph = _constants_only

    def forward(self, *xs, axis=0):
        self.axis = axis
        self.offsets = [0]
        for x in xs[:-1]:
            self.offsets.append(self.offsets[-1] + x.shape[axis])
        return self.xp.concatenate(xs, axis=axis)

    def backward(self, g):
        return tuple(self.xp.split(g, self.offsets[1:], axis=self.axis))


class Stack(Function):
    """z = [x₁, x₂, …] stacked along a new `axis`.   Each dxᵢ is g indexed at i on that axis."""

    rule = "dxᵢ = g[i]"
    saved_in_graph = _constants_only

    def forward(self, *xs, axis=0):
        self.axis = axis
        return self.xp.stack(xs, axis=axis)

    def backward(self, g):
        return tuple(self.xp.moveaxis(g, self.axis, 0))


class Where(Function):
    """z = a where cond else b.   da = g where cond (else 0), db = g where not cond."""

    rule = "da = g·cond, db = g·¬cond"
    input_names = ("a", "b")
    saved_in_graph = _constants_only

    def forward(self, a, b, cond):
        self.cond = cond
        return self.xp.where(cond, a, b)

    def backward(self, g):
        xp = self.xp
        return (xp.where(self.cond, g, 0) if self.needs_grad[0] else None,
                xp.where(self.cond, 0, g) if self.needs_grad[1] else None)


class Cast(Function):
    """z = x converted to another float dtype.   dx = g (the engine casts it back to x's dtype)."""

    rule = "dx = g"
    saved_in_graph = _constants_only

    def forward(self, x, dtype):
        return x.astype(dtype)

    def backward(self, g):
        return g


class ToDevice(Function):
    """z = x copied to another device.   dx = g copied back."""

    rule = "dx = g (copied back)"
    saved_in_graph = _constants_only

    def forward(self, x, device):
        self.source = backend.device_of(x)
        return backend.to_device(x, device)

    def backward(self, g):
        if isinstance(g, Tensor):  # under create_graph: the copy back is this op again, on the gradient
            return g.to(self.source)
        return backend.to_device(g, self.source)


class BroadcastTo(Function):
    """z = x broadcast to `shape` (NumPy's broadcast_to).   dx = g summed over the broadcast axes (the engine's
    reduction to x's shape). Sum's VJP under create_graph: a graph of it must be differentiated again."""

    rule = "dx = Σ g over the broadcast axes"
    saved_in_graph = _constants_only

    def forward(self, x, shape):
        return self.xp.broadcast_to(x, shape)

    def backward(self, g):
        return g  # in the broadcast shape: the engine sums it back


class AddAt(Function):
    """z = x with y added at `key`, a position picked twice getting both (a scatter-add).   dx = g, dy = g[key].

    The VJP of indexing and of an embedding lookup, as an op: NumPy writes it in
    place (np.add.at), which a gradient built under create_graph cannot be.
    """

    rule = "dx = g, dy = g[key]"
    input_names = ("x", "y")
    saved_in_graph = _constants_only

    def forward(self, x, y, key, repeats):
        self.key = key
        return _add_at(x.copy(), key, y, repeats)

    def backward(self, g):
        return (g if self.needs_grad[0] else None,
                g[self.key] if self.needs_grad[1] else None)


def _add_at(target, key, values, repeats=True):
    """`target` with `values` added at `key`, returned: the VJP of picking x[key] (a scatter-add).

    On arrays it writes into `target`: with `repeats` (integer arrays, which may
    pick a position twice) each pick adds (backend.scatter_add); without, `key`
    picks each position once and `+=` does it in one pass. On tensors, under
    create_graph, it is the op AddAt, whose own VJP picks the gradient at `key` again.
    """
    if isinstance(target, Tensor):
        return AddAt.apply(target, values if isinstance(values, Tensor) else target._lift(values),
                           key=key, repeats=repeats)
    if repeats:
        backend.scatter_add(target, key, values)
    else:
        target[key] += values
    return target


# ---- the fused ops of a transformer --------------------------------------------


def _check_ids(op, what, ids, limit, meaning, fix, ignore=None):
    """`ids` (but those equal to `ignore`) within [0, limit), before any kernel reads them: the GPU's and numba's
    index memory with them unchecked, and CuPy's indexing wraps them around. One reduction on the ids' device,
    whose answer the host then waits for (a GPU's ids included: a wrong id must not become a wrong row)."""
    outside = (ids < 0) | (ids >= limit)
    if ignore is not None:
        outside &= ids != ignore
    if outside.any():
        scored = ids if ignore is None else ids[ids != ignore]
        aside = "" if ignore is None else f", ignore_index={ignore} aside"
        raise IndexError(f"{op}: {what} must lie in [0, {limit}) ({meaning}{aside}); "
                         f"got values from {scored.min()} to {scored.max()}; {fix}")


def _hide(xp, x, mask):
    """x, in place, with −∞ where `mask` is False (hidden): softmax then gives those 0, as the kernels, which skip
    hidden scores. Put there, not added: a hidden inf or NaN plus −∞ is NaN, which spread over its row (a NaN in
    a key that the causal mask hides made every earlier query's output NaN)."""
    xp.copyto(x, -xp.inf, where=~mask)
    return x


def _softmax(xp, x, axis, mask=None, out=None):
    """(p, m, log_s): p = softmax(x) along `axis`, m the row maximum and log_s = log Σ exp(x − m) (axes kept), so
    that log Σ exp x = m + log_s: the one log-sum-exp of the ops.

    Computed as exp(x − m) / Σ exp(x − m), so nothing overflows. m and log_s
    are kept apart for log softmax x = (x − m) − log_s, as PyTorch computes it:
    added into a large m, log_s is lost (logits of 1e30 had every log
    probability 0, float32 logits near 1e4 were off by up to 5e-4). Masked entries
    (mask False) get p = 0 exactly; a row with nothing visible gives p = 0 and
    m = log_s = 0 instead of NaNs. A visible −inf is a score like any other: a
    row whose visible scores are all −inf is NaN, as without a mask (and as the
    attention kernels). p is written into `out` when given (x itself, when the
    caller owns x), else into a new array.
    """
    if x.ndim == 0:  # one number, p = 1 (as in PyTorch): as one row, since NumPy reduces a 0-d array to a scalar
        p, m, log_s = _softmax(xp, x.reshape(1), axis, None if mask is None else mask.reshape(1))
        return p.reshape(()), m.reshape(()), log_s.reshape(())
    if not x.size:  # nothing to normalise, and no maximum over an axis of length 0 to subtract (NumPy has none)
        p = xp.exp(x, out=xp.empty_like(x))  # empty; out= refuses an integer x, as the exp below does
        kept = x.sum(axis=axis, keepdims=True).shape
        return p, xp.zeros(kept, dtype=x.dtype), xp.full(kept, -xp.inf, dtype=x.dtype)  # log Σ over nothing
    if mask is not None:
        x = out = _hide(xp, x.copy() if out is None else out, mask)  # out is x itself, which the caller owns
    m = x.max(axis=axis, keepdims=True)
    if mask is not None:  # a row with nothing visible: exp(−inf − 0) = 0 instead of a NaN
        seen = mask.reshape((1,) * (x.ndim - mask.ndim) + mask.shape).any(axis=axis, keepdims=True)
        xp.copyto(m, 0, where=~seen)
    p = xp.subtract(x, m, out=out)
    xp.exp(p, out=p)
    s = _sum_last(xp, p) if axis in (-1, p.ndim - 1) else p.sum(axis=axis, keepdims=True)
    if mask is not None:
        xp.copyto(s, 1, where=s == 0)  # not s[s == 0] = 1: on a GPU, boolean indexing waits for the device
    p /= s
    return p, m, xp.log(s, out=s)


class Softmax(Function):
    """p = softmax(z) along `axis`, optionally masked (mask True = visible, masked p = 0).

    ∂p/∂z = diag(p) − p pᵀ, so dz = p ⊙ (g − Σ g ⊙ p).
    """

    rule = "diag(p) − ppᵀ: dz = p·(g − Σg·p)"
    input_names, saved_names = ("z",), ("p",)
    saved_in_graph = _output
    widens_float16 = True

    def forward(self, x, axis=-1, mask=None):
        p = _softmax(self.xp, x, axis, mask)[0]
        self.save(p)
        self.axis = axis
        return p

    def backward(self, g):
        p = self.saved[0]
        return p * (g - (g * p).sum(axis=self.axis, keepdims=True))


class LogSoftmax(Function):
    """y = z − log Σ exp z along `axis`.   ∂y/∂z = I − 1 pᵀ, so dz = g − p Σ g (p = softmax z, kept from forward)."""

    rule = "dz = g − p·Σg"
    input_names, saved_names = ("z",), ("p",)
    widens_float16 = True

    def forward(self, x, axis=-1):
        p, m, log_s = _softmax(self.xp, x, axis)
        self.save(p)
        self.axis = axis
        y = x - m
        y -= log_s
        return y

    def saved_in_graph(self, inputs, out):
        return (out.exp(),)  # p = e^y: softmax from log-softmax, a graph node of the output

    def backward(self, g):
        return g - self.saved[0] * g.sum(axis=self.axis, keepdims=True)


class CrossEntropy(Function):
    """L = −log softmax(z)[y] per row, fused with its softmax, over the last axis.

    ∂L/∂z = p − onehot(y): the softmax Jacobian and the log's 1/p cancel. With
    reduction="mean" it is divided by the number of rows whose target is not
    `ignore_index`; ignored rows get no gradient. With `classes`, only the
    first `classes` columns are classes (a vocabulary padded for the GPU's
    sake): the rest get no probability and a zero gradient. On a GPU one
    kernel (kernels/cuda.py's CROSS_ENTROPY_FORWARD) computes the losses and
    p − onehot(y) together (on the CPU, numba's twin in kernels/cpu.py), over
    z itself with `reuse_logits` (the caller promises not to read the logits
    again), so backward only scales it: in place on its last use, into a new
    array while the graph is kept (retain_graph, viz.trace).
    """

    rule = "dz = p − y"
    input_names, saved_names = ("logits",), ("p", "targets", "kept")
    fused_saved_names = ("p − y", "targets", "kept")  # the fused kernel's (CPU and GPU): p − onehot(y) alone
    widens_float16 = True

    def forward(self, logits, targets, ignore_index=None, reduction="mean", classes=None, reuse_logits=False):
        xp = self.xp
        vocab = logits.shape[-1]
        _check_ids("cross_entropy", "targets", targets, vocab if classes is None else classes,
                   "the number of classes", "each target is the index of its class on the logits' last axis: give "
                   "targets of the logits' own vocabulary (and ignore_index=k for rows marked k to skip)",
                   ignore_index)
        z = _rows(logits)
        t = targets.reshape(-1)
        valid = None if ignore_index is None else t != ignore_index
        count = len(t) if valid is None else xp.maximum(valid.sum(dtype=z.dtype), 1)  # stays on the device
        self.count, self.reduction, self.shape, self.fused = count, reduction, logits.shape, False
        kernel = kernels.fused("cross_entropy_forward", z)
        if kernel is not None:
            z = xp.ascontiguousarray(z)
            dz = z if reuse_logits else xp.empty_like(z)
            nll = kernel(z, t, vocab if classes is None else classes, ignore_index, dz)
            self.save(dz, None, None)  # p − onehot(y), zero in ignored rows and padded columns
            self.saved_names = self.fused_saved_names
            self.fused = True
        else:
            if valid is not None:
                t = xp.where(valid, t, 0)
            p, m, log_s = _softmax(xp, z if classes is None else z[:, :classes], 1)
            nll = log_s[:, 0] - (z[xp.arange(len(t)), t] - m[:, 0])
            if valid is not None:  # not nll *= valid: an ignored row's stand-in target 0 may be a −inf logit
                nll = xp.where(valid, nll, 0)
            self.save(p, t, valid)
        if reduction == "none":
            return nll.reshape(targets.shape)
        total = nll.sum()
        return total / count if reduction == "mean" else total

    def saved_in_graph(self, inputs, out):
        """p = softmax(z) as a tensor of the graph, for the composed rule (the kernel's p − y is an array)."""
        logits = inputs[0]
        if self.fused and backend.xp_for(logits.device).may_share_memory(self.saved[0], logits.data):
            # reuse_logits: the kernel wrote p − y over z, and a softmax of that would be a wrong p, silently
            raise RuntimeError(
                f"cross_entropy: with reuse_logits=True the fused kernel wrote its gradient over the logits (shape "
                f"{logits.shape}, {logits.dtype}), so their values are gone and this loss cannot be differentiated "
                "twice (create_graph=True); pass reuse_logits=False (a GPT: return_logits=True) where you need a "
                "second derivative")
        self.fused = False
        z, classes = _rows(logits), self.params["classes"]
        t, ignore_index = self.params["targets"].reshape(-1), self.params["ignore_index"]
        valid = None if ignore_index is None else t != ignore_index  # as forward's composed path reads them
        if valid is not None:
            t = backend.xp_for(inputs[0].device).where(valid, t, 0)
        return Softmax.apply(z if classes is None else z[:, :classes], axis=1), t, valid

    def backward(self, g):
        p, t, valid = self.saved
        if self.reduction == "none":
            scale = g.reshape(-1, 1)
        else:
            scale = g / self.count if self.reduction == "mean" else g
        if self.fused:  # the kernel's p − onehot(y), scaled; in place when it is its last use
            return self.xp.multiply(p, scale, out=p if self.last_use else None).reshape(self.shape)
        dz = p * scale
        rows = self.xp.arange(len(t))
        dz = _add_at(dz, (rows, t), -(scale[:, 0] if self.reduction == "none" else scale), repeats=False)  # −y
        if valid is not None:
            dz *= valid[:, None]
        if dz.shape[1] != self.shape[-1]:  # padded columns: no class, no gradient
            dz = self.xp.concatenate([dz, self.xp.zeros((len(dz), self.shape[-1] - dz.shape[1]), dz.dtype)], 1)
        return dz.reshape(self.shape)


class Embedding(Function):
    """z = W[ids]: row lookup.   dW = Σ over occurrences of each id of its g row (a scatter-add).

    `dW[ids] += g` would be wrong: for a token seen twice it keeps only one of
    the two gradients. The lesson's np.add.at point.
    """

    rule = "dW = scatter-add rows"
    input_names = ("W",)
    saved_in_graph = _constants_only

    def forward(self, weight, ids):
        _check_ids("embedding", "ids", ids, weight.shape[0], "the table's rows",
                   "an id past the table is one the model's vocabulary lacks: encode with the tokenizer the model "
                   "was made for, or give the table a row for every id")
        self.ids, self.weight_shape = ids, weight.shape
        return weight[ids]

    def backward(self, g):
        rows = _rows(g)
        kernel = kernels.fused("embedding_backward", rows)
        if kernel is not None:  # the CPU's: one pass adding each row of g into its id's row
            return kernel(self.ids.reshape(-1), rows, self.weight_shape[0])
        return _add_at(self.xp.zeros(self.weight_shape, dtype=g.dtype), self.ids.reshape(-1), rows)


class LayerNorm(Function):
    """y = x̂ ⊙ γ + β with x̂ = (x − μ) / σ over the last axis, σ = √(mean((x − μ)²) + ε): the biased
    variance (over n, not n − 1), with ε inside the root, as PyTorch's; σ and 1/σ below always include ε.

    With ĝ = g ⊙ γ, the closed-form VJP is
    dx = (ĝ − mean(ĝ) − x̂ ⊙ mean(ĝ ⊙ x̂)) / σ,  dγ = Σ g ⊙ x̂,  dβ = Σ g,
    γ's and β's sums running over every row. x̂ is kept from forward (cheaper
    than rebuilding it); the row means of ĝ and ĝ ⊙ x̂ are g γ / n and (g ⊙ x̂) γ / n,
    matrix-vector products that reuse the g ⊙ x̂ dγ sums. On a GPU two kernels
    (kernels/cuda.py's LAYER_NORM_FORWARD, LAYER_NORM_BACKWARD) do it from x and the
    saved μ and 1/σ: one launch forward, two backward (the second sums dγ, dβ);
    on the CPU numba's (kernels/cpu.py) do the same for float32 from 16K
    elements. Those paths save (x, (μ, 1/σ), γ) and name them so
    (`fused_saved_names`).
    """

    rule = "dx = (ĝ − mean ĝ − x̂·mean(ĝx̂))/σ"
    input_names, saved_names = ("x", "γ", "β"), ("x̂", "1/σ", "γ")
    fused_saved_names = ("x", "(μ, 1/σ)", "γ")  # what the fused kernels keep instead (CPU and GPU alike)
    widens_float16 = True

    def forward(self, x, weight, bias=None, eps=1e-5):
        # no features (x of shape (..., 0), as PyTorch takes it): each row's sums are over nothing, 0 whatever n
        # scales them by, and the outputs empty; 1/n must only not divide by 0
        xp, n = self.xp, max(x.shape[-1], 1)
        # the kernels are compiled for x's dtype and read γ and β as that: γ or β of another keeps the composed op
        same_dtype = weight.dtype == x.dtype and (bias is None or bias.dtype == x.dtype)
        self.kernel = kernels.fused("layer_norm_backward", x) if same_dtype else None
        if self.kernel is not None:
            # a GPU kernel reads x, γ and β through raw pointers, row-major from their first element
            x, weight = xp.ascontiguousarray(x), xp.ascontiguousarray(weight)
            bias = xp.zeros_like(weight) if bias is None else xp.ascontiguousarray(bias)
            y, stats = kernels.fused("layer_norm_forward", x)(x, weight, bias, eps)
            self.save(x, stats, weight)  # x, not x̂, and the rows' (μ, 1/σ) for the backward kernel
            self.saved_names = self.fused_saved_names
            return y
        mean = _sum_last(xp, x)
        mean *= 1 / n
        xhat = x - mean
        y = xhat * xhat
        rstd = _sum_last(xp, y)
        rstd *= 1 / n
        rstd += eps
        xp.sqrt(rstd, out=rstd)
        xp.reciprocal(rstd, out=rstd)
        xhat *= rstd
        self.save(xhat, rstd, weight)
        xp.multiply(xhat, weight, out=y)
        if bias is not None:
            y += bias
        return y

    def saved_in_graph(self, inputs, out):
        """(x̂, 1/σ, γ) as tensors of the graph, rebuilt from x, for the composed rule (the kernels keep μ, 1/σ)."""
        self.kernel = None
        x, weight = inputs[:2]
        centred = x - x.mean(axis=-1, keepdims=True)
        rstd = 1 / ((centred * centred).mean(axis=-1, keepdims=True) + self.params["eps"]).sqrt()
        return centred * rstd, rstd, weight

    def backward(self, g):
        xhat, rstd, weight = self.saved
        if self.kernel is not None:
            grads = self.kernel(self.xp.ascontiguousarray(g), xhat, weight, rstd)  # (dx, dγ, dβ)
            return tuple(d if need else None for d, need in zip(grads, self.needs_grad))
        n = max(xhat.shape[-1], 1)  # as forward's, for no features
        gxhat = g * xhat
        dweight = _rows(gxhat).sum(axis=0) if self.needs_grad[1] else None
        dbias = _rows(g).sum(axis=0) if len(self.needs_grad) == 3 and self.needs_grad[2] else None
        if not self.needs_grad[0]:
            return (None, dweight, dbias)[:len(self.needs_grad)]
        # Row sums of ĝ = g ⊙ γ and of ĝ ⊙ x̂ as matrix-vector products with γ: ĝ itself is built once, for dx
        dot = (gxhat @ weight)[..., None]
        dot *= 1 / n  # mean(ĝ ⊙ x̂)
        mean = (g @ weight)[..., None]
        mean *= 1 / n  # mean(ĝ)
        dx = g * weight
        dx -= mean
        gxhat = self.xp.multiply(xhat, dot, out=gxhat)
        dx -= gxhat
        dx *= rstd
        return (dx, dweight, dbias)[:len(self.needs_grad)]


def _dropout_mask(x, p):
    """m = 1[u ≥ p] / (1 − p) with u uniform from the device's seeded generator; all zeros when p = 1.

    The generators draw float32 or float64 only: a float16 x's u is drawn in float32."""
    drawn = x.dtype if x.dtype.itemsize >= 4 else "float32"
    keep = backend.generator(backend.device_of(x)).random(x.shape, dtype=drawn) >= p
    mask = keep.astype(x.dtype)
    mask *= 1 / (1 - p) if p < 1 else 0
    return mask


class Dropout(Function):
    """Inverted dropout: z = x ⊙ m, m = 1[u ≥ p] / (1 − p).   dx = g ⊙ m (the same mask)."""

    rule = "dx = g·mask, mask = 1[u ≥ p]/(1−p)"
    saved_names = ("mask",)
    saved_in_graph = _constants_only

    def forward(self, x, p):
        mask = _dropout_mask(x, p)
        self.save(mask)
        return x * mask

    def backward(self, g):
        return g * self.saved[0]


class ScaledDotProductAttention(Function):
    """O = P V with P = softmax(S, mask), S = Q Kᵀ / √D, on (B, H, T, D); dropout on P when training.

    Backward chains the pieces' VJPs: dV = Pᵀ G, dP = G Vᵀ,
    dS = P ⊙ (dP − Σⱼ dP ⊙ P) (softmax's diag(p) − ppᵀ), dQ = dS K / √D,
    dK = dSᵀ Q / √D. The row sums Σⱼ dPᵢⱼ Pᵢⱼ equal Gᵢ · Oᵢ (O = P V), a
    T × D product instead of a T × T one, as FlashAttention computes them.
    With dropout's mask M (1[u ≥ p]/(1 − p)), O = (P ⊙ M) V: dV = (P ⊙ M)ᵀ G and dP = G Vᵀ ⊙ M, the
    rest as written (Gᵢ · Oᵢ still equals Σⱼ dPᵢⱼ Pᵢⱼ).
    P is kept for backward while it is no larger than Q, K, V and O together
    (Tk ≤ 4D); a longer context keeps only the row log-sum-exps and rebuilds
    P = exp(S − lse) with one more matmul, for far less memory.

    Only the mask hides a key: a query that sees none (more queries than keys
    under the causal mask) has P = 0, so O = 0 and no gradient; a visible −inf
    score (an inf in Q or K) is a score, and a query whose visible scores are
    all −inf gets NaN, as softmax gives them. The kernels and the composed op alike.

    On a GPU, with the causal mask or none, S = Q Kᵀ and O = P V stay cuBLAS
    batched GEMMs and one kernel between them scales, masks and normalises S
    in place (kernels/cuda.py's ATTENTION_SOFTMAX_FORWARD); backward's
    dS = P ⊙ (dP − G·O) is one in-place kernel too (ATTENTION_SOFTMAX_BACKWARD).
    There P is kept while the device has memory to spare, else S is
    recomputed and normalised again. On the CPU, numba's twins of the two
    kernels (kernels/cpu.py) do the same for float32, P kept by the rule above;
    where their threads share one pool with BLAS (kernels.cpu.SHARED_POOL),
    without dropout, one kernel computes each head's S, P and O on a thread
    of its own, and one its four backward products (dV, dP, dQ, dK) and dS.

    float16 q, k, v are computed in float32, O and the gradients rounded
    once (Function.widens_float16), as PyTorch accumulates: in float16 S, P
    and the row sums were each rounded (over 2048 keys, O six times
    PyTorch's error); near scores of 1000, which float16 holds to 0.5, P
    (and the log-sum-exp kept to rebuild it) was tens of percent off.
    """

    rule = "dV = PᵀG, dS = P·(GVᵀ − G·O), dQ = dS K/√D, dK = dSᵀQ/√D"
    input_names, saved_names = ("q", "k", "v"), ("q", "k", "v", "O", "dropout mask", "P", "logsumexp")
    widens_float16 = True

    def forward(self, q, k, v, mask=None, dropout_p=0.0, causal=False):
        """`causal`: `mask` is the causal one, query i seeing keys up to i + Tk − Tq (the GPU kernel's own)."""
        # D = 0 (as PyTorch takes it): every score q·k is a sum over nothing, 0 whatever it is scaled by, so each
        # query averages the values it sees; 1/√D must only not divide by 0
        self.scale, self.mask = 1.0 / math.sqrt(max(q.shape[-1], 1)), mask
        # no keys (Tk = 0): the composed path's O = 0, where the GPU's launchers count rows as size // Tk; the
        # kernels are compiled for q's dtype and read K and V as that (a float64 V through float32 BLAS: NaNs)
        kernel = (kernels.fused("attention_softmax_forward", q)
                  if (mask is None or causal) and k.shape[-2] and q.dtype == k.dtype == v.dtype else None)
        self.kernels = None if kernel is None else (kernel, kernels.fused("attention_softmax_backward", q))
        if kernel is not None:
            # query i sees keys 0 … i + offset: Tk − Tq with the causal mask, all Tk without one
            self.offset = k.shape[-2] - q.shape[-2] if mask is not None else k.shape[-2]
            # the CPU's whole attention, each head on its own thread: 4-D, one K and V per query head, no dropout
            whole = (kernels.fused("attention_forward", q)
                     if not dropout_p and q.ndim == 4 and q.shape[:2] == k.shape[:2] == v.shape[:2] else None)
            self.kernels += (kernels.fused("attention_backward", q) if whole is not None else None,)
            if whole is not None:
                p, out = whole(q, k, v, self.offset, self.scale)
                drop = None
            else:
                p = kernel(q @ k.swapaxes(-1, -2), self.offset, self.scale)  # S by cuBLAS, then P over it in place
                drop = _dropout_mask(p, dropout_p) if dropout_p else None
                out = (p if drop is None else p * drop) @ v
            keep_p = any(self.needs_grad) and (p.shape[-1] <= 4 * q.shape[-1] if backend.device_of(q) == "cpu"
                                               else 2 * p.nbytes <= backend.free_memory())  # a GPU: if 2× P is free
            self.save(q, k, v, out, drop, p if keep_p else None, None)
            return out
        scores = (q * self.scale) @ k.swapaxes(-1, -2)  # (B, H, Tq, Tk)
        p, m, lse = _softmax(self.xp, scores, -1, mask, out=scores)
        lse += m  # log Σ exp S, for P = exp(S − lse) again in backward
        drop = _dropout_mask(p, dropout_p) if dropout_p else None
        out = (p if drop is None else p * drop) @ v  # (B, H, Tq, Dv)
        keep_p = p.shape[-1] <= 4 * q.shape[-1]
        self.save(q, k, v, out, drop, p if keep_p else None, lse)
        return out

    def saved_in_graph(self, inputs, out):
        """(Q, K, V, O, the dropout mask, P) with P = softmax(S, mask) and O = P V rebuilt as tensors of the graph,
        for the composed rule (the kernels' P is an array). O is rebuilt, not read from the output: a float16
        output is O rounded, and dS = P ⊙ (dP − G·O) cancels (for scores near 1300, dQ came out 55 % off where the
        plain backward's, from float32 O, was 0.03 %)."""
        self.kernels = None
        q, k, v = inputs
        p = Softmax.apply((q * self.scale) @ k.swapaxes(-1, -2), axis=-1, mask=self.mask)
        drop = self.saved[4]
        return q, k, v, (p if drop is None else p * drop) @ v, drop, p, None

    def backward(self, g):
        if self.kernels is not None:
            return self._fused_backward(g)
        q, k, v, out, drop, p, lse = self.saved
        xp = self.xp
        if p is None:
            p = (q * self.scale) @ k.swapaxes(-1, -2)
            if self.mask is not None:
                _hide(xp, p, self.mask)
            p -= lse
            p = xp.exp(p, out=p)  # P again, exactly 0 where masked
        dq = dk = dv = None
        if self.needs_grad[2]:
            dv = (p if drop is None else p * drop).swapaxes(-1, -2) @ g
        if self.needs_grad[0] or self.needs_grad[1]:
            ds = g @ v.swapaxes(-1, -2)  # dP
            if drop is not None:
                ds *= drop
            ds -= _sum_last(xp, g * out)  # Σⱼ dPᵢⱼ Pᵢⱼ = Gᵢ · Oᵢ
            ds *= p
            if self.needs_grad[0]:
                dq = ds @ k
                dq *= self.scale
            if self.needs_grad[1]:
                dk = ds.swapaxes(-1, -2) @ q
                dk *= self.scale
        return dq, dk, dv

    def _fused_backward(self, g):
        """The kernels' path (CUDA's, or numba's twins on the CPU): GEMMs around one in-place kernel for dS (its 1/√D
        folded in), or on the CPU's shared pool the whole backward in one kernel."""
        q, k, v, out, drop, p, _ = self.saved
        forward, backward, whole = self.kernels
        if p is None:
            p = forward(q @ k.swapaxes(-1, -2), self.offset, self.scale)
        if whole is not None:
            return tuple(d if need else None
                         for d, need in zip(whole(q, k, v, p, out, g, self.offset, self.scale), self.needs_grad))
        dq = dk = dv = None
        if self.needs_grad[2]:
            dv = (p if drop is None else p * drop).swapaxes(-1, -2) @ g
        if self.needs_grad[0] or self.needs_grad[1]:
            dp = g @ v.swapaxes(-1, -2)
            if drop is not None:
                dp *= drop
            ds = backward(dp, p, self.xp.ascontiguousarray(g), out, self.offset, self.scale)
            dq = ds @ k if self.needs_grad[0] else None
            dk = ds.swapaxes(-1, -2) @ q if self.needs_grad[1] else None
        return dq, dk, dv


class Checkpoint(Function):
    """y = fn(x₁, …, xₙ), its activations recomputed in backward instead of kept (activation checkpointing).

    The Jacobian is fn's own: ∂y/∂xᵢ, whatever ops fn records. Forward runs fn
    without recording and keeps only the inputs (and the random generator's
    state, so dropout draws the same masks again); the caller's activations fn
    reads (tensors it closes over that ops outside it made) become inputs too.
    Backward runs fn once more with recording on, from leaves holding the
    inputs' values (fn's reads of those activations moved onto leaves too), and
    backpropagates g through that graph: the parameters fn reads accumulate
    their gradients as they would have, and the leaves' gradients are the VJP
    for the inputs. Bit for bit the unchecked pass, for twice fn's forward cost.
    """

    rule = "recompute fn, then backward through it"
    runs_user_code = True
    # The ids of the activations fn closes over, the last inputs, as fn reads them: in the recompute of a
    # checkpoint around this one, stand-ins of that checkpoint's take their places among the inputs
    read_ids = ()

    @classmethod
    def apply(cls, *inputs, **params):
        """Function.apply, then the caller's activations fn read as it ran (Function.apply notes those that
        unrecorded ops read) added to the op's inputs: the outer backward reaches them after this op, once, and
        adds the gradients its backward returns for them to their others."""
        outer, tensor._mode.reads = tensor._mode.reads, {}
        try:
            out = super().apply(*inputs, **params)
            reads = tuple(tensor._mode.reads.values())
        finally:
            tensor._mode.reads = outer
        if reads and out.op is not None:
            out.op.inputs += reads
            out.op.needs_grad += (True,) * len(reads)
            out.op.read_ids = tuple(map(id, reads))
        return out

    def saved_in_graph(self, inputs, out):
        raise RuntimeError(
            "checkpoint: its backward recomputes fn on leaves of a graph of its own and adds into fn's parameters' "
            ".grad as it goes, so its gradient cannot be differentiated again (create_graph=True); call fn itself, "
            "without ag.checkpoint, where you need a second derivative")

    def forward(self, *xs, fn, device, n_inputs):
        self.fn, self.device, self.n_inputs, self.rng = fn, device, n_inputs, backend.snapshot_rng(device)
        self.host_rngs = backend.snapshot_host_rngs()  # user code draws from these too
        with no_grad():  # a module in fn enters its name scope all the same under anomaly mode, which reports it
            out = fn(*[Tensor(x) for x in xs[:n_inputs]])  # the rest are params fn reads itself
        if not isinstance(out, Tensor):
            raise TypeError(f"checkpoint: fn must return one Tensor, got {type(out).__name__}")
        return out.data

    def backward(self, g):
        if tensor._mode.grad_only:
            raise RuntimeError(
                "checkpoint: its backward adds the gradients of fn's parameters into their .grad, as backward() "
                "does, so ag.grad (which returns gradients and writes no .grad) cannot go through it; call "
                "loss.backward(), or call fn without ag.checkpoint where you need ag.grad")
        n, reads = self.n_inputs, self.inputs[len(self.inputs) - len(self.read_ids):]
        leaves = [Tensor(x.data, requires_grad=need) for x, need in zip(self.inputs[:n], self.needs_grad)]
        stand_ins = {read: Tensor(x.data, requires_grad=True) for read, x in zip(self.read_ids, reads)}
        first = next(tensor._recorded)  # the recompute's ops are numbered from here on
        # recording on: a backward() called inside no_grad() still needs fn's graph to go through
        with backend.replaying(self.device, self.rng), backend.replaying_host(self.host_rngs), enable_grad():
            out = self.fn(*leaves)
        if out.requires_grad:
            self._end_at_stand_ins(out, first, stand_ins)
            if self.changes != tensor._changes:  # a tensor changed since the forward: did fn read it?
                self._refuse_changed_reads(out)
            out.backward(g)  # fn's parameters (params= among them) accumulate their own gradients here
        return (*(leaf.grad if need else None for leaf, need in zip(leaves, self.needs_grad)),
                *(None,) * (len(self.inputs) - n - len(reads)), *(stand_ins[read].grad for read in self.read_ids))

    def _end_at_stand_ins(self, out, first, stand_ins):
        """Make each op of the recompute (those numbered from `first` on) that reads one of the caller's
        activations read its stand-in instead, a leaf holding the same array: the recompute's backward then stops
        there and leaves the caller's graph to the outer pass, which owns it (a pass of its own through it would
        free it before or after the outer one goes through it), and the stand-in's gradient is this op's VJP for
        that input. An activation the forward did not read has no stand-in and is refused."""
        stack, seen = [out], set()
        while stack:
            t = stack.pop()
            if t.op is None or id(t) in seen:
                continue
            seen.add(id(t))
            t.op.inputs = tuple(x if x.op is None or x.op.number >= first else self._stand_in(x, stand_ins)
                                for x in t.op.inputs)
            stack.extend(t.op.inputs)

    def _stand_in(self, x, stand_ins):
        if id(x) not in stand_ins:
            where = f" in {self.scope}" if self.scope else ""
            raise RuntimeError(
                f"backward: {self.name}{where}: fn's recompute reads {f'{x.name!r}' if x.name else 'a tensor'} "
                f"(shape {x.shape}, made by {x.op.name} outside fn) that requires grad, which its forward did not "
                "read, so the gradient could not reach it; fn must read the same tensors when it runs again: pass "
                "this one to checkpoint as an input, checkpoint(fn, x, it), with fn taking it as an argument")
        return stand_ins[id(x)]

    def _refuse_changed_reads(self, out):
        """Refuse a recompute that read a tensor changed since the forward, an input or not (a weight fn closes
        over, after an optimizer step): the recomputed gradients would be the new values'. The recorded graph
        names every tensor fn read. A leaf's memory is checked too, as a change through another tensor sharing it
        (a view, detach()) changes it as well: the inputs and the weights fn reads have lived since the forward,
        as _changed_since needs, where the recompute's results are new memory. (A constant fn makes anew is a
        leaf too: it could sit where an array changed and freed since was, a refusal too many, never one too few.)"""
        changed = tensor._changed_since(self.changes)
        for t in tensor.topological_order(out):
            for x in t.op.inputs if t.op is not None else ():
                if x._version > self.changes or x._op is None and any(
                        tensor._overlap(tensor._span(x._data), c) for c in changed):
                    where = f" in {self.scope}" if self.scope else ""
                    raise RuntimeError(
                        f"backward: {self.name}{where}: {f'{x.name!r}' if x.name else 'a tensor'} (shape {x.shape}), "
                        "which fn reads, was changed after the forward (an optimizer's step, or `.data -= ...`), so "
                        "the recompute would use its new values; call backward() before opt.step(), or run the "
                        "forward again")
