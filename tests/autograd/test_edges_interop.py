"""The engine at the edges against PyTorch itself (torch 2.13, CPU): powers with a zero base or exponent,
variance without degrees of freedom, means of nothing, softmax, reductions, matmul, attention and layer norm of
one number or over no numbers, truth values and Python numbers, integer data that does not fit, constant operands'
dtypes, integer operands of floating-point ops, the dim=/keepdim= spellings, and the one settled difference
(cross-entropy whose every target is ignored). Each case runs through both engines in float64."""
import math
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import autograd as ag  # noqa: E402
from autograd import Tensor  # noqa: E402

pytestmark = pytest.mark.interop


def both(fn, *arrays):
    """fn's value and every input's gradient (of the sum of the output), in our engine and in PyTorch."""
    ours = [Tensor(np.array(a, dtype=np.float64), requires_grad=True) for a in arrays]
    theirs = [torch.tensor(np.array(a, dtype=np.float64), requires_grad=True) for a in arrays]
    with warnings.catch_warnings(), np.errstate(all="ignore"):  # both warn of 1/0 and such; the values are the test
        warnings.simplefilter("ignore")
        out, ref = fn(*ours), fn(*theirs)
        out.sum().backward()
        ref.sum().backward()
    return (out.numpy(), [t.grad for t in ours]), (ref.detach().numpy(), [t.grad.numpy() for t in theirs])


def assert_same(ours, theirs, atol=0.0):
    """Equal, with NaN where PyTorch has NaN and infinities of the same sign where it has them."""
    (out, grads), (ref, ref_grads) = ours, theirs
    np.testing.assert_allclose(out, ref, rtol=1e-12, atol=atol, equal_nan=True)
    for g, r in zip(grads, ref_grads):
        np.testing.assert_allclose(g, r, rtol=1e-12, atol=atol, equal_nan=True)


# ---- powers -----------------------------------------------------------------------------------------------

BASES = [0.0, -0.0, 2.0, -2.0, 0.5, 1.0]
EXPONENTS = [2.0, 1.0, 0.0, -1.0, 0.5, -0.5, 3.0, -2.0]


@pytest.mark.parametrize("x", BASES)
@pytest.mark.parametrize("y", EXPONENTS)
def test_tensor_power_tensor_value_and_both_gradients(x, y):
    assert_same(*both(lambda a, b: a ** b, [x], [y]))


@pytest.mark.parametrize("y", EXPONENTS)
def test_power_with_a_number_exponent_at_zero(y):
    """d/dx x**0 at x = 0 is 0 (not 0 · 0⁻¹ = NaN); x**0.5 at 0 is inf, x**-1 at 0 is -inf: PyTorch's values."""
    # (not at -0.0: torch takes x**-0.5 as rsqrt there, -inf, where IEEE pow, and NumPy, give +inf)
    assert_same(*both(lambda a: a ** y, [0.0, 1.5, -3.0]))


@pytest.mark.parametrize("base", [0.0, 2.0, 1.0, 0.5])
def test_power_of_a_number_base(base):
    """d/dy 0**y is 0 for y ≥ 0 (not 1 · ln 0 · … = NaN) and -inf for y < 0, as PyTorch has it."""
    assert_same(*both(lambda b: base ** b, [2.0, 1.0, 0.0, -1.0, 0.5, -0.5]))


def test_power_broadcast_over_a_grid_of_zeros():
    x = np.array([[0.0], [1.0], [-2.0], [3.0]])
    y = np.array([0.0, 1.0, 2.0, -1.0, 0.5])
    assert_same(*both(lambda a, b: a ** b, x, y))


def test_power_with_ordinary_inputs_keeps_its_arithmetic_bit_for_bit():
    """Where the exponent is nonzero and the base positive, the VJPs are the unchanged formulas, bit for bit."""
    rng = np.random.default_rng(0)
    a, b = rng.uniform(0.5, 2, size=(3, 4)).astype(np.float32), rng.uniform(-2, 2, size=4).astype(np.float32)
    g = rng.normal(size=(3, 4)).astype(np.float32)
    x, y = Tensor(a, requires_grad=True), Tensor(b, requires_grad=True)
    (x ** y).backward(g)
    assert np.array_equal(x.grad, g * b * a ** (b - 1))
    assert np.array_equal(y.grad, (g * a ** b * np.log(a)).sum(axis=0))


# ---- variance and mean at their edges ------------------------------------------------------------------------


@pytest.mark.parametrize("data, axis", [
    ([1.0, 2.0], 0), ([1.0, 2.0, 4.0], 0), ([3.0], 0), ([1.0, 1.0], 0), ([[1.0, 2.0], [3.0, 5.0]], 0),
    ([[1.0, 2.0], [3.0, 5.0]], 1), ([[1.0, 1.0, 4.0], [2.0, 1.0, 0.0]], 0), ([[2.0, 2.0], [2.0, 7.0]], 1),
])
@pytest.mark.parametrize("ddof", [0, 1, 2, 3, 5])
def test_var_with_any_ddof_along_an_axis(data, axis, ddof):
    """ddof ≥ n: inf, NaN where every value equals the mean, as PyTorch computes it; the gradient is 2(x − μ)/0
    entry by entry. For ddof > n PyTorch's gradient is that of n − ddof < 0, a finite slope of a value it
    gives as inf; ours stays the gradient of the value it gives, the one at ddof = n."""
    def var(t, ddof):
        return t.var(axis, ddof=ddof) if isinstance(t, Tensor) else t.var(axis, correction=ddof)

    ours, theirs = both(lambda t: var(t, ddof), data)
    n = np.shape(data)[axis]
    if ddof <= n:
        assert_same(ours, theirs)
        return
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-12, equal_nan=True)
    at_n = both(lambda t: var(t, n), data)[0]
    np.testing.assert_array_equal(ours[1][0], at_n[1][0])
    assert np.isfinite(theirs[1][0]).all()


@pytest.mark.parametrize("data", [[1.0, 2.0], [1.0, 2.0, 4.0], [3.0], [1.0, 1.0], [[1.0, 2.0], [3.0, 5.0]]])
@pytest.mark.parametrize("ddof", [0, 1, 2, 3, 5])
def test_var_of_every_element_with_any_ddof(data, ddof):
    """The value is PyTorch's. Its gradient over all dims with no degrees of freedom is +inf everywhere (its
    dim=None path); ours is ∓inf by the sign of x − μ, the same formula as its per-dim path, and NaN alike."""
    (out, (grad,)), (ref, (ref_grad,)) = both(
        lambda t: t.var(ddof=ddof) if isinstance(t, Tensor) else t.var(correction=ddof), data)
    np.testing.assert_allclose(out, ref, rtol=1e-12, equal_nan=True)
    assert not (out < 0).any()
    if np.isfinite(ref_grad).all():
        np.testing.assert_allclose(grad, ref_grad, rtol=1e-12)
    else:
        np.testing.assert_array_equal(np.isnan(grad), np.isnan(ref_grad))
        np.testing.assert_array_equal(np.abs(grad), np.abs(ref_grad))
        centred = np.array(data) - np.mean(data)
        np.testing.assert_array_equal(np.sign(grad[~np.isnan(grad)]), np.sign(centred[~np.isnan(grad)]))


@pytest.mark.parametrize("shape, axis", [((0,), None), ((0, 3), 0), ((0, 3), None), ((2, 0), 1), ((0, 3), 1)])
def test_mean_of_no_elements(shape, axis):
    assert_same(*both(lambda t: t.mean(axis), np.zeros(shape)))


@pytest.mark.parametrize("shape, axis", [((0,), None), ((0, 3), 0), ((2, 0), 1)])
def test_var_of_no_elements(shape, axis):
    ours = Tensor(np.zeros(shape))
    with warnings.catch_warnings(), np.errstate(invalid="ignore"):
        warnings.simplefilter("ignore")
        got = ours.var(axis, ddof=1).numpy()
        ref = torch.zeros(shape, dtype=torch.float64).var(*(() if axis is None else (axis,))).numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    assert got.shape == ref.shape


# ---- truth values and Python numbers ----------------------------------------------------------------------------


def _outcome(fn, value):
    try:
        return fn(value)
    except Exception as exc:  # the kind of error is part of what is compared
        return type(exc)


@pytest.mark.parametrize("data", [[0.0], [1.0], [-2.5], 0.0, 4.0, [[3.0]], [0], [7], [True], [False], [float("nan")],
                                  [1.0, 2.0], [], [[0.0, 0.0]], [[1.0], [2.0]]])
@pytest.mark.parametrize("convert", [bool, float, int], ids=["bool", "float", "int"])
def test_bool_float_and_int_as_pytorch_has_them(data, convert):
    ours, theirs = _outcome(convert, Tensor(data)), _outcome(convert, torch.tensor(data))
    if isinstance(theirs, float) and math.isnan(theirs):
        assert math.isnan(ours)
    else:
        assert ours == theirs and type(ours) is type(theirs)


def test_comparisons_as_conditions_as_pytorch_has_them():
    for value in (1.0, 5.0, 9.0):
        for limit in (5, 5.0):
            assert bool(Tensor([value]) > limit) is bool(torch.tensor([value]) > limit)
            assert bool(Tensor(value) == limit) is bool(torch.tensor(value) == limit)


# ---- integer data that does not fit its dtype ---------------------------------------------------------------------

INTEGER_CASES = [
    ([300], "uint8"), ([256], "uint8"), ([128], "int8"), ([-129], "int8"), ([40000], "int16"), ([2 ** 31], "int32"),
    ([-2 ** 31 - 1], "int32"), ([300.0], "uint8"), ([float("nan")], "int64"), ([float("inf")], "int32"),
    ([-1], "uint8"), ([1.5], "int64"), ([-0.5], "int32"),
]


@pytest.mark.parametrize("data, dtype", INTEGER_CASES)
def test_integer_data_that_pytorch_refuses_or_changes_is_refused(data, dtype):
    """PyTorch refuses most of these ("value cannot be converted ... without overflow"); where it does not, it
    changes the value (-1 wraps to 255 in uint8, 1.5 becomes 1): here each is a clear error."""
    try:
        theirs = torch.tensor(data, dtype=getattr(torch, dtype)).tolist()
    except RuntimeError as exc:
        assert "overflow" in str(exc)
    else:
        assert theirs != data
    with pytest.raises(ValueError, match=rf"cannot be stored as {dtype}"):
        Tensor(data, dtype=dtype)


@pytest.mark.parametrize("data, dtype", [([255, 0], "uint8"), ([-128, 127], "int8"), ([2.0, -3.0], "int64"),
                                         ([2 ** 31 - 1], "int32"), ([True], "int16"), ([65535.0], "uint16")])
def test_integer_data_that_fits_is_what_pytorch_stores(data, dtype):
    t = Tensor(data, dtype=dtype)
    assert t.tolist() == torch.tensor(data, dtype=getattr(torch, dtype)).tolist() and str(t.dtype) == dtype


# ---- dtypes of constant operands ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("operand", [[1, 2], [1.0, 2.0], [True, False], 2, 2.5])
def test_a_python_operand_gives_pytorchs_result_dtype(dtype, operand):
    ours = Tensor(np.array([1.0, 2.0], dtype=dtype)) * operand
    other = torch.tensor(operand) if isinstance(operand, list) else operand
    theirs = torch.tensor([1.0, 2.0], dtype=getattr(torch, dtype)) * other
    assert str(ours.dtype) == str(theirs.dtype).removeprefix("torch.")
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


@pytest.mark.parametrize("dtype", ["int32", "int16", "uint8"])
@pytest.mark.parametrize("op", [lambda t: t + 3, lambda t: 3 - t, lambda t: t * 2, lambda t: t ** 2])
def test_a_python_int_keeps_an_integer_tensors_dtype_as_in_pytorch(dtype, op):
    ours = op(Tensor(np.array([1, 2, 5], dtype=dtype)))
    theirs = op(torch.tensor([1, 2, 5], dtype=getattr(torch, dtype)))  # uint8's 3 − 5 wraps to 254 in both
    assert str(ours.dtype) == str(theirs.dtype).removeprefix("torch.") == dtype
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


@pytest.mark.parametrize("dtype", ["float16", "float32", "int32", "int64"])
@pytest.mark.parametrize("number", [np.float32(2), np.float64(2.5), np.int64(3), np.float32(0)], ids=repr)
@pytest.mark.parametrize("op", [lambda t, s: t * s, lambda t, s: s - t, lambda t, s: t / s],
                         ids=["mul", "rsub", "div"])
def test_a_numpy_number_operand_gives_pytorchs_result_dtype(dtype, number, op):
    """A NumPy number counts as the Python number it holds, as in PyTorch: float16 * np.float32(2) stays float16
    (it was float32, where float16 * np.float64(2) stayed float16), int64 * np.float64 is the default float."""
    with np.errstate(divide="ignore", invalid="ignore"):  # / np.float32(0): inf and NaN, in both
        ours = op(Tensor(np.array([1, 0, 5], dtype=dtype)), number)
    theirs = op(torch.tensor([1, 0, 5], dtype=getattr(torch, dtype)), number)
    assert str(ours.dtype) == str(theirs.dtype).removeprefix("torch.")
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_a_python_int_that_an_integer_tensors_dtype_cannot_hold_widens_it_rather_than_wrap():
    out = Tensor(np.array([1, 2], dtype=np.uint8)) + 300
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out.numpy(), [301, 302])


# ---- PyTorch's spellings ------------------------------------------------------------------------------------------

X = np.random.default_rng(1).integers(0, 4, size=(2, 3, 4)).astype(np.float64)  # many ties
DISTINCT = np.random.default_rng(2).permutation(24).reshape(2, 3, 4).astype(np.float64)


@pytest.mark.parametrize("name", ["sum", "mean"])
@pytest.mark.parametrize("dim", [0, 1, -1, (0, 2)])
@pytest.mark.parametrize("keepdim", [False, True])
def test_sum_and_mean_with_dim_and_keepdim(name, dim, keepdim):
    assert_same(*both(lambda t: getattr(t, name)(dim=dim, keepdim=keepdim), X))


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("keepdim", [False, True])
def test_var_with_dim_and_keepdim_as_torch_with_the_same_correction(dim, keepdim):
    assert_same(*both(lambda t: t.var(dim=dim, keepdim=keepdim, **({"ddof": 1} if isinstance(t, Tensor)
                                                                   else {"correction": 1})), X))


@pytest.mark.parametrize("dim", [0, 1, 2, -1])
@pytest.mark.parametrize("keepdim", [False, True])
def test_max_with_dim_gives_torchs_values_and_indices(dim, keepdim):
    values, indices = Tensor(X).max(dim=dim, keepdim=keepdim)
    ref = torch.tensor(X).max(dim=dim, keepdim=keepdim)
    np.testing.assert_array_equal(values.numpy(), ref.values.numpy())
    np.testing.assert_array_equal(indices.numpy(), ref.indices.numpy())  # X has ties: the first one, as torch
    # without ties the gradient is torch's; with them DESIGN shares it equally where torch gives it to the index
    assert_same(*both(lambda t: t.max(dim=dim, keepdim=keepdim)[0] * 1.0, DISTINCT))


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax_with_dim(name, dim):
    weights = np.linspace(-1, 1, X.size).reshape(X.shape)
    assert_same(*both(lambda t, w: (getattr(t, name)(dim=dim) * w), X, weights), atol=1e-15)


@pytest.mark.parametrize("shape", [(24,), (4, 6), (-1, 2), (2, 3, -1)])
def test_view_as_torch(shape):
    assert_same(*both(lambda t: t.view(*shape) * 2.0, X))


# ---- one number, or none ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
@pytest.mark.parametrize("shape, axis", [((), -1), ((), 0), ((3, 0), -1), ((3, 0), 0), ((0, 3), -1)], ids=str)
def test_softmax_of_one_number_or_over_none_as_pytorch(name, shape, axis):
    data = np.linspace(-1, 1, math.prod(shape)).reshape(shape) + 0.5
    ours, theirs = both(lambda t: getattr(t, name)(axis), data)
    assert ours[0].shape == shape
    assert_same(ours, theirs)
    if shape == ():
        assert ours[0] == (1.0 if name == "softmax" else 0.0)
    assert ag.gradcheck(lambda t: getattr(t, name)(axis) * 3.0, [Tensor(data, requires_grad=True)])


@pytest.mark.parametrize("name", ["sum", "mean", "var", "max"])
@pytest.mark.parametrize("axis", [0, -1])
@pytest.mark.parametrize("keepdims", [False, True])
def test_a_reduction_of_one_number_over_axis_0_or_minus_1_as_pytorch(name, axis, keepdims):
    """PyTorch reduces a 0-d tensor over dim 0 or -1, as Sum and Max did here; mean, var, any and all refused."""
    def reduce(t):
        if isinstance(t, Tensor):
            return getattr(t, name)(axis, keepdims)
        return t.amax(axis, keepdims) if name == "max" else (
            t.var(axis, keepdim=keepdims, correction=0) if name == "var" else getattr(t, name)(axis, keepdim=keepdims))
    ours, theirs = both(lambda t: reduce(t) * 3.0, 1.5)
    assert ours[0].shape == theirs[0].shape == ()
    assert_same(ours, theirs)
    for truth in ("any", "all"):
        assert getattr(Tensor(np.float64(1.5)), truth)(axis, keepdims).item() is True


@pytest.mark.parametrize("name", ["mean", "var", "any", "all"])
def test_a_reduction_of_one_number_over_another_axis_is_refused_by_name(name):
    with pytest.raises(ag.ShapeError, match=f"{name}: axis 1 is out of range for shape \\(\\); a 0-d tensor "
                                            "reduces over axis 0 or -1 only"):
        getattr(Tensor(np.float64(1.5)), name)(1)


@pytest.mark.parametrize("a_shape, b_shape", [((2, 0), (0, 4)), ((3, 2, 0), (0, 4)), ((2, 0), (3, 0, 4)),
                                              ((0,), (0, 4)), ((0,), (0,)), ((2, 3), (3, 0))], ids=str)
def test_matmul_with_an_axis_of_length_0_as_pytorch(a_shape, b_shape):
    rng = np.random.default_rng(0)
    ours, theirs = both(lambda a, b: a @ b, rng.normal(size=a_shape), rng.normal(size=b_shape))
    assert_same(ours, theirs)
    assert [g.shape for g in ours[1]] == [a_shape, b_shape]


@pytest.mark.parametrize("causal", [True, False])
def test_attention_over_no_keys_is_zeros_as_pytorch(causal):
    q = np.random.default_rng(0).normal(size=(2, 3, 5, 4))
    ours = [Tensor(a, requires_grad=True) for a in (q, np.zeros((2, 3, 0, 4)), np.zeros((2, 3, 0, 6)))]
    theirs = [torch.tensor(t.data, requires_grad=True) for t in ours]
    out = ag.scaled_dot_product_attention(*ours, causal=causal)
    ref = torch.nn.functional.scaled_dot_product_attention(*theirs, is_causal=causal)
    (out * 2.0).sum().backward()
    (ref * 2.0).sum().backward()
    np.testing.assert_array_equal(out.numpy(), np.zeros((2, 3, 5, 6)))
    np.testing.assert_array_equal(out.numpy(), ref.detach().numpy())
    for t, r in zip(ours, theirs):
        np.testing.assert_array_equal(t.grad, r.grad.numpy())


@pytest.mark.parametrize("causal", [True, False])
def test_attention_with_no_features_averages_the_values_it_sees_as_pytorch(causal):
    """D = 0: every score is 0 (an empty dot product; 1/√D divided by 0 here before), so each query averages
    the values it sees."""
    v = np.random.default_rng(0).normal(size=(2, 3, 5, 6))
    weights = np.random.default_rng(1).normal(size=(2, 3, 5, 6))  # a gradient that is not all ones
    def attend(q, k, v):
        if isinstance(q, Tensor):
            return ag.scaled_dot_product_attention(q, k, v, causal) * weights
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal) * torch.tensor(weights)
    ours, theirs = both(attend, np.zeros((2, 3, 5, 0)), np.zeros((2, 3, 5, 0)), v)
    assert_same(ours, theirs, atol=1e-15)
    seen = np.tril(np.ones((5, 5))) if causal else np.ones((5, 5))
    np.testing.assert_allclose(ours[0] / weights, (seen / seen.sum(1, keepdims=True)) @ v, rtol=1e-12)
    assert [g.shape for g in ours[1]] == [(2, 3, 5, 0), (2, 3, 5, 0), (2, 3, 5, 6)]
    q, k = Tensor(np.zeros((1, 2, 4, 0))), Tensor(np.zeros((1, 2, 4, 0)))
    assert ag.gradcheck(lambda v: ag.scaled_dot_product_attention(q, k, v, causal) * 3.0,
                        [Tensor(v[:1, :2, :4], requires_grad=True)])


@pytest.mark.parametrize("shape", [(3, 0), (2, 0, 0)], ids=str)
@pytest.mark.parametrize("bias", [True, False])
def test_layer_norm_of_no_features_as_pytorch(shape, bias):
    """A last axis of length 0 normalises nothing: empty outputs and gradients (1/n divided by 0 here before)."""
    def norm(x, w, *b):
        if isinstance(x, Tensor):
            return ag.layer_norm(x, w, *b)
        return torch.nn.functional.layer_norm(x, (0,), w, *b)
    ours, theirs = both(norm, np.zeros(shape), np.zeros(0), *([np.zeros(0)] if bias else []))
    assert_same(ours, theirs)
    assert ours[0].shape == shape
    assert [g.shape for g in ours[1]] == [shape, (0,), (0,)][:len(ours[1])]


@pytest.mark.parametrize("op", [lambda a, b: a / b, lambda a, b: a / 2, lambda a, b: 3 / b, lambda a, b: a.exp(),
                                lambda a, b: b.sqrt(), lambda a, b: a.tanh(), lambda a, b: b.log(),
                                lambda a, b: a.sigmoid()], ids=["div", "div_number", "rdiv", "exp", "sqrt", "tanh",
                                                                "log", "sigmoid"])
def test_integer_operands_of_a_floating_point_op_give_pytorchs_default_float(op):
    a, b = [1, -2, 0], [2, 2, 4]
    out, ref = op(Tensor(a), Tensor(b)), op(torch.tensor(a), torch.tensor(b))
    assert out.dtype == np.float32 and ref.dtype == torch.float32
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-6)  # float32 both: each library's own exp
    assert op(Tensor([True, False]), Tensor([True, True])).dtype == np.float32


def test_integer_operands_of_a_floating_point_op_follow_the_default_dtype(float64_default):
    assert (Tensor([1, 2]) / Tensor([2, 2])).dtype == np.float64
    assert Tensor([1, 2]).exp().dtype == np.float64
    assert (Tensor([1, 2]) * 2).dtype == (Tensor([1, 2]) ** 2).dtype == np.int64  # as in PyTorch: no division


# ---- the settled difference ---------------------------------------------------------------------------------------


def test_cross_entropy_with_every_target_ignored_is_zero_where_pytorch_gives_nan():
    """DESIGN.md settles this one: a batch of ignored targets contributes nothing (0, zero gradient), not NaN."""
    z = np.random.default_rng(0).normal(size=(3, 4))
    ours = Tensor(z, requires_grad=True)
    loss = ag.cross_entropy(ours, [-1, -1, -1], ignore_index=-1)
    loss.backward()
    ref = torch.nn.functional.cross_entropy(torch.tensor(z), torch.tensor([-1, -1, -1]), ignore_index=-1)
    assert math.isnan(ref.item()) and loss.item() == 0.0
    np.testing.assert_array_equal(ours.grad, np.zeros((3, 4)))
