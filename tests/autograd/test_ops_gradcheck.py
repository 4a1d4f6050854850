"""Every differentiable op against central finite differences in float64, on several shapes, broadcast pairs included."""
import math
import warnings

import numpy as np
import pytest

import autograd as ag
from autograd import Tensor

from ._helpers import away_from_zero, check, leaf, positive, rand

BROADCAST_PAIRS = [
    ((3,), (3,)),
    ((2, 3), (3,)),
    ((2, 3), (2, 1)),
    ((2, 1, 3), (4, 1)),
    ((1,), (2, 2)),
    ((), (2, 3)),
    ((2, 3), ()),
]


@pytest.fixture
def rng():
    return np.random.default_rng(0)


# binary arithmetic

@pytest.mark.parametrize("shapes", BROADCAST_PAIRS, ids=str)
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "pow"])
def test_binary_ops_gradcheck(rng, op, shapes):
    sx, sy = shapes
    if op == "pow":
        x, y = positive(rng, *sx), rand(rng, *sy, low=-1.5, high=1.5)
    elif op == "div":
        x, y = rand(rng, *sx), away_from_zero(rng, *sy, margin=0.5)
    else:
        x, y = rand(rng, *sx), rand(rng, *sy)
    fn = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
          "div": lambda a, b: a / b, "pow": lambda a, b: a ** b}[op]
    out = fn(x, y)
    expected = {"add": np.add, "sub": np.subtract, "mul": np.multiply,
                "div": np.divide, "pow": np.power}[op](x.data, y.data)
    np.testing.assert_allclose(out.data, expected, rtol=1e-13)
    assert out.shape == np.broadcast_shapes(sx, sy)
    check(fn, x, y)
    assert x.grad.shape == sx and y.grad.shape == sy


@pytest.mark.parametrize("fn", [
    lambda x: x + 2.5, lambda x: 2.5 + x, lambda x: x - 1.5, lambda x: 1.5 - x,
    lambda x: x * 3.0, lambda x: 3.0 * x, lambda x: x / 4.0, lambda x: 4.0 / x,
    lambda x: x ** 2, lambda x: x ** 3, lambda x: x ** 0.5, lambda x: x ** -1.5,
    lambda x: 2.0 ** x, lambda x: -x,
], ids=["add", "radd", "sub", "rsub", "mul", "rmul", "div", "rdiv",
        "pow2", "pow3", "pow_half", "pow_neg", "rpow", "neg"])
@pytest.mark.parametrize("shape", [(), (4,), (2, 3)], ids=str)
def test_operators_with_python_numbers(rng, fn, shape):
    check(fn, positive(rng, *shape))


def test_operators_with_numpy_constants(rng):
    x = rand(rng, 2, 3)
    c = rng.uniform(1, 2, size=(3,))
    check(lambda t: t * c + c - t / c, x)
    check(lambda t: c * t + c / t - c, positive(rng, 2, 3))


def test_pow_tensor_tensor_hand_values():
    # z = aᵇ: ∂z/∂a = b·a^(b−1), ∂z/∂b = aᵇ·ln a
    a = leaf([2.0, 3.0])
    b = leaf([3.0, 2.0])
    (a ** b).sum().backward()
    np.testing.assert_allclose(a.grad, [3 * 4.0, 2 * 3.0])
    np.testing.assert_allclose(b.grad, [8 * math.log(2), 9 * math.log(3)])


# matmul

MATMUL_SHAPES = [
    ((3,), (3,)),                 # 1-D @ 1-D: a scalar
    ((3,), (3, 2)),               # 1-D @ 2-D
    ((2, 3), (3,)),               # 2-D @ 1-D
    ((2, 3), (3, 4)),
    ((2, 2, 3), (2, 3, 4)),       # batched
    ((2, 1, 3, 4), (5, 4, 2)),    # broadcast batch dims
    ((2, 3, 4), (4, 2)),          # N-D @ 2-D
    ((3, 4), (2, 4, 2)),          # 2-D @ N-D
    ((3,), (2, 3, 2)),            # 1-D @ N-D
    ((2, 2, 3), (3,)),            # N-D @ 1-D
]


@pytest.mark.parametrize("sa, sb", MATMUL_SHAPES, ids=str)
def test_matmul_forward_and_gradcheck(rng, sa, sb):
    a, b = rand(rng, *sa), rand(rng, *sb)
    out = a @ b
    np.testing.assert_allclose(out.data, np.matmul(a.data, b.data), rtol=1e-13)
    check(lambda x, y: x @ y, a, b)
    assert a.grad.shape == sa and b.grad.shape == sb


def test_matmul_hand_values():
    # L = Σ (A @ B):  dA = 1 Bᵀ (row sums of B),  dB = Aᵀ 1 (column sums of A)
    A = leaf([[1.0, 2.0], [3.0, 4.0]])
    B = leaf([[5.0, 6.0], [7.0, 8.0]])
    (A @ B).sum().backward()
    np.testing.assert_array_equal(A.grad, [[11.0, 15.0], [11.0, 15.0]])
    np.testing.assert_array_equal(B.grad, [[4.0, 4.0], [6.0, 6.0]])


@pytest.mark.parametrize("sa", [(3, 4), (2, 3, 4), (4,)], ids=str)
def test_matmul_by_a_transposed_weight_gives_a_contiguous_gradient(rng, sa):
    # x @ Wᵀ, as GPT-2's tied LM head: dB is built transposed, so W's gradient comes back in W's own order
    x, w = rand(rng, *sa), rand(rng, 5, 4)
    check(lambda x, w: x @ w.T, x, w)
    (x @ w.T).sum().backward()
    assert w.grad.flags.c_contiguous


def test_matmul_with_constant_operand(rng):
    W = rng.normal(size=(3, 2))
    check(lambda x: x @ W, rand(rng, 4, 3))
    check(lambda x: W.T @ x, rand(rng, 3, 2))


# elementwise functions

UNARY = {
    "exp": (lambda x: x.exp(), np.exp, rand),
    "log": (lambda x: x.log(), np.log, positive),
    "sqrt": (lambda x: x.sqrt(), np.sqrt, positive),
    "tanh": (lambda x: x.tanh(), np.tanh, rand),
    "sigmoid": (lambda x: x.sigmoid(), lambda a: 1 / (1 + np.exp(-a)), rand),
    "relu": (lambda x: x.relu(), lambda a: np.maximum(a, 0), away_from_zero),
    "gelu": (lambda x: x.gelu(),
             lambda a: 0.5 * a * (1 + np.tanh(np.sqrt(2 / np.pi) * (a + 0.044715 * a ** 3))), rand),
    "neg": (lambda x: -x, np.negative, rand),
}


@pytest.mark.parametrize("shape", [(), (5,), (2, 3), (2, 1, 3)], ids=str)
@pytest.mark.parametrize("name", list(UNARY))
def test_unary_ops_forward_and_gradcheck(rng, name, shape):
    fn, reference, make = UNARY[name]
    x = make(rng, *shape)
    np.testing.assert_allclose(fn(x).data, reference(x.data), rtol=1e-12, atol=1e-15)
    check(fn, x)
    assert x.grad.shape == shape and x.grad.dtype == np.float64


def test_unary_derivatives_by_hand():
    x = leaf([0.0, 1.0, -2.0])
    x.relu().sum().backward()
    np.testing.assert_array_equal(x.grad, [0.0, 1.0, 0.0])  # relu'(0) is taken as 0
    x.grad = None
    x.sigmoid().sum().backward()
    s = 1 / (1 + np.exp(-x.data))
    np.testing.assert_allclose(x.grad, s * (1 - s), rtol=1e-14)
    y = leaf([4.0, 9.0])
    y.sqrt().sum().backward()
    np.testing.assert_allclose(y.grad, [1 / 4, 1 / 6])  # 1/(2√x)


def test_gelu_matches_the_tanh_approximation_formula():
    a = np.linspace(-6, 6, 101)
    x = leaf(a)
    c = math.sqrt(2 / math.pi)
    u = c * (a + 0.044715 * a ** 3)
    expected = 0.5 * a * (1 + np.tanh(u))
    out = x.gelu()
    np.testing.assert_allclose(out.data, expected, rtol=1e-14, atol=1e-15)
    out.sum().backward()
    derivative = 0.5 * (1 + np.tanh(u)) + 0.5 * a * (1 - np.tanh(u) ** 2) * c * (1 + 3 * 0.044715 * a ** 2)
    # atol 1e-14: where tanh u ≈ −1 this reference loses digits to cancellation (the op's σ form does not)
    np.testing.assert_allclose(x.grad, derivative, rtol=1e-12, atol=1e-14)
    # GPT-2's gelu is the tanh form, not the exact erf form: they differ visibly at x = 1.5
    erf_form = 0.5 * 1.5 * (1 + math.erf(1.5 / math.sqrt(2)))
    assert abs(leaf([1.5]).gelu().item() - erf_form) > 1e-5


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gelu_far_below_zero_is_zero_without_overflow_warnings(dtype):
    x = Tensor(np.array([-1e4, -100.0, -30.0], dtype=dtype), requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e^(−2u) overflows to inf here: σ(2u) = 0, silently
        out = x.gelu()
        out.sum().backward()
    np.testing.assert_array_equal(out.data, [0.0, 0.0, 0.0])
    np.testing.assert_array_equal(x.grad, [0.0, 0.0, 0.0])


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_gelu_gradient_of_huge_inputs_is_one_or_zero(dtype):
    """x·2u′ grows as x³ and overflowed (float32 from |x| ≈ 1.2e13, float64 from 1.3e154) where σ(2u) is exactly 1
    or 0, and inf·0 made the gradient NaN though the forward, x or 0, was right: up to the dtype's largest number,
    silently, in backward and in its graph (create_graph), whose own derivative there is 0."""
    huge = np.append(np.geomspace(40, np.finfo(dtype).max / 2, 29), np.finfo(dtype).max).astype(dtype)
    x, ones = np.concatenate([huge, -huge]), np.ones(60, dtype)
    slope = np.repeat([1.0, 0.0], 30)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        leaf_x = Tensor(x, requires_grad=True)
        out = leaf_x.gelu()
        out.backward(ones)
        np.testing.assert_array_equal(out.data, np.where(x > 0, x, 0))
        np.testing.assert_array_equal(leaf_x.grad, slope)
        graph_x = Tensor(x, requires_grad=True)
        dx, = ag.grad(graph_x.gelu(), graph_x, ones, create_graph=True)
        dx.backward(ones)
    np.testing.assert_array_equal(dx.data, slope)
    np.testing.assert_array_equal(graph_x.grad, np.zeros(60))


def test_gelu_gradchecks_where_it_saturates():
    """From |x| = 40 backward holds x at ±40 (GELU.SATURATED): the derivative on either side of it is unchanged."""
    check(lambda t: t.gelu(), leaf([-45.0, -40.0, -25.0, -21.0, 6.0, 39.5, 40.0, 45.0]))


# reductions

AXES = [None, 0, 1, -1, (0, 2), (-1, 0)]


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("axis", AXES, ids=str)
@pytest.mark.parametrize("name", ["sum", "mean", "max", "var"])
def test_reductions_forward_and_gradcheck(rng, name, axis, keepdims):
    # distinct values, so max has a unique winner and finite differences do not straddle a tie
    x = leaf(rng.permutation(24).reshape(2, 3, 4) / 7.0)
    fn = lambda t: getattr(t, name)(axis=axis, keepdims=keepdims)
    out = fn(x)
    expected = getattr(np, name)(x.data, axis=axis, keepdims=keepdims)
    np.testing.assert_allclose(out.data, expected, rtol=1e-13)
    assert out.shape == np.shape(expected)
    check(fn, x)


@pytest.mark.parametrize("ddof", [0, 1])
@pytest.mark.parametrize("axis", [None, 0, -1, (0, 1)], ids=str)
def test_var_ddof(rng, axis, ddof):
    x = rand(rng, 3, 4)
    fn = lambda t: t.var(axis=axis, ddof=ddof)
    np.testing.assert_allclose(fn(x).data, np.var(x.data, axis=axis, ddof=ddof), rtol=1e-13)
    check(fn, x)


def test_var_hand_value():
    # x = (1, 2, 3, 4): mean 2.5, squared deviations 2.25 + 0.25 + 0.25 + 2.25 = 5
    x = leaf([1.0, 2.0, 3.0, 4.0])
    assert x.var().item() == pytest.approx(5 / 4)
    v = x.var(ddof=1)
    assert v.item() == pytest.approx(5 / 3)
    v.backward()  # ∂/∂xᵢ = 2(xᵢ − x̄)/(n − 1)
    np.testing.assert_allclose(x.grad, 2 * (x.data - 2.5) / 3)


def test_max_ties_share_the_gradient_equally():
    x = leaf([1.0, 3.0, 3.0, 2.0])
    x.max().backward()
    np.testing.assert_array_equal(x.grad, [0.0, 0.5, 0.5, 0.0])
    y = leaf([[5.0, 5.0, 5.0], [1.0, 4.0, 2.0]])
    (y.max(axis=1) * leaf([3.0, 2.0], requires_grad=False)).sum().backward()
    np.testing.assert_allclose(y.grad, [[1.0, 1.0, 1.0], [0.0, 2.0, 0.0]])
    z = leaf([[2.0, 7.0], [7.0, 7.0]])
    z.max(axis=(0, 1), keepdims=True).sum().backward()
    np.testing.assert_allclose(z.grad, [[0.0, 1 / 3], [1 / 3, 1 / 3]])


def test_float16_mean_and_var_are_computed_in_float32_and_rounded_once():
    """The sum of 70000 float16 ones is inf (past 65504, float16's largest) and was rounded so before the division;
    var's squares overflow from |x − μ| = 256. As PyTorch: float32 inside, a float16 result and gradient."""
    x = Tensor(np.ones((2, 70000), np.float16), requires_grad=True)
    mean = x.mean(axis=1)
    mean.backward(np.ones(2, np.float16))
    assert mean.dtype == x.grad.dtype == np.float16 and mean.tolist() == [1.0, 1.0]
    np.testing.assert_array_equal(x.grad, np.full((2, 70000), np.float16(1 / 70000)))
    assert Tensor(np.ones(70000, np.float16)).mean().item() == 1.0
    y = Tensor(np.array([0.0] * 99 + [300.0], np.float16), requires_grad=True)  # μ = 3, a square of 297² = 88209
    var = y.var()
    var.backward()
    assert var.dtype == y.grad.dtype == np.float16 and var.item() == np.float16(891.0)  # (99·9 + 88209) / 100
    np.testing.assert_array_equal(y.grad, np.float16([-0.06] * 99 + [5.94]))  # 2(x − μ)/n


def test_float16_sum_is_computed_in_float32_and_rounded_once():
    """NumPy adds along a strided axis in float16: 2048 + 1 rounded back to 2048 and 60000 + 60000 overflowed,
    where PyTorch sums in float32 and rounds once; along the contiguous axis it already did."""
    ones = Tensor(np.ones((5000, 2), np.float16), requires_grad=True)
    total = ones.sum(axis=0)
    total.backward(np.float16([1.0, 2.0]))
    assert total.dtype == ones.grad.dtype == np.float16 and total.tolist() == [5000.0, 5000.0]
    np.testing.assert_array_equal(ones.grad, np.float16([[1.0, 2.0]] * 5000))
    big = Tensor(np.float16([[60000.0] * 3, [60000.0] * 3, [-60000.0] * 3]))
    assert big.sum(axis=0).tolist() == [60000.0] * 3
    with np.errstate(over="ignore"):
        assert Tensor(np.ones(70000, np.float16)).sum().item() == np.inf  # the true sum is past 65504


def test_float16_gradients_summed_to_a_broadcast_input_are_added_in_float32():
    """A bias broadcast over 5000 rows gets the sum of 5000 ones: 5000, not float16's 2048 + 1 = 2048 (the sum
    back to an input's shape, and Linear's bias gradient, add as the op Sum does)."""
    x = Tensor(np.zeros((5000, 4), np.float16))
    b = Tensor(np.zeros(4, np.float16), requires_grad=True)
    (x + b).sum().backward()
    assert b.grad.dtype == np.float16 and b.grad.tolist() == [5000.0] * 4
    w = Tensor(np.zeros((4, 3), np.float16), requires_grad=True)
    bias = Tensor(np.zeros(3, np.float16), requires_grad=True)
    ag.linear(x, w, bias).sum().backward()
    assert bias.grad.tolist() == [5000.0] * 3


def test_max_with_dim_shares_the_gradient_of_ties_too():
    """max(dim=d) returns torch's first index, but its values' gradient is DESIGN's equal share (torch.max(x, d)
    gives it to the index): half each at a two-way tie, where central differences agree, a third at a three-way."""
    x = leaf([[3.0, 1.0, 3.0], [2.0, 2.0, 2.0], [0.0, 5.0, 4.0]])
    values, indices = x.max(dim=1)
    assert indices.tolist() == [0, 0, 1]
    (values * Tensor([2.0, 3.0, 4.0], dtype="float64")).sum().backward()
    np.testing.assert_allclose(x.grad, [[1.0, 0.0, 1.0], [1.0, 1.0, 1.0], [0.0, 4.0, 0.0]])
    h, weights = 1e-6, np.array([2.0, 3.0, 4.0])
    for j in range(3):
        step = np.zeros((3, 3))
        step[0, j] = h
        central = (weights @ (x.data + step).max(axis=1) - weights @ (x.data - step).max(axis=1)) / (2 * h)
        assert central == pytest.approx(x.grad[0, j], abs=1e-8)


def test_mean_and_sum_hand_gradients():
    x = leaf(np.arange(6.0).reshape(2, 3))
    x.mean(axis=0).sum().backward()  # each element enters one mean of 2: gradient 1/2
    np.testing.assert_array_equal(x.grad, np.full((2, 3), 0.5))
    x.grad = None
    (x.sum(axis=-1, keepdims=True) * leaf([[1.0], [10.0]], requires_grad=False)).sum().backward()
    np.testing.assert_array_equal(x.grad, [[1, 1, 1], [10, 10, 10]])


# shape ops

@pytest.mark.parametrize("fn, shape", [
    (lambda t: t.reshape(3, 4), (2, 6)),
    (lambda t: t.reshape((4, 3)), (2, 6)),
    (lambda t: t.reshape([2, -1]), (3, 4)),
    (lambda t: t.reshape(-1), (2, 3, 2)),
    (lambda t: t.reshape(()), (1, 1)),
    (lambda t: t.transpose(), (2, 3, 4)),
    (lambda t: t.transpose(1, 0, 2), (2, 3, 4)),
    (lambda t: t.transpose((2, 0, 1)), (2, 3, 4)),
    (lambda t: t.transpose(-1, 0, 1), (2, 3, 4)),
    (lambda t: t.T, (2, 3)),
    (lambda t: t.T, (2, 3, 4)),
], ids=["varargs", "tuple", "list", "flatten", "scalar", "reverse", "swap", "perm", "negative",
        "T2d", "T3d"])
def test_shape_ops_gradcheck(rng, fn, shape):
    x = rand(rng, *shape)
    check(fn, x)


def test_reshape_and_transpose_follow_numpy():
    a = np.arange(24.0).reshape(2, 3, 4)
    x = leaf(a)
    np.testing.assert_array_equal(x.reshape(4, 6).data, a.reshape(4, 6))
    np.testing.assert_array_equal(x.reshape((6, 4)).data, a.reshape(6, 4))
    np.testing.assert_array_equal(x.transpose().data, a.transpose())
    np.testing.assert_array_equal(x.transpose(1, 2, 0).data, a.transpose(1, 2, 0))
    np.testing.assert_array_equal(x.transpose((2, 1, 0)).data, a.transpose(2, 1, 0))
    assert x.T.shape == (4, 3, 2)  # .T reverses all axes
    np.testing.assert_array_equal(x.T.data, a.T)


GETITEM_KEYS = [
    (1,),
    (-1,),
    (slice(1, None),),
    ((slice(None), 2),),
    ((slice(None, None, -1), slice(0, 3, 2)),),
    ((None, 0),),
    ((Ellipsis, 1),),
    ((0, Ellipsis, None),),
    (np.array([2, 0, 2, 2]),),                 # repeated rows
    (([0, 0, 1], [1, 1, 3]),),                 # repeated elements through two index arrays
    ((slice(None), [3, 3, 0]),),               # repeated columns
    (np.array([True, False, True]),),          # boolean rows
    (np.array([[True, False, True, False]] * 3),),   # boolean elements
]


@pytest.mark.parametrize("key", [k[0] for k in GETITEM_KEYS], ids=[repr(k[0]) for k in GETITEM_KEYS])
def test_getitem_forward_and_gradcheck(rng, key):
    x = rand(rng, 3, 4)
    out = x[key]
    np.testing.assert_array_equal(out.data, x.data[key])
    check(lambda t: t[key], x)


def test_getitem_with_integer_tensor_index(rng):
    x = rand(rng, 4, 3)
    idx = Tensor([3, 1, 3])
    assert idx.dtype == np.int64
    np.testing.assert_array_equal(x[idx].data, x.data[[3, 1, 3]])
    check(lambda t: t[idx], x)
    check(lambda t: t[Tensor([True, False, True, True])], x)


@pytest.mark.parametrize("key, shape", [([], (0, 4)), ((slice(None), []), (3, 0)), ([[]], (1, 0, 4))], ids=str)
def test_getitem_with_an_empty_list_picks_nothing_as_numpy(rng, key, shape):
    x = rand(rng, 3, 4)
    out = x[key]
    assert out.shape == x.data[key].shape == shape
    out.sum().backward()
    np.testing.assert_array_equal(x.grad, np.zeros((3, 4)))
    check(lambda t: t[key], x)


@pytest.mark.parametrize("truth", [True, False])
@pytest.mark.parametrize("shape", [(), (3, 4)], ids=str)
def test_getitem_with_a_0d_mask_adds_an_axis_as_numpy(rng, shape, truth):
    x, mask = rand(rng, *shape), np.array(truth)
    out = x[mask]
    assert out.shape == ((1,) if truth else (0,)) + shape
    np.testing.assert_array_equal(out.data, x.data[mask])
    check(lambda t: t[mask] * 2.0, x)
    y = rand(rng, 2, 3)  # beside other parts of a key
    np.testing.assert_array_equal(y[0, mask, 1:].data, y.data[0, mask, 1:])
    check(lambda t: t[0, mask, 1:] * 2.0, y)


def test_getitem_repeated_indices_scatter_add():
    x = leaf([10.0, 20.0, 30.0])
    x[[0, 0, 2, 0]].sum().backward()
    np.testing.assert_array_equal(x.grad, [3.0, 0.0, 1.0])
    y = leaf(np.zeros((2, 2)))
    (y[[1, 1], [0, 0]] * leaf([2.0, 5.0], requires_grad=False)).sum().backward()
    np.testing.assert_array_equal(y.grad, [[0.0, 0.0], [7.0, 0.0]])


def test_getitem_basic_slice_gradient_is_zero_elsewhere():
    x = leaf(np.arange(6.0).reshape(2, 3))
    x[:, 1:].sum().backward()
    np.testing.assert_array_equal(x.grad, [[0, 1, 1], [0, 1, 1]])


# softmax family

def _softmax_ref(a, axis):
    e = np.exp(a - a.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("axis", [-1, 0, 1])
@pytest.mark.parametrize("shape", [(2, 3, 4), (3, 5)], ids=str)
def test_softmax_and_log_softmax(rng, shape, axis):
    if axis >= len(shape):
        pytest.skip("axis out of range")
    x = rand(rng, *shape)
    ref = _softmax_ref(x.data, axis)
    np.testing.assert_allclose(x.softmax(axis=axis).data, ref, rtol=1e-13)
    np.testing.assert_allclose(ag.softmax(x, axis=axis).data, ref, rtol=1e-13)
    np.testing.assert_allclose(x.log_softmax(axis=axis).data, np.log(ref), rtol=1e-12)
    np.testing.assert_allclose(ag.log_softmax(x, axis=axis).data, np.log(ref), rtol=1e-12)
    check(lambda t: t.softmax(axis=axis), x)
    check(lambda t: ag.softmax(t, axis=axis), x)
    check(lambda t: t.log_softmax(axis=axis), x)
    check(lambda t: ag.log_softmax(t, axis=axis), x)


def test_softmax_with_mask_gradcheck(rng):
    x = rand(rng, 2, 3, 4)
    mask = rng.random((3, 4)) < 0.6
    mask[0] = False  # a fully masked row
    mask[1, 0] = True
    check(lambda t: ag.softmax(t, mask=mask), x)
    check(lambda t: ag.softmax(t, axis=1, mask=mask[:, :1]), x)


def test_log_softmax_is_stable_for_large_logits():
    x = leaf([[1000.0, 0.0, -1000.0]])
    out = x.log_softmax()
    np.testing.assert_allclose(out.data, [[0.0, -1000.0, -2000.0]])
    out.sum().backward()
    assert np.all(np.isfinite(x.grad))


# joining, splitting, selecting

@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat_gradcheck(rng, axis):
    shapes = {0: [(1, 3), (2, 3), (3, 3)], 1: [(2, 1), (2, 3), (2, 2)], -1: [(2, 1), (2, 3), (2, 2)]}[axis]
    xs = [rand(rng, *s) for s in shapes]
    out = ag.concat(xs, axis=axis)
    np.testing.assert_array_equal(out.data, np.concatenate([x.data for x in xs], axis=axis))
    check(lambda *ts: ag.concat(ts, axis=axis), *xs)


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_stack_gradcheck(rng, axis):
    xs = [rand(rng, 2, 3) for _ in range(3)]
    out = ag.stack(xs, axis=axis)
    np.testing.assert_array_equal(out.data, np.stack([x.data for x in xs], axis=axis))
    check(lambda *ts: ag.stack(ts, axis=axis), *xs)


@pytest.mark.parametrize("sections, axis", [(3, 0), (2, 1), ([1, 3], 1), ([2], -1), (1, 0)], ids=str)
def test_split_gradcheck(rng, sections, axis):
    x = rand(rng, 3, 4)
    pieces = ag.split(x, sections, axis=axis)
    expected = np.split(x.data, sections, axis=axis)
    assert len(pieces) == len(expected)
    for p, e in zip(pieces, expected):
        np.testing.assert_array_equal(p.data, e)
    weights = [rng.normal(size=e.shape) for e in expected]
    check(lambda t: sum((p * w).sum() for p, w in zip(ag.split(t, sections, axis=axis), weights)), x)


@pytest.mark.parametrize("sa, sb, sc", [((2, 3), (2, 3), (2, 3)), ((2, 3), (3,), (2, 1)), ((1, 3), (2, 1), (3,))],
                         ids=str)
def test_where_gradcheck(rng, sa, sb, sc):
    a, b = rand(rng, *sa), rand(rng, *sb)
    cond = rng.random(sc) < 0.5
    out = ag.where(cond, a, b)
    np.testing.assert_array_equal(out.data, np.where(cond, a.data, b.data))
    check(lambda x, y: ag.where(cond, x, y), a, b)


# fused ops

@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("shape", [(5,), (4, 5), (2, 3, 5)], ids=str)
def test_cross_entropy_gradcheck(rng, shape, reduction):
    logits = rand(rng, *shape)
    targets = rng.integers(0, shape[-1], size=shape[:-1])
    check(lambda z: ag.cross_entropy(z, targets, reduction=reduction), logits)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_ignore_index_gradcheck(rng, reduction):
    logits = rand(rng, 2, 3, 4)
    targets = np.array([[1, -100, 3], [-100, 0, 2]])
    check(lambda z: ag.cross_entropy(z, targets, ignore_index=-100, reduction=reduction), logits)


def test_embedding_gradcheck(rng):
    weight = rand(rng, 5, 3)
    ids = np.array([[0, 4, 0], [2, 2, 2]])
    check(lambda w: ag.embedding(w, ids), weight)


@pytest.mark.parametrize("shape", [(4,), (3, 4), (2, 3, 5)], ids=str)
def test_layer_norm_gradcheck(rng, shape):
    x = rand(rng, *shape)
    w = rand(rng, shape[-1])
    b = rand(rng, shape[-1])
    check(lambda x_, w_, b_: ag.layer_norm(x_, w_, b_), x, w, b)
    check(lambda x_, w_: ag.layer_norm(x_, w_, None), x, w)
    check(lambda x_, w_: ag.layer_norm(x_, w_), x, w)


def test_dropout_gradcheck_with_a_fixed_mask(rng):
    def fn(t):
        ag.manual_seed(7)  # the same mask in every finite-difference evaluation
        return ag.dropout(t, 0.4, training=True)
    check(fn, rand(rng, 4, 5))


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("tq, tk", [(3, 3), (2, 4)])
def test_attention_gradcheck(rng, causal, tq, tk):
    q, k, v = rand(rng, 1, 2, tq, 3), rand(rng, 1, 2, tk, 3), rand(rng, 1, 2, tk, 2)
    check(lambda a, b, c: ag.scaled_dot_product_attention(a, b, c, causal=causal), q, k, v)


# casts

def test_astype_round_trip_gradcheck(rng):
    # float64 → float64 via a different path: a cast to the same dtype is the identity
    x = rand(rng, 2, 3)
    check(lambda t: t.astype(np.float64) * 2, x)
