"""Every op to second order: a gradient built with create_graph=True, differentiated again, against central finite
differences of the first gradient (float64) and against torch.autograd.grad(..., create_graph=True); a third
order on tanh, exp and softmax.

Each case is L = Σ v ⊙ f(x)³ for an op f: then ∂L/∂x = Jᵀ(3v ⊙ f²), whose own derivative needs both the op's
VJP recorded as ops (J does not depend on g, but it carries it) and its dependence on what the op saved. The
second derivative checked is that of S = Σᵢ ⟨wᵢ, ∂L/∂xᵢ⟩ for fixed random wᵢ: H w, one double backward.
"""
import re
import zlib

import numpy as np
import pytest

import autograd as ag
from autograd import Function, Tensor, ops, topological_order

from ._helpers import away_from_zero, leaf, positive, rand

torch = pytest.importorskip("torch", reason='the references need PyTorch: pip install -e ".[interop]"')
F = torch.nn.functional

BROADCAST_PAIRS = [((3,), (3,)), ((2, 3), (3,)), ((2, 3), (2, 1)), ((2, 1, 3), (4, 1)), ((), (2, 3))]


def _binary(name, sx, sy):
    def make(rng):
        if name == "pow":
            return [positive(rng, *sx), rand(rng, *sy, low=-1.5, high=1.5)]
        if name == "div":
            return [rand(rng, *sx), away_from_zero(rng, *sy, margin=0.5)]
        return [rand(rng, *sx), rand(rng, *sy)]
    fn = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
          "div": lambda a, b: a / b, "pow": lambda a, b: a ** b}[name]
    return f"{name}{sx}{sy}", make, fn, fn


def _unary(name, ours, theirs, make=rand, shape=(2, 3)):
    return name, lambda rng: [make(rng, *shape)], ours, theirs


def _distinct(rng, *shape):
    """Distinct values: max has one winner, and finite differences do not straddle a tie."""
    return leaf(rng.permutation(int(np.prod(shape))).reshape(shape) / 7.0)


def _reduction(name, axis, keepdims):
    def theirs(t):
        dims = tuple(range(t.ndim)) if axis is None else axis
        if name == "var":
            return torch.var(t, dim=dims, correction=0, keepdim=keepdims)
        if name == "max":
            return torch.amax(t, dim=dims, keepdim=keepdims)
        return getattr(torch, name)(t, dim=dims, keepdim=keepdims)
    return (f"{name}-{axis}-{keepdims}", lambda rng: [_distinct(rng, 2, 3, 4)],
            lambda x: getattr(x, name)(axis=axis, keepdims=keepdims), theirs)


MASK = np.array([[True, False, True, True], [False, False, False, False], [True, True, False, True]])
IDS = np.array([[0, 4, 0], [2, 2, 2]])
TARGETS = np.array([[1, -100, 3], [-100, 0, 2]])
KEY = np.array([2, 0, 2, 2])


def _masked_softmax(t):
    """PyTorch's softmax with the rows nothing is visible in giving zeros, as ag.softmax's do (not NaN)."""
    mask = torch.tensor(MASK)
    return torch.softmax(t.masked_fill(~mask, -1e30), -1) * mask


def _attention(causal, tq, tk):
    def make(rng):
        return [rand(rng, 1, 2, tq, 3), rand(rng, 1, 2, tk, 3), rand(rng, 1, 2, tk, 2)]

    def theirs(q, k, v):
        mask = torch.arange(tk)[None, :] <= torch.arange(tq)[:, None] + (tk - tq) if causal else None
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return (f"attention-causal{causal}-{tq}x{tk}", make,
            lambda q, k, v: ag.scaled_dot_product_attention(q, k, v, causal=causal), theirs)


def _cross_entropy(reduction, ignore):
    def ours(z):
        return ag.cross_entropy(z, TARGETS if ignore else np.abs(TARGETS) % 4, ignore_index=-100 if ignore else None,
                                reduction=reduction)

    def theirs(z):
        t = torch.tensor(TARGETS if ignore else np.abs(TARGETS) % 4)
        loss = F.cross_entropy(z.reshape(-1, 4), t.reshape(-1), ignore_index=-100, reduction=reduction)
        return loss.reshape(t.shape) if reduction == "none" else loss
    return f"cross_entropy-{reduction}-ignore{ignore}", lambda rng: [rand(rng, 2, 3, 4)], ours, theirs


def _dropout_mask():
    ag.manual_seed(7)
    return ag.dropout(ag.ones(4, 5, dtype=np.float64), 0.4).numpy()


def _dropout(t):
    ag.manual_seed(7)  # the same mask in every evaluation
    return ag.dropout(t, 0.4)


GELU_TORCH = (lambda x: x.gelu(), lambda t: F.gelu(t, approximate="tanh"))

CASES = [
    *[_binary(op, sx, sy) for op in ("add", "sub", "mul", "div", "pow") for sx, sy in BROADCAST_PAIRS],
    ("rpow", lambda rng: [rand(rng, 3)], lambda x: 2.0 ** x, lambda t: 2.0 ** t),
    ("rdiv", lambda rng: [away_from_zero(rng, 3)], lambda x: 3.0 / x, lambda t: 3.0 / t),
    _unary("neg", lambda x: -x, lambda t: -t),
    _unary("exp", lambda x: x.exp(), torch.exp),
    _unary("log", lambda x: x.log(), torch.log, positive),
    _unary("sqrt", lambda x: x.sqrt(), torch.sqrt, positive),
    _unary("tanh", lambda x: x.tanh(), torch.tanh),
    _unary("sigmoid", lambda x: x.sigmoid(), torch.sigmoid),
    _unary("relu", lambda x: x.relu(), torch.relu, away_from_zero),
    _unary("gelu", *GELU_TORCH),
    _unary("gelu-far-out", *GELU_TORCH, make=lambda rng, *s: leaf(rng.uniform(-9, 9, s))),
    *[("matmul" + str(sa) + str(sb), lambda rng, sa=sa, sb=sb: [rand(rng, *sa), rand(rng, *sb)],
       lambda a, b: a @ b, lambda a, b: a @ b)
      for sa, sb in [((3,), (3,)), ((2, 3), (3,)), ((3,), (3, 2)), ((2, 3), (3, 4)), ((2, 2, 3), (3, 4)),
                     ((2, 1, 3, 4), (2, 4, 2))]],
    ("matmul-transposed-weight", lambda rng: [rand(rng, 2, 4), rand(rng, 5, 4)],
     lambda x, w: x @ w.T, lambda x, w: x @ w.T),
    ("linear", lambda rng: [rand(rng, 2, 3, 4), rand(rng, 4, 2), rand(rng, 2)], ag.linear, lambda x, w, b: x @ w + b),
    ("linear-no-bias", lambda rng: [rand(rng, 3, 4), rand(rng, 4, 2)], ag.linear, lambda x, w: x @ w),
    *[_reduction(name, axis, keepdims) for name in ("sum", "mean", "max", "var")
      for axis, keepdims in ((None, False), (1, False), ((0, 2), True))],
    ("reshape", lambda rng: [rand(rng, 2, 6)], lambda x: x.reshape(3, 4).tanh(), lambda t: t.reshape(3, 4).tanh()),
    ("transpose", lambda rng: [rand(rng, 2, 3, 4)], lambda x: x.transpose(2, 0, 1) * x.T.transpose(0, 2, 1),
     lambda t: t.permute(2, 0, 1) * t.permute(2, 1, 0).permute(0, 2, 1)),
    ("swapaxes", lambda rng: [rand(rng, 2, 3)], lambda x: x.swapaxes(0, 1).exp(), lambda t: t.T.exp()),
    ("getitem-basic", lambda rng: [rand(rng, 3, 4)], lambda x: x[1:, ::2] * x[None, 0, 1:3].sum(),
     lambda t: t[1:, ::2] * t[None, 0, 1:3].sum()),
    ("getitem-repeated", lambda rng: [rand(rng, 3, 4)], lambda x: x[KEY] * x[[0, 0, 1], [1, 1, 3]].sum(),
     lambda t: t[torch.tensor(KEY)] * t[[0, 0, 1], [1, 1, 3]].sum()),
    ("getitem-bool", lambda rng: [rand(rng, 3, 4)], lambda x: x[MASK].exp(), lambda t: t[torch.tensor(MASK)].exp()),
    *[(f"softmax-axis{axis}", lambda rng: [rand(rng, 3, 4)], lambda x, a=axis: x.softmax(axis=a),
       lambda t, a=axis: torch.softmax(t, a)) for axis in (-1, 0)],
    ("softmax-masked", lambda rng: [rand(rng, 2, 3, 4)], lambda x: ag.softmax(x, mask=MASK), _masked_softmax),
    ("log_softmax", lambda rng: [rand(rng, 3, 4)], lambda x: x.log_softmax(), lambda t: torch.log_softmax(t, -1)),
    *[_cross_entropy(reduction, ignore) for reduction in ("mean", "sum", "none") for ignore in (False, True)],
    ("cross_entropy-padded-classes", lambda rng: [rand(rng, 3, 5)],
     lambda z: ag.cross_entropy(z, np.array([0, 2, 1]), classes=3),
     lambda z: F.cross_entropy(z[:, :3], torch.tensor([0, 2, 1]))),
    ("embedding", lambda rng: [rand(rng, 5, 3)], lambda w: ag.embedding(w, IDS).tanh(),
     lambda w: F.embedding(torch.tensor(IDS), w).tanh()),
    *[(f"layer_norm{shape}-bias{bias}", lambda rng, s=shape, b=bias: [rand(rng, *s), rand(rng, s[-1])]
       + ([rand(rng, s[-1])] if b else []), ag.layer_norm,
       lambda x, w, b=None: F.layer_norm(x, x.shape[-1:], w, b, eps=1e-5))
      for shape, bias in (((2, 5), True), ((2, 3, 4), False))],
    ("dropout", lambda rng: [rand(rng, 4, 5)], lambda x: _dropout(x).exp(),
     lambda t: (t * torch.tensor(_dropout_mask())).exp()),
    *[_attention(causal, tq, tk) for causal in (True, False) for tq, tk in ((3, 3), (2, 4))],
    ("attention-long-context", lambda rng: [rand(rng, 1, 1, 2, 1), rand(rng, 1, 1, 6, 1), rand(rng, 1, 1, 6, 2)],
     ag.scaled_dot_product_attention,
     lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=torch.arange(6)[None] <= torch.arange(2)[:, None] + 4)),
    ("concat", lambda rng: [rand(rng, 2, 1), rand(rng, 2, 3)], lambda a, b: ag.concat([a, b.exp()], axis=1),
     lambda a, b: torch.cat([a, b.exp()], 1)),
    ("stack", lambda rng: [rand(rng, 2, 3), rand(rng, 2, 3)], lambda a, b: ag.stack([a, a * b], axis=1),
     lambda a, b: torch.stack([a, a * b], 1)),
    ("split", lambda rng: [rand(rng, 3, 4)], lambda x: ag.split(x, [1, 3], axis=1)[1] * ag.split(x, 3)[2][:, 1:3],
     lambda t: torch.tensor_split(t, [1, 3], 1)[1] * torch.tensor_split(t, 3)[2][:, 1:3]),
    ("where", lambda rng: [rand(rng, 2, 3), rand(rng, 3)], lambda a, b: ag.where(MASK[:2, :3], a * b, b.exp()),
     lambda a, b: torch.where(torch.tensor(MASK[:2, :3]), a * b, b.exp())),
    ("to-device", lambda rng: [rand(rng, 3)], lambda x: ops.ToDevice.apply(x.exp(), device="cpu"), torch.exp),
    # 0-d: the reductions their VJPs make over axis −1 of nothing (NumPy's and PyTorch's axis of a 0-d array)
    ("softmax-0d", lambda rng: [rand(rng)], lambda x: x.softmax() * x, lambda t: torch.softmax(t, -1) * t),
    ("log_softmax-0d", lambda rng: [rand(rng)], lambda x: x.log_softmax() + x, lambda t: torch.log_softmax(t, -1) + t),
    ("sum-max-0d", lambda rng: [rand(rng)], lambda x: x.sum(axis=-1) * x.max(axis=0),
     lambda t: t.sum(-1) * t.amax(0)),
    # x ** 0 at x = 0: its VJP's x^(y−1) = 0^(−1) = inf, unpicked first order, made the second NaN
    ("pow-exponent-0-at-0", lambda rng: [leaf([0.0, 1.5, -2.0])], lambda x: x ** 0 * x + x ** 2,
     lambda t: t ** 0 * t + t ** 2),
]
IDS_ = [c[0] for c in CASES]


def _cubed_head(out, v):
    return (out * out * out * v).sum()


def engine_second_order(fn, xs, v, ws):
    """(∂L/∂xᵢ by a plain backward, the same under create_graph, ∂S/∂xⱼ by a double backward), as arrays."""
    plain = ag.grad(_cubed_head(fn(*xs), v), xs, allow_unused=True)
    grads = ag.grad(_cubed_head(fn(*xs), v), xs, create_graph=True, allow_unused=True)
    terms = [(g * w).sum() for g, w in zip(grads, ws) if g is not None and g.requires_grad]
    second = ag.grad(sum(terms[1:], terms[0]), xs, allow_unused=True)
    zeros = [np.zeros(x.shape) for x in xs]
    return ([z if g is None else g.data for g, z in zip(plain, zeros)],
            [z if g is None else g.data for g, z in zip(grads, zeros)],
            [z if h is None else h.data for h, z in zip(second, zeros)])


def torch_second_order(fn, xs, v, ws):
    ts = [torch.tensor(x.data, requires_grad=True) for x in xs]
    grads = torch.autograd.grad(_cubed_head(fn(*ts), torch.tensor(v)), ts, create_graph=True, allow_unused=True)
    s = sum((g * torch.tensor(w)).sum() for g, w in zip(grads, ws) if g is not None and g.requires_grad)
    second = torch.autograd.grad(s, ts, allow_unused=True)
    return ([np.zeros(x.shape) if g is None else g.detach().numpy() for g, x in zip(grads, xs)],
            [np.zeros(x.shape) if h is None else h.numpy() for h, x in zip(second, xs)])


def numeric_second_order(fn, xs, v, ws, eps=1e-6):
    """∂S/∂xⱼ by central differences of S = Σᵢ ⟨wᵢ, ∂L/∂xᵢ⟩, each ∂L/∂xᵢ from a plain (first-order) backward."""
    def s():
        grads = ag.grad(_cubed_head(fn(*xs), v), xs, allow_unused=True)
        return sum(float((g.data * w).sum()) for g, w in zip(grads, ws) if g is not None)
    result = []
    for x in xs:
        flat, numeric = x.data.reshape(-1), np.zeros(x.size)
        for i in range(x.size):
            original = flat[i]
            flat[i] = original + eps
            plus = s()
            flat[i] = original - eps
            minus = s()
            flat[i] = original
            numeric[i] = (plus - minus) / (2 * eps)
        result.append(numeric.reshape(x.shape))
    return result


def _seeds(rng, fn, xs):
    out = fn(*xs)
    return rng.standard_normal(out.shape), [rng.standard_normal(x.shape) for x in xs]


@pytest.mark.parametrize("name, make, fn, torch_fn", CASES, ids=IDS_)
def test_second_order_against_finite_differences_and_torch(name, make, fn, torch_fn):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    xs = make(rng)
    v, ws = _seeds(rng, fn, xs)
    plain, first, second = engine_second_order(fn, xs, v, ws)
    for a, b in zip(plain, first):  # create_graph changes the numbers by rounding at most
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-13)
    their_first, their_second = torch_second_order(torch_fn, xs, v, ws)
    for ours, theirs in zip(first, their_first):
        np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)
    for ours, theirs, numeric in zip(second, their_second, numeric_second_order(fn, xs, v, ws)):
        np.testing.assert_allclose(ours, theirs, rtol=1e-9, atol=1e-11)
        np.testing.assert_allclose(ours, numeric, rtol=1e-5, atol=1e-6)
    assert any(np.abs(s).max() > 1e-3 for s in second), f"{name}: the second derivative checked is all zero"


def test_the_cases_reach_every_op_and_every_op_their_gradients_use():
    reached = set()
    for name, make, fn, _ in CASES:
        xs = make(np.random.default_rng(0))
        out = fn(*xs)
        reached |= {type(t.op) for t in topological_order(out) if t.op is not None}
        grads = ag.grad(_cubed_head(out, 1.0), xs, create_graph=True, allow_unused=True)
        for g in grads:
            if g is not None and g.requires_grad:
                reached |= {type(t.op) for t in topological_order(g) if t.op is not None}
    every = {c for c in vars(ops).values() if isinstance(c, type) and issubclass(c, Function)} - {Function}
    # Cast's own test follows (float32 between float64s); Checkpoint raises instead (test_errors below)
    assert every - reached == {ops.Cast, ops.Checkpoint}


def _third(fn, x, w, u):
    """∂/∂x ⟨u, ∂/∂x ⟨w, ∂/∂x Σ fn(x)⟩⟩ (third order) and the second, by the engine or by torch."""
    grad = torch.autograd.grad if isinstance(x, torch.Tensor) else ag.grad
    (g1,) = grad(fn(x).sum(), x, create_graph=True)
    (g2,) = grad((g1 * w).sum(), x, create_graph=True)
    (g3,) = grad((g2 * u).sum(), x)
    return [np.asarray(g.detach().numpy() if isinstance(g, torch.Tensor) else g.data) for g in (g2, g3)]


THIRD = {  # name: (ours, torch's); a gather's VJP is AddAt, whose own VJP then runs under create_graph
    "tanh": (lambda x: x.tanh(), torch.tanh),
    "exp": (lambda x: x.exp(), torch.exp),
    "softmax": (lambda x: x.softmax() * x, lambda t: torch.softmax(t, -1) * t),
    "gather": (lambda x: x[[1, 0, 1]] ** 3, lambda t: t[[1, 0, 1]] ** 3),
}


@pytest.mark.parametrize("name", list(THIRD))
def test_third_order(name, rng):
    ours_fn, torch_fn = THIRD[name]
    x = rand(rng, 2, 3)
    w, u = rng.standard_normal((2, 3)), rng.standard_normal((2, 3))
    second, third = _third(ours_fn, x, w, u)
    t = torch.tensor(x.data, requires_grad=True)
    their_second, their_third = _third(torch_fn, t, torch.tensor(w), torch.tensor(u))
    np.testing.assert_allclose(second, their_second, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(third, their_third, rtol=1e-10, atol=1e-12)
    # and the third derivative against central differences of the second
    eps, numeric = 1e-5, np.zeros(x.size)
    for i in range(x.size):
        shifted = []
        for sign in (1, -1):
            y = leaf(x.data.copy())
            y.data.reshape(-1)[i] += sign * eps
            shifted.append(float((_third(ours_fn, y, w, u)[0] * u).sum()))
        numeric[i] = (shifted[0] - shifted[1]) / (2 * eps)
    np.testing.assert_allclose(third.reshape(-1), numeric, rtol=1e-6, atol=1e-7)
    if name in ("tanh", "exp"):  # a function of each element alone: the derivatives in closed form
        a, th = x.data, np.tanh(x.data)
        closed = {"tanh": ((-2 * th * (1 - th ** 2)), (-2 + 6 * th ** 2) * (1 - th ** 2)),
                  "exp": (np.exp(a), np.exp(a))}[name]
        np.testing.assert_allclose(second, closed[0] * w, rtol=1e-12)
        np.testing.assert_allclose(third, closed[1] * w * u, rtol=1e-12)


def test_a_cast_passes_second_order_gradients_through():
    rng = np.random.default_rng(3)
    x = rand(rng, 2, 3)
    v, ws = _seeds(rng, lambda t: t, [x])
    ours = lambda t: t.astype(np.float32).exp().astype(np.float64)  # noqa: E731
    theirs = lambda t: t.float().exp().double()  # noqa: E731
    _, first, second = engine_second_order(ours, [x], v, ws)
    their_first, their_second = torch_second_order(theirs, [x], v, ws)
    np.testing.assert_allclose(first[0], their_first[0], rtol=1e-6)
    np.testing.assert_allclose(second[0], their_second[0], rtol=1e-6)
    assert ops.Cast in {type(t.op) for t in topological_order(ours(x)) if t.op is not None}


def test_a_float16_gradient_summed_over_broadcast_axes_keeps_its_graph():
    """The engine sums a broadcast operand's gradient back to its shape; under create_graph in float16 that sum
    called the array module's float32-accumulating sum on a Tensor and raised a TypeError."""
    x, w = Tensor(np.ones((2, 3), np.float16), requires_grad=True), Tensor(np.array([1, 2, 3], np.float16),
                                                                            requires_grad=True)
    (gw,) = ag.grad(((x * w) ** 2).sum(), w, create_graph=True)  # Σᵢ 2 xᵢⱼ² wⱼ over the 2 rows of ones
    assert gw.dtype == np.float16
    np.testing.assert_array_equal(gw.data, [4, 8, 12])
    hx, hw = ag.grad(gw.sum(), [x, w])  # ∂/∂xᵢⱼ = 4 xᵢⱼ wⱼ, ∂/∂wⱼ = 2 Σᵢ xᵢⱼ² = 4
    np.testing.assert_array_equal(hx.data, [[4, 8, 12], [4, 8, 12]])
    np.testing.assert_array_equal(hw.data, [4, 4, 4])


def _fused(monkeypatch):
    pytest.importorskip("numba", reason="the fused CPU kernels need numba")
    monkeypatch.setenv("AUTOGRAD_FUSED", "1")


FUSED = {  # float32 inputs large enough for the CPU's kernels (16K elements), and how to see the kernel ran
    "layer_norm": (lambda rng: [rng.standard_normal((256, 64)), rng.standard_normal(64), rng.standard_normal(64)],
                   ag.layer_norm, lambda op: op.saved_names == op.fused_saved_names),
    "gelu": (lambda rng: [rng.standard_normal((128, 128))], lambda x: x.gelu(), lambda op: op.saved[1] is None),
    "cross_entropy": (lambda rng: [rng.standard_normal((512, 32))],
                      lambda z: ag.cross_entropy(z, np.arange(512) % 32), lambda op: op.fused),
    "attention": (lambda rng: [rng.standard_normal((1, 4, 64, 64)) / 4 for _ in range(3)],
                  ag.scaled_dot_product_attention, lambda op: op.kernels is not None),
}


def test_a_cross_entropy_that_wrote_over_its_logits_refuses_create_graph_rather_than_a_wrong_gradient(monkeypatch):
    """reuse_logits lets the kernel write p − y over the logits; a softmax of those as p gave a wrong gradient."""
    _fused(monkeypatch)
    rng = np.random.default_rng(0)
    z0, targets = rng.standard_normal((512, 32)), np.arange(512) % 32
    p = np.exp(z0) / np.exp(z0).sum(axis=1, keepdims=True)
    expected = (p - np.eye(32)[targets]) / 512
    z = Tensor(z0.astype(np.float32), requires_grad=True)
    loss = ag.cross_entropy(z * 1.0, targets, reuse_logits=True)  # logits of their own: z itself is kept
    assert loss.op.fused
    message = ("cross_entropy: with reuse_logits=True the fused kernel wrote its gradient over the logits (shape "
               "(512, 32), float32), so their values are gone and this loss cannot be differentiated twice "
               "(create_graph=True); pass reuse_logits=False (a GPT: return_logits=True) where you need a second "
               "derivative")
    with pytest.raises(RuntimeError, match=re.escape(message)):
        ag.grad(loss, z, create_graph=True)
    # logits the kernel did not write over: laid out by columns (it works on a contiguous copy), or without reuse
    zt = Tensor(np.ascontiguousarray(z0.T, dtype=np.float32), requires_grad=True)
    for logits, leaf_, reuse in ((zt.T, zt, True), (z * 1.0, z, False)):
        assert logits.data.flags.c_contiguous != reuse
        loss = ag.cross_entropy(logits, targets, reuse_logits=reuse)
        assert loss.op.fused
        (g,) = ag.grad(loss, leaf_, create_graph=True)
        np.testing.assert_allclose(g.data.T if leaf_ is zt else g.data, expected, atol=1e-7)


@pytest.mark.parametrize("name", list(FUSED))
def test_a_fused_op_keeps_its_kernel_first_order_and_its_composed_rule_under_create_graph(name, monkeypatch):
    _fused(monkeypatch)
    make, fn, took_kernel = FUSED[name]
    arrays = make(np.random.default_rng(0))
    rng = np.random.default_rng(1)
    results = {}
    for dtype in (np.float32, np.float64):  # no kernel runs in float64 on the CPU: the composed rule throughout
        xs = [Tensor(a.astype(dtype), requires_grad=True) for a in arrays]
        out = fn(*xs)
        assert took_kernel(out.op) == (dtype == np.float32)
        if dtype == np.float32:
            v = rng.standard_normal(out.shape).astype(np.float32)
            ws = [rng.standard_normal(x.shape).astype(np.float32) for x in xs]
        results[dtype] = engine_second_order(fn, xs, v, ws)
    plain, first, second = results[np.float32]
    for a, b, exact in zip(plain, first, results[np.float64][1]):
        np.testing.assert_allclose(b, a, rtol=2e-3, atol=2e-4 * np.abs(exact).max())  # kernel vs composed, float32
        np.testing.assert_allclose(b, exact, rtol=2e-3, atol=2e-4 * np.abs(exact).max())
    for h, exact in zip(second, results[np.float64][2]):
        np.testing.assert_allclose(h, exact, rtol=5e-3, atol=1e-3 * np.abs(exact).max())


WIDENED = {  # float16 at values float16 cannot compute them at: layer norm's squares pass 65504 from |x − μ| = 256,
    # attention's scores near 1300 are held to 1 and its dS = P ⊙ (dP − G·O) cancels
    "layer_norm": ((np.float16, np.float16),
                   lambda rng: [rng.standard_normal((2, 16)) * 300, rng.standard_normal(16)], ag.layer_norm),
    "layer_norm-float32-weight": ((np.float16, np.float32),
                                  lambda rng: [rng.standard_normal((2, 16)) * 300, rng.standard_normal(16)],
                                  ag.layer_norm),
    "attention": ((np.float16,) * 3, lambda rng: [rng.standard_normal((1, 1, 6, 2)) * 30,  # scores near 1300,
                                                  30 * rng.standard_normal(2) + rng.standard_normal((1, 1, 6, 2)) / 20,
                                                  rng.standard_normal((1, 1, 6, 2)) * 30],  # a few apart
                  ag.scaled_dot_product_attention),
}


@pytest.mark.parametrize("name", list(WIDENED))
def test_an_op_that_computes_float16_in_float32_differentiates_its_gradient_in_float32(name):
    """A float16 op computed in float32 (Function.widens_float16) ran its rule under create_graph in float16: layer
    norm's gradient came out 0 (1/σ of an infinite variance), attention's dQ 480 times too large; now it is the
    plain backward's, and its own derivative float64's to float16's rounding."""
    dtypes, make, fn = WIDENED[name]
    arrays = [a.astype(np.float16) for a in make(np.random.default_rng(0))]  # the same values in every dtype
    rng = np.random.default_rng(1)
    v = rng.standard_normal(fn(*[leaf(a) for a in arrays]).shape)
    ws = [rng.standard_normal(a.shape) for a in arrays]

    def derivatives(dtypes):
        xs = [Tensor(a.astype(d), requires_grad=True) for a, d in zip(arrays, dtypes)]
        head = Tensor(v.astype(fn(*xs).dtype))
        plain = ag.grad((fn(*xs) * head).sum(), xs)
        first = ag.grad((fn(*xs) * head).sum(), xs, create_graph=True)
        second = ag.grad(sum((g * Tensor(w.astype(g.dtype))).sum() for g, w in zip(first, ws)), xs)
        assert [g.dtype for g in first] == [h.dtype for h in second] == list(map(np.dtype, dtypes))
        return [[g.data.astype(np.float64) for g in grads] for grads in (plain, first, second)]

    (plain, first, second), (_, _, exact) = derivatives(dtypes), derivatives((np.float64,) * len(arrays))
    for ours, theirs in zip(first, plain):
        np.testing.assert_allclose(ours, theirs, rtol=1e-3, atol=1e-3 * np.abs(theirs).max())
    for ours, theirs in zip(second, exact):
        np.testing.assert_allclose(ours, theirs, rtol=3e-3, atol=3e-3 * np.abs(theirs).max())
