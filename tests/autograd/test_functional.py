"""The top-level functions (softmax with a mask, cross_entropy, embedding, layer_norm, dropout, attention,
split/concat/stack/where, constructors) and the Tensor conventions: dtypes, devices, leaving the graph."""
import math
import warnings

import numpy as np
import pytest

import autograd as ag
from autograd import Tensor

from ._helpers import check, leaf, rand


def _softmax_ref(a, axis=-1):
    e = np.exp(a - a.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _log_softmax_ref(a):
    m = a.max(axis=-1, keepdims=True)
    return a - m - np.log(np.exp(a - m).sum(axis=-1, keepdims=True))


# the public surface DESIGN.md names

TOP_LEVEL = ["Tensor", "Value", "concat", "stack", "split", "where", "softmax", "log_softmax", "cross_entropy",
             "embedding", "layer_norm", "dropout", "scaled_dot_product_attention", "no_grad", "gradcheck",
             "zeros", "ones", "randn", "arange", "set_default_dtype", "get_default_dtype", "manual_seed"]
TENSOR_METHODS = ["backward", "numpy", "item", "tolist", "detach", "to", "cpu", "astype", "retain_grad",
                  "sum", "mean", "max", "var", "exp", "log", "sqrt", "tanh", "sigmoid", "relu", "gelu",
                  "reshape", "transpose", "softmax", "log_softmax",
                  "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
                  "__rtruediv__", "__pow__", "__rpow__", "__matmul__", "__rmatmul__", "__neg__", "__getitem__",
                  "__lt__", "__le__", "__gt__", "__ge__", "__eq__", "__ne__"]
TENSOR_ATTRIBUTES = ["data", "grad", "shape", "ndim", "dtype", "device", "requires_grad", "is_leaf", "T"]


def test_public_api_exists():
    missing = [name for name in TOP_LEVEL if not callable(getattr(ag, name, None))]
    assert not missing
    assert not [m for m in TENSOR_METHODS if not callable(getattr(Tensor, m, None))]
    t = Tensor([[1.0]], requires_grad=True)
    assert not [a for a in TENSOR_ATTRIBUTES if not hasattr(t, a)]


def test_rmatmul_with_a_numpy_matrix():
    x = leaf([[1.0, 2.0], [3.0, 4.0]])
    m = np.array([[0.0, 1.0], [1.0, 0.0]])
    out = m @ x  # ndarray @ Tensor comes to Tensor.__rmatmul__
    assert isinstance(out, Tensor)
    np.testing.assert_array_equal(out.data, [[3.0, 4.0], [1.0, 2.0]])
    out.sum().backward()
    np.testing.assert_array_equal(x.grad, np.ones((2, 2)))  # mᵀ 1: each column of m sums to 1


def test_ndarray_on_the_left_of_every_operator():
    x = leaf([1.0, 2.0])
    c = np.array([4.0, 8.0])
    for result, expected in ((c + x, [5.0, 10.0]), (c - x, [3.0, 6.0]), (c * x, [4.0, 16.0]),
                             (c / x, [4.0, 4.0]), (c ** x, [4.0, 64.0])):
        assert isinstance(result, Tensor) and result.requires_grad
        np.testing.assert_array_equal(result.data, expected)


# softmax

def test_softmax_rows_sum_to_one_and_ignore_a_shift():
    x = leaf([[1.0, 2.0, 3.0], [1001.0, 1002.0, 1003.0]])
    p = ag.softmax(x)
    np.testing.assert_allclose(p.data.sum(axis=-1), [1.0, 1.0])
    np.testing.assert_allclose(p.data[0], p.data[1], rtol=1e-12)
    # softmax(1, 2, 3) = (1, e, e²) / (1 + e + e²)
    np.testing.assert_allclose(p.data[0], np.array([1, math.e, math.e ** 2]) / (1 + math.e + math.e ** 2))


def test_softmax_mask_true_means_visible():
    x = leaf([[0.5, 1.0, 2.0, -1.0],
              [3.0, 1.0, 0.0, 4.0],
              [1.0, 1.0, 1.0, 1.0]])
    mask = np.array([[True, False, True, False],
                     [False, False, False, False],  # nothing visible
                     [True, True, True, True]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with np.errstate(all="raise"):
            p = ag.softmax(x, mask=mask)
            upstream = np.array([[1.0, 2.0, 3.0, 4.0]] * 3)
            p.backward(upstream)
    assert p.data[0, 1] == 0.0 and p.data[0, 3] == 0.0  # exactly 0
    np.testing.assert_allclose(p.data[0, [0, 2]], _softmax_ref(np.array([0.5, 2.0])))
    np.testing.assert_array_equal(p.data[1], np.zeros(4))  # a fully masked row: zeros, not NaN
    np.testing.assert_allclose(p.data[2], np.full(4, 0.25))
    assert np.all(np.isfinite(p.data)) and np.all(np.isfinite(x.grad))
    assert x.grad[0, 1] == 0.0 and x.grad[0, 3] == 0.0
    np.testing.assert_array_equal(x.grad[1], np.zeros(4))
    # visible part: dz = p ⊙ (g − Σ g⊙p) over the visible entries only
    pv = p.data[0, [0, 2]]
    gv = upstream[0, [0, 2]]
    np.testing.assert_allclose(x.grad[0, [0, 2]], pv * (gv - (gv * pv).sum()))



def test_softmax_hides_masked_scores_of_inf_and_nan():
    """A hidden score gets probability 0 whatever it holds: −∞ added to inf or NaN was NaN, and the row with it."""
    x = leaf([[1.0, np.inf, 2.0], [0.0, np.nan, 1.0], [-np.inf, 3.0, 3.0]])
    mask = np.array([True, False, True])
    p = ag.softmax(x, mask=mask)
    p.backward(np.array([[1.0, 2.0, 3.0]] * 3))
    visible = _softmax_ref(np.array([1.0, 2.0]))
    np.testing.assert_allclose(p.data, [[visible[0], 0, visible[1]], [visible[0], 0, visible[1]], [0, 0, 1]])
    np.testing.assert_allclose(x.grad[:2], [[-2 * visible[0] * visible[1], 0, 2 * visible[0] * visible[1]]] * 2)
    np.testing.assert_array_equal(x.grad[2], [0, 0, 0])

def test_softmax_mask_hides_where_a_visible_minus_inf_is_a_score():
    """Only the mask hides: a row with nothing visible is 0, a row whose visible scores are all −inf is NaN, as
    without a mask and as the attention kernels give it (the composed op gave it 0)."""
    x = leaf([[1.0, 2.0, 3.0], [-np.inf, 2.0, -np.inf], [-np.inf, -np.inf, -np.inf]])
    mask = np.array([[False, False, False], [True, False, True], [True, True, True]])
    with np.errstate(invalid="ignore"):  # −inf − (−inf), as softmax without a mask computes it
        p = ag.softmax(x, mask=mask)
        unmasked = ag.softmax(leaf(x.data[2:]))
    np.testing.assert_array_equal(p.data[0], [0.0, 0.0, 0.0])
    assert np.isnan(p.data[1:]).all() and np.isnan(unmasked.data).all()


def test_softmax_mask_broadcasts_over_batch_and_heads():
    rng = np.random.default_rng(3)
    scores = rng.normal(size=(2, 3, 4, 4))
    causal = np.tril(np.ones((4, 4), dtype=bool))
    with np.errstate(all="raise"):
        p = ag.softmax(leaf(scores), mask=causal)
    masked = np.where(causal, scores, -np.inf)
    np.testing.assert_allclose(p.data, _softmax_ref(masked), rtol=1e-12)
    assert np.all(p.data[..., ~causal] == 0.0)


def test_softmax_mask_as_a_boolean_tensor_and_float32():
    x = Tensor([[1.0, 2.0, 3.0]])  # float32
    p = ag.softmax(x, mask=Tensor([[False, True, True]]))
    assert p.dtype == np.float32
    np.testing.assert_allclose(p.data, [[0.0, 1 / (1 + math.e), math.e / (1 + math.e)]], rtol=1e-6)


def test_softmax_and_log_softmax_of_float16_are_computed_in_float32_and_rounded_once():
    """A float16 row sum of 70000 terms overflowed (p = 0, log p = −inf), and of 50000 normals lost the last
    digits (rows summing to 0.9998; four in ten log-probabilities a float16 step off)."""
    wide = Tensor(np.zeros((2, 70000), np.float16), requires_grad=True)
    for p in (ag.softmax(wide), wide.softmax(), ag.softmax(wide, mask=np.ones(70000, bool))):
        assert p.dtype == np.float16
        np.testing.assert_array_equal(p.data, np.float16(1 / 70000))
    for log_p in (ag.log_softmax(wide), wide.log_softmax()):
        np.testing.assert_array_equal(log_p.data, np.float16(-math.log(70000)))
    rng = np.random.default_rng(0)
    z, g = rng.normal(size=(2, 50000)).astype(np.float16), rng.normal(size=(2, 50000)).astype(np.float16)
    exact, half = leaf(z.astype(np.float64)), Tensor(z, requires_grad=True)
    for f in (ag.softmax, ag.log_softmax):
        y, y64 = f(half), f(exact)
        y.backward(g)
        y64.backward(g.astype(np.float64))
        assert y.dtype == half.grad.dtype == np.float16
        np.testing.assert_allclose(y.data, y64.data, rtol=2 ** -11, atol=2 ** -25)  # float16 rounding
        np.testing.assert_allclose(half.grad, exact.grad, rtol=2 ** -11, atol=2 ** -25)
        half.grad = exact.grad = None


def test_softmax_without_mask_equals_method():
    x = leaf(np.random.default_rng(0).normal(size=(3, 5)))
    np.testing.assert_array_equal(ag.softmax(x).data, x.softmax().data)
    np.testing.assert_array_equal(ag.softmax(x, axis=0).data, x.softmax(axis=0).data)
    np.testing.assert_array_equal(ag.log_softmax(x).data, x.log_softmax().data)


# cross_entropy

def test_cross_entropy_of_uniform_logits_is_log_v():
    logits = leaf(np.zeros((4, 5)))
    loss = ag.cross_entropy(logits, [0, 1, 2, 3])
    assert loss.item() == pytest.approx(math.log(5))
    loss.backward()
    # p − y over 4 rows: 1/5 everywhere, minus 1 at each target, all divided by 4
    expected = np.full((4, 5), 0.2)
    expected[np.arange(4), [0, 1, 2, 3]] -= 1
    np.testing.assert_allclose(logits.grad, expected / 4)


def _ce_reference(z, t, ignore=None):
    """Per-row −log softmax[target] and its p − y gradient, float64, rows flattened."""
    z2 = z.reshape(-1, z.shape[-1])
    t2 = t.reshape(-1)
    valid = np.ones(len(t2), bool) if ignore is None else t2 != ignore
    safe = np.where(valid, t2, 0)
    nll = np.where(valid, -_log_softmax_ref(z2)[np.arange(len(t2)), safe], 0)
    grad = _softmax_ref(z2)
    grad[np.arange(len(t2)), safe] -= 1
    grad *= valid[:, None]
    return nll, grad, valid


@pytest.mark.parametrize("shape", [(6,), (3, 6), (2, 3, 6)], ids=str)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_against_reference_any_leading_shape(shape, reduction):
    rng = np.random.default_rng(5)
    z = rng.normal(size=shape) * 3
    t = rng.integers(0, shape[-1], size=shape[:-1])
    logits = leaf(z)
    loss = ag.cross_entropy(logits, t, reduction=reduction)
    nll, grad, _ = _ce_reference(z, t)
    if reduction == "none":
        assert loss.shape == shape[:-1]
        np.testing.assert_allclose(loss.data, nll.reshape(shape[:-1]), rtol=1e-12)
        upstream = rng.normal(size=shape[:-1])
        loss.backward(upstream)
        np.testing.assert_allclose(logits.grad, (grad * upstream.reshape(-1, 1)).reshape(shape), rtol=1e-12)
    else:
        assert loss.shape == ()
        count = nll.size if reduction == "mean" else 1
        assert loss.item() == pytest.approx(nll.sum() / count, rel=1e-12)
        loss.backward()
        np.testing.assert_allclose(logits.grad, (grad / count).reshape(shape), rtol=1e-12, atol=1e-15)


def test_cross_entropy_of_float16_is_computed_in_float32_and_rounded_once():
    """Summed in float16, 8192 losses of 30 passed 65504, float16's largest, and their mean was inf; and each
    row's loss was rounded twice (log Σ exp, then the difference): a float16 step off in 99 of 1000 rows below."""
    thirty = np.zeros((8192, 4), np.float16)
    thirty[:, 1] = 30  # −log p[0] = log(3 + e³⁰) = 30 to 13 digits
    assert ag.cross_entropy(Tensor(thirty), np.zeros(8192, int)).item() == 30.0
    rng = np.random.default_rng(1)
    z = (rng.normal(size=(1500, 10)) * 3).astype(np.float16)
    z[:, 0] -= 25  # losses of about 28: no cancellation in log Σ exp − z[target] for float32 to round
    t = np.zeros(1500, int)
    t[::3] = -100
    nll, grad, valid = _ce_reference(z.astype(np.float64), t, ignore=-100)
    for reduction, expected, count in (("none", nll, 1), ("mean", nll.sum() / valid.sum(), valid.sum()),
                                       ("sum", nll.sum(), 1)):
        logits = Tensor(z, requires_grad=True)
        loss = ag.cross_entropy(logits, t, ignore_index=-100, reduction=reduction)
        loss.backward(np.ones(loss.shape, np.float16))
        assert loss.dtype == logits.grad.dtype == np.float16
        np.testing.assert_array_equal(loss.data, np.float16(expected))  # the float64 loss, rounded once
        np.testing.assert_allclose(logits.grad, grad / count, rtol=2 ** -11, atol=2 ** -25)  # and its gradient


@pytest.mark.parametrize("targets", [
    [[1, 2], [0, 3]],
    np.array([[1, 2], [0, 3]], dtype=np.int32),
    Tensor([[1, 2], [0, 3]]),
], ids=["list", "int32 array", "Tensor"])
def test_cross_entropy_target_types(targets):
    z = np.arange(16.0).reshape(2, 2, 4) / 5
    loss = ag.cross_entropy(leaf(z), targets)
    nll, _, _ = _ce_reference(z, np.array([[1, 2], [0, 3]]))
    assert loss.item() == pytest.approx(nll.mean(), rel=1e-12)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_ignore_index_divides_by_the_counted_targets(reduction):
    rng = np.random.default_rng(9)
    z = rng.normal(size=(2, 4, 5))
    t = np.array([[1, -100, 4, 0], [-100, -100, 2, 3]])
    logits = leaf(z)
    loss = ag.cross_entropy(logits, t, ignore_index=-100, reduction=reduction)
    nll, grad, valid = _ce_reference(z, t, ignore=-100)
    assert valid.sum() == 5
    if reduction == "none":
        np.testing.assert_allclose(loss.data, nll.reshape(2, 4), rtol=1e-12)
        assert loss.data[0, 1] == 0.0 and loss.data[1, 0] == 0.0
        loss.backward(np.ones((2, 4)))
        np.testing.assert_allclose(logits.grad, grad.reshape(z.shape), rtol=1e-12, atol=1e-15)
    else:
        count = 5 if reduction == "mean" else 1
        assert loss.item() == pytest.approx(nll.sum() / count, rel=1e-12)
        loss.backward()
        np.testing.assert_allclose(logits.grad, grad.reshape(z.shape) / count, rtol=1e-12, atol=1e-15)
    np.testing.assert_array_equal(logits.grad[0, 1], np.zeros(5))  # ignored rows get no gradient
    np.testing.assert_array_equal(logits.grad[1, 0], np.zeros(5))


def test_cross_entropy_ignore_index_can_be_a_valid_class_id():
    z = np.array([[2.0, 0.0, 1.0], [0.0, 1.0, 3.0]])
    loss = ag.cross_entropy(leaf(z), [0, 2], ignore_index=0)
    assert loss.item() == pytest.approx(-_log_softmax_ref(z)[1, 2], rel=1e-12)


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_cross_entropy_all_ignored_is_zero_with_zero_grad(reduction):
    logits = leaf(np.random.default_rng(0).normal(size=(3, 4)))
    with np.errstate(all="raise"), warnings.catch_warnings():
        warnings.simplefilter("error")
        loss = ag.cross_entropy(logits, [-1, -1, -1], ignore_index=-1, reduction=reduction)
        loss.backward()
    assert loss.item() == 0.0
    np.testing.assert_array_equal(logits.grad, np.zeros((3, 4)))


def test_cross_entropy_is_stable_for_huge_logits_float64():
    z = np.array([[1e4, -1e4, 0.0, 5.0],
                  [-1e4, 1e4, 1e4, -1e4],
                  [-1e4, -1e4, -1e4, -1e4]])
    t = np.array([1, 2, 0])
    logits = leaf(z)
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        loss = ag.cross_entropy(logits, t)
        loss.backward()
    nll, grad, _ = _ce_reference(z, t)
    # row 0: target −1e4 against the max 1e4 costs 2e4; row 1: two tied maxima cost ln 2; row 2: uniform, ln 4
    np.testing.assert_allclose(nll, [2e4, math.log(2), math.log(4)], rtol=1e-12)
    assert np.isfinite(loss.item()) and np.all(np.isfinite(logits.grad))
    assert loss.item() == pytest.approx(nll.mean(), rel=1e-12)
    np.testing.assert_allclose(logits.grad, grad / 3, rtol=1e-12, atol=1e-15)


def test_cross_entropy_is_stable_for_huge_logits_float32():
    z = np.array([[1e4, -1e4, 0.0], [-1e4, 1e4, 3.0]])
    t = np.array([1, 1])
    logits = Tensor(z.astype(np.float32), requires_grad=True)
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        loss = ag.cross_entropy(logits, t)
        loss.backward()
    nll, grad, _ = _ce_reference(z, t)
    assert loss.dtype == np.float32 and logits.grad.dtype == np.float32
    assert np.isfinite(loss.item()) and np.all(np.isfinite(logits.grad))
    assert loss.item() == pytest.approx(nll.mean(), rel=1e-6)
    np.testing.assert_allclose(logits.grad, grad / 2, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_log_softmax_and_cross_entropy_keep_the_log_sum_apart_from_a_huge_maximum(dtype):
    # log Σ exp z = m + log Σ exp(z − m) rounds to m once m is large: z minus it was 0 for each tied maximum
    # (PyTorch: −ln 2, −ln 4), and float32 logits near 1e4 were off by up to 5e-4
    z = np.array([[1e30, 1e30, -1e30, 0.0], [3e38, 3e38, 3e38, 3e38], [1e4, 1e4 - 1, 1e4 - 2, 1e4 - 3]]).astype(dtype)
    expected = _log_softmax_ref(z.astype(np.float64))
    np.testing.assert_allclose(expected[:2, :2], -np.log([[2, 2], [4, 4]]))
    logits = Tensor(z, requires_grad=True)
    np.testing.assert_allclose(ag.log_softmax(logits).data, expected, rtol=1e-6)
    t = np.array([0, 3, 1])
    loss = ag.cross_entropy(logits, t, reduction="none")
    np.testing.assert_allclose(loss.data, -expected[np.arange(3), t], rtol=1e-6)
    loss.backward(np.ones(3, dtype))
    _, grad, _ = _ce_reference(z.astype(np.float64), t)
    np.testing.assert_allclose(logits.grad, grad, rtol=1e-6, atol=1e-7)


def test_cross_entropy_gives_an_ignored_row_no_loss_whatever_its_logits():
    # an ignored row was scored against class 0 and multiplied by 0: a class 0 masked with −inf made inf · 0 = NaN
    z = np.array([[-np.inf, 0.0, 1.0], [0.0, 1.0, 2.0]])
    logits = leaf(z)
    losses = ag.cross_entropy(logits, [-100, 2], ignore_index=-100, reduction="none")
    np.testing.assert_array_equal(losses.data, [0.0, -_log_softmax_ref(z[1:])[0, 2]])
    loss = ag.cross_entropy(logits, [-100, 2], ignore_index=-100)
    assert loss.item() == pytest.approx(-_log_softmax_ref(z[1:])[0, 2], rel=1e-12)
    loss.backward()
    _, grad, _ = _ce_reference(z, np.array([-100, 2]), ignore=-100)
    np.testing.assert_allclose(logits.grad, grad, rtol=1e-12, atol=1e-15)


# embedding

@pytest.mark.parametrize("ids", [
    [[0, 2, 0], [3, 0, 2]],
    np.array([[0, 2, 0], [3, 0, 2]]),
    Tensor([[0, 2, 0], [3, 0, 2]]),
], ids=["list", "array", "Tensor"])
def test_embedding_looks_up_rows_and_scatter_adds(ids):
    table = np.arange(12.0).reshape(4, 3)
    weight = leaf(table)
    out = ag.embedding(weight, ids)
    ids_np = np.array([[0, 2, 0], [3, 0, 2]])
    assert out.shape == (2, 3, 3)
    np.testing.assert_array_equal(out.data, table[ids_np])
    upstream = np.arange(18.0).reshape(2, 3, 3)
    out.backward(upstream)
    expected = np.zeros((4, 3))
    for (i, j), row in np.ndenumerate(ids_np):  # an explicit loop: every occurrence adds its gradient
        expected[row] += upstream[i, j]
    np.testing.assert_array_equal(weight.grad, expected)
    np.testing.assert_array_equal(weight.grad[1], np.zeros(3))  # never looked up
    np.testing.assert_array_equal(weight.grad[0], upstream[0, 0] + upstream[0, 2] + upstream[1, 1])


@pytest.mark.parametrize("ids", [[0, 1, 3, 5], [1, 1, 3, 5], [5, 3, 1, 0], [0, 3, 1, 5]],
                         ids=["increasing", "a repeat", "decreasing", "unordered"])
def test_embedding_rows_in_any_order_add_every_occurrence(ids):
    """backend.scatter_add's rows: in increasing order, each once (a position table's), added in one pass; any
    other order sorted first. Both give each row the exact sum of its occurrences."""
    weight = leaf(np.zeros((6, 2)))
    upstream = np.arange(1.0, 9.0).reshape(4, 2) / 3
    ag.embedding(weight, ids).backward(upstream)
    expected = np.zeros((6, 2))
    for i, row in enumerate(ids):
        expected[row] += upstream[i]
    np.testing.assert_array_equal(weight.grad, expected)


def test_embedding_scalar_and_1d_ids():
    weight = leaf(np.arange(6.0).reshape(3, 2))
    np.testing.assert_array_equal(ag.embedding(weight, 2).data, [4.0, 5.0])
    out = ag.embedding(weight, [1, 1, 1])
    out.sum().backward()
    np.testing.assert_array_equal(weight.grad, [[0, 0], [3, 3], [0, 0]])


def test_float16_picks_repeated_4096_times_add_up_in_float32():
    """numpy.add.at (x[ids]'s gradient) added float16 in float16, where 2048 + 1 rounds back to 2048: 4096 picks
    of a row of ones summed to 2048. Every scatter-add now adds in float32 and rounds once: exactly 4096."""
    ids = np.zeros(4096, np.int64)
    for pick in (lambda w: w[ids], lambda w: w[ids, 1:], lambda w: ag.embedding(w, ids)):
        w = Tensor(np.ones((3, 8), np.float16), requires_grad=True)
        out = pick(w)
        out.backward(np.ones(out.shape, np.float16))
        assert w.grad.dtype == np.float16
        expected = np.zeros((3, 8))
        expected[0, 8 - out.shape[-1]:] = 4096
        np.testing.assert_array_equal(w.grad, expected)


# layer_norm

def _layer_norm_ref(x, w, b, eps=1e-5):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    y = (x - mu) / np.sqrt(var + eps) * w
    return y if b is None else y + b


@pytest.mark.parametrize("eps", [1e-5, 1e-2])
def test_layer_norm_forward_against_reference(eps):
    rng = np.random.default_rng(2)
    x, w, b = rng.normal(size=(2, 3, 6)) * 4 + 1, rng.normal(size=6), rng.normal(size=6)
    out = ag.layer_norm(leaf(x), leaf(w), leaf(b), eps=eps)
    np.testing.assert_allclose(out.data, _layer_norm_ref(x, w, b, eps), rtol=1e-12, atol=1e-12)
    no_bias = ag.layer_norm(leaf(x), leaf(w), None, eps=eps)
    np.testing.assert_allclose(no_bias.data, _layer_norm_ref(x, w, None, eps), rtol=1e-12, atol=1e-12)


def test_layer_norm_with_unit_weight_normalises():
    x = leaf(np.array([[1.0, 2.0, 3.0, 4.0]]))
    y = ag.layer_norm(x, leaf(np.ones(4)), leaf(np.zeros(4)), eps=0.0)
    # mean 2.5, variance 1.25: (x − 2.5)/√1.25
    np.testing.assert_allclose(y.data, [(np.array([1.0, 2.0, 3.0, 4.0]) - 2.5) / math.sqrt(1.25)])
    assert abs(y.data.mean()) < 1e-12 and y.data.var() == pytest.approx(1.0)


def test_layer_norm_gradients_weight_and_bias_by_reference():
    rng = np.random.default_rng(4)
    x, w, b = rand(rng, 3, 5), rand(rng, 5), rand(rng, 5)
    g = rng.normal(size=(3, 5))
    ag.layer_norm(x, w, b).backward(g)
    xhat = _layer_norm_ref(x.data, np.ones(5), None)
    np.testing.assert_allclose(w.grad, (g * xhat).sum(axis=0), rtol=1e-10)  # dγ = Σ g ⊙ x̂
    np.testing.assert_allclose(b.grad, g.sum(axis=0), rtol=1e-12)          # dβ = Σ g
    check(lambda x_, w_, b_: ag.layer_norm(x_, w_, b_, eps=1e-3), x, w, b)


def test_layer_norm_float32_with_float32_params():
    x = Tensor(np.random.default_rng(0).normal(size=(2, 4)).astype(np.float32), requires_grad=True)
    w, b = ag.ones(4, requires_grad=True), ag.zeros(4, requires_grad=True)
    y = ag.layer_norm(x, w, b)
    assert y.dtype == np.float32
    (y * y).sum().backward()
    assert x.grad.dtype == w.grad.dtype == b.grad.dtype == np.float32


def test_layer_norm_of_float16_is_computed_in_float32():
    """Rows of 768 features about 100: a row's sum (76800) passes float16's largest, 65504: the output was NaN."""
    rng = np.random.default_rng(0)
    x, g = rng.normal(size=(4, 768)) * 30 + 100, rng.normal(size=(4, 768))
    w, b = rng.normal(size=768), rng.normal(size=768)
    halves = [Tensor(a.astype(np.float16), requires_grad=True) for a in (x, w, b)]
    y = ag.layer_norm(*halves)
    y.backward(g.astype(np.float16))
    exact = [leaf(a.astype(np.float16)) for a in (x, w, b)]  # the same float16 values, in float64
    ag.layer_norm(*exact).backward(g.astype(np.float16).astype(np.float64))
    assert y.dtype == np.float16 and all(t.grad.dtype == np.float16 for t in halves)
    np.testing.assert_allclose(y.data, _layer_norm_ref(*[t.data for t in exact]), rtol=2e-3, atol=2e-3)
    for half, wide in zip(halves, exact):  # float16's 11 bits
        np.testing.assert_allclose(half.grad, wide.grad, rtol=2e-3, atol=2e-3 * np.abs(wide.grad).max())


@pytest.mark.parametrize("wide", [np.float32, np.float64])
def test_layer_norm_and_attention_of_float16_with_a_wider_float_take_the_wider_dtype_as_add_does(wide):
    """float16 x with a float64 weight gave float16, where x * weight + bias gives float64; the same values in the
    wider dtype throughout give the same output, and each gradient comes back in its input's dtype."""
    rng = np.random.default_rng(3)
    x, w, b, g = rng.normal(size=(3, 8)), rng.normal(size=8), rng.normal(size=8), rng.normal(size=(3, 8))
    half = Tensor(x.astype(np.float16), requires_grad=True)
    weight, bias = Tensor(w.astype(wide), requires_grad=True), Tensor(b.astype(wide))
    y = ag.layer_norm(half, weight, bias)
    y.backward(g.astype(wide))
    widened = Tensor(x.astype(np.float16).astype(wide), requires_grad=True)
    same = ag.layer_norm(widened, Tensor(w.astype(wide)), bias)
    same.backward(g.astype(wide))
    assert y.dtype == (half + weight).dtype == wide
    np.testing.assert_array_equal(y.data, same.data)
    assert half.grad.dtype == np.float16 and weight.grad.dtype == wide
    np.testing.assert_array_equal(half.grad, widened.grad.astype(np.float16))
    q, k, v = (rng.normal(size=(1, 2, 4, 8)) for _ in range(3))
    out = ag.scaled_dot_product_attention(Tensor(q.astype(np.float16)), Tensor(k.astype(wide)), Tensor(v.astype(wide)))
    want = ag.scaled_dot_product_attention(*(Tensor(a.astype(np.float16).astype(wide) if a is q else a.astype(wide))
                                             for a in (q, k, v)))
    assert out.dtype == wide
    np.testing.assert_array_equal(out.data, want.data)


@pytest.mark.parametrize("dtypes", [(np.float32, np.float64, np.float64), (np.float64, np.float32, np.float32),
                                    (np.float32, np.float32, np.float64)])
def test_layer_norm_of_float32_and_float64_takes_the_wider_dtype_as_add_does(dtypes):
    """float32 x with a float64 weight gave float32 (x̂ ⊙ γ written into an array of x's dtype), where
    x * weight + bias gives float64: the output is of the wider dtype and equals the all-float64 run's, each
    gradient that run's in its input's own dtype."""
    rng = np.random.default_rng(4)
    arrays = [rng.normal(size=(3, 8)).astype(dtypes[0])] + [rng.normal(size=8).astype(d) for d in dtypes[1:]]
    g = rng.normal(size=(3, 8))
    mixed = [Tensor(a, requires_grad=True) for a in arrays]
    y = ag.layer_norm(*mixed)
    y.backward(g)
    wide = [leaf(a.astype(np.float64)) for a in arrays]
    want = ag.layer_norm(*wide)
    want.backward(g)
    assert y.dtype == (mixed[0] * mixed[1] + mixed[2]).dtype == np.float64
    np.testing.assert_array_equal(y.data, want.data)
    for t, w, dtype in zip(mixed, wide, dtypes):
        assert t.grad.dtype == dtype
        np.testing.assert_array_equal(t.grad, w.grad.astype(dtype))


# dropout

def test_dropout_identity_when_not_training_or_p_zero():
    x = leaf(np.arange(1.0, 7.0))
    for y in (ag.dropout(x, 0.5, training=False), ag.dropout(x, 0.0, training=True), ag.dropout(x, 0.0)):
        np.testing.assert_array_equal(y.data, x.data)
    y = ag.dropout(x, 0.9, training=False)
    y.sum().backward()
    np.testing.assert_array_equal(x.grad, np.ones(6))


def test_dropout_inverted_scaling_and_gradient():
    ag.manual_seed(0)
    x = leaf(np.full(1000, 2.0))
    y = ag.dropout(x, 0.25)
    kept = y.data != 0
    assert 0 < kept.sum() < 1000
    np.testing.assert_allclose(y.data[kept], 2.0 / 0.75)  # kept values scaled by 1/(1 − p)
    y.sum().backward()
    np.testing.assert_allclose(x.grad[kept], 1 / 0.75)
    np.testing.assert_array_equal(x.grad[~kept], 0.0)


def test_dropout_statistics():
    ag.manual_seed(1)
    n, p = 200_000, 0.3
    y = ag.dropout(Tensor(np.ones(n, dtype=np.float32)), p)
    assert y.dtype == np.float32
    dropped = np.mean(y.data == 0)
    assert abs(dropped - p) < 0.01  # std of the fraction ≈ 0.001
    assert abs(y.data.mean() - 1.0) < 0.01  # inverted dropout keeps the expectation


def test_dropout_p_one_drops_everything():
    y = ag.dropout(leaf(np.ones(10)), 1.0)
    np.testing.assert_array_equal(y.data, np.zeros(10))


def test_dropout_is_reproducible_with_manual_seed():
    x = Tensor(np.ones((50, 40)))
    ag.manual_seed(123)
    a = ag.dropout(x, 0.5).data
    b = ag.dropout(x, 0.5).data
    ag.manual_seed(123)
    c = ag.dropout(x, 0.5).data
    np.testing.assert_array_equal(a, c)
    assert not np.array_equal(a, b)


# attention

def _attention_ref(q, k, v, causal):
    d = q.shape[-1]
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(d)
    if causal:
        tq, tk = scores.shape[-2:]
        visible = np.arange(tk)[None, :] <= np.arange(tq)[:, None] + (tk - tq)
        scores = np.where(visible, scores, -np.inf)
    return _softmax_ref(scores) @ v


@pytest.mark.parametrize("causal", [True, False])
def test_attention_against_reference(causal):
    rng = np.random.default_rng(11)
    q, k, v = (rng.normal(size=(2, 3, 5, 4)) for _ in range(3))
    out = ag.scaled_dot_product_attention(leaf(q), leaf(k), leaf(v), causal=causal)
    assert out.shape == (2, 3, 5, 4)
    np.testing.assert_allclose(out.data, _attention_ref(q, k, v, causal), rtol=1e-12, atol=1e-14)
    if causal:  # the first position sees only itself
        np.testing.assert_allclose(out.data[:, :, 0], v[:, :, 0], rtol=1e-12)


@pytest.mark.parametrize("fused", ["0", "1"])
@pytest.mark.parametrize("spread", ["2048 keys, scores of spread 3", "scores near 1000"])
def test_attention_of_float16_is_computed_in_float32_and_rounded_once(monkeypatch, fused, spread):
    """In float16 S, P and the row sums were rounded each: over 2048 keys O was 0.17 % of its largest entry off,
    six times PyTorch's error; near scores of 1000, which float16 holds to 0.5, P was tens of percent off (O by
    18 % of its largest entry, dK by 61 %). Each result is now within 2⁻¹⁰ of its largest entry, twice float16's
    rounding."""
    monkeypatch.setenv("AUTOGRAD_FUSED", fused)
    rng = np.random.default_rng(14)
    q, k, v, g = (rng.normal(size=(1, 2, 2048, 64)) for _ in range(4))
    if spread == "scores near 1000":
        q, k = 12 + q / 2, 12 + k / 2
    else:
        q *= 3
    causal = spread == "scores near 1000"
    halves = [Tensor(a.astype(np.float16), requires_grad=True) for a in (q, k, v)]
    out = ag.scaled_dot_product_attention(*halves, causal=causal)
    out.backward(g.astype(np.float16))
    exact = [leaf(a.astype(np.float16)) for a in (q, k, v)]  # the same float16 values, in float64
    out64 = ag.scaled_dot_product_attention(*exact, causal=causal)
    out64.backward(g.astype(np.float16).astype(np.float64))
    np.testing.assert_allclose(out64.data, _attention_ref(*[t.data for t in exact], causal), rtol=1e-10, atol=1e-12)
    assert out.dtype == np.float16 and all(t.grad.dtype == np.float16 for t in halves)
    for half, wide in zip([out, *(t.grad for t in halves)], [out64, *(t.grad for t in exact)]):
        np.testing.assert_allclose(half.data, wide.data, rtol=0, atol=2 ** -10 * np.abs(wide.data).max())


def test_attention_default_is_causal_and_scaled_by_sqrt_d():
    rng = np.random.default_rng(12)
    q, k, v = (rng.normal(size=(1, 2, 4, 9)) for _ in range(3))
    out = ag.scaled_dot_product_attention(leaf(q), leaf(k), leaf(v))
    np.testing.assert_allclose(out.data, _attention_ref(q, k, v, True), rtol=1e-12)
    unscaled = _softmax_ref(np.where(np.tril(np.ones((4, 4), bool)), q @ np.swapaxes(k, -1, -2), -np.inf)) @ v
    assert not np.allclose(out.data, unscaled)  # 1/√D matters: D = 9 divides by 3


def test_attention_with_fewer_queries_than_keys():
    # a KV cache: the Tq queries are the last Tq positions of the Tk keys
    rng = np.random.default_rng(13)
    q, k, v = (rng.normal(size=(1, 2, 6, 3)) for _ in range(3))
    full = ag.scaled_dot_product_attention(leaf(q), leaf(k), leaf(v), causal=True)
    tail = ag.scaled_dot_product_attention(leaf(q[:, :, -2:]), leaf(k), leaf(v), causal=True)
    assert tail.shape == (1, 2, 2, 3)
    np.testing.assert_allclose(tail.data, full.data[:, :, -2:], rtol=1e-12)
    np.testing.assert_allclose(tail.data, _attention_ref(q[:, :, -2:], k, v, True), rtol=1e-12)
    last = ag.scaled_dot_product_attention(leaf(q[:, :, -1:]), leaf(k), leaf(v), causal=True)
    np.testing.assert_allclose(last.data, _attention_ref(q[:, :, -1:], k, v, False), rtol=1e-12)


# concat, stack, split, where

def test_concat_stack_split_round_trip_and_gradients():
    a = leaf(np.arange(6.0).reshape(2, 3))
    b = leaf(np.arange(6.0, 12.0).reshape(2, 3))
    c = ag.concat([a, b], axis=1)
    assert c.shape == (2, 6)
    left, right = ag.split(c, 2, axis=1)
    np.testing.assert_array_equal(left.data, a.data)
    np.testing.assert_array_equal(right.data, b.data)
    s = ag.stack([a, b])
    assert s.shape == (2, 2, 3)
    (left * 2.0 + right * 3.0 + s[1] * 10.0).sum().backward()
    np.testing.assert_array_equal(a.grad, np.full((2, 3), 2.0))
    np.testing.assert_array_equal(b.grad, np.full((2, 3), 13.0))


def test_split_follows_numpy():
    x = Tensor(np.arange(12.0).reshape(3, 4))
    assert [p.shape for p in ag.split(x, 4, axis=1)] == [(3, 1)] * 4
    assert [p.shape for p in ag.split(x, [1, 3], axis=1)] == [(3, 1), (3, 2), (3, 1)]
    assert [p.shape for p in ag.split(x, 3)] == [(1, 4)] * 3
    assert [p.shape for p in ag.split(x, [2], axis=-1)] == [(3, 2), (3, 2)]
    for got, want in zip(ag.split(x, [1, 3], axis=1), np.split(x.data, [1, 3], axis=1)):
        np.testing.assert_array_equal(got.data, want)


def test_split_of_an_array_gives_tensors_as_concat_and_stack_take_arrays():
    pieces = ag.split(np.arange(4.0), 2)  # were ndarrays
    assert all(type(p) is Tensor for p in pieces)
    np.testing.assert_array_equal(ag.concat(pieces).data, np.arange(4.0))
    assert [p.tolist() for p in pieces] == [[0.0, 1.0], [2.0, 3.0]]


def test_concat_and_stack_accept_constants():
    a = leaf([1.0, 2.0])
    c = ag.concat([a, np.array([3.0])])
    np.testing.assert_array_equal(c.data, [1.0, 2.0, 3.0])
    s = ag.stack([a, [5.0, 6.0]], axis=1)
    np.testing.assert_array_equal(s.data, [[1.0, 5.0], [2.0, 6.0]])
    (c.sum() + s.sum()).backward()
    np.testing.assert_array_equal(a.grad, [2.0, 2.0])


def test_where_hand_gradients_and_constants():
    a = leaf([1.0, 2.0, 3.0])
    b = leaf([10.0, 20.0, 30.0])
    cond = Tensor([True, False, True])
    out = ag.where(cond, a, b)
    np.testing.assert_array_equal(out.data, [1.0, 20.0, 3.0])
    out.backward(np.array([1.0, 2.0, 3.0]))
    np.testing.assert_array_equal(a.grad, [1.0, 0.0, 3.0])
    np.testing.assert_array_equal(b.grad, [0.0, 2.0, 0.0])
    clipped = ag.where(a > 1.5, a, 0.0)
    np.testing.assert_array_equal(clipped.data, [0.0, 2.0, 3.0])
    assert clipped.dtype == np.float64


# constructors

@pytest.mark.parametrize("make, value", [(ag.zeros, 0.0), (ag.ones, 1.0)], ids=["zeros", "ones"])
def test_zeros_and_ones(make, value):
    for t in (make(2, 3), make((2, 3)), make(2, 3, device="cpu")):
        assert t.shape == (2, 3) and t.dtype == np.float32 and t.device == "cpu"
        np.testing.assert_array_equal(t.data, np.full((2, 3), value))
        assert not t.requires_grad
    t = make(4, dtype=np.float64, requires_grad=True)
    assert t.dtype == np.float64 and t.requires_grad and t.is_leaf


def test_randn_seeded_and_distributed():
    ag.manual_seed(42)
    a = ag.randn(3, 4)
    b = ag.randn(3, 4)
    ag.manual_seed(42)
    c = ag.randn((3, 4), device="cpu")
    assert a.shape == (3, 4) and a.dtype == np.float32 and a.device == "cpu"
    np.testing.assert_array_equal(a.data, c.data)
    assert not np.array_equal(a.data, b.data)
    big = ag.randn(100_000, dtype=np.float64)
    assert big.dtype == np.float64
    assert abs(big.data.mean()) < 0.02 and abs(big.data.std() - 1) < 0.02


def test_arange():
    t = ag.arange(5)
    assert t.dtype == np.int64 and t.tolist() == [0, 1, 2, 3, 4]
    assert ag.arange(2, 8, 3).tolist() == [2, 5]
    f = ag.arange(0.0, 1.0, 0.25)
    assert f.dtype == np.float32 and f.tolist() == [0.0, 0.25, 0.5, 0.75]
    d = ag.arange(3, dtype=np.float64, device="cpu")
    assert d.dtype == np.float64 and d.device == "cpu" and d.tolist() == [0.0, 1.0, 2.0]


def test_arange_makes_a_leaf_that_requires_grad_as_the_other_constructors():
    t = ag.arange(0.0, 3.0, requires_grad=True)
    assert t.requires_grad and t.is_leaf and t.dtype == np.float32
    (t * t).sum().backward()
    np.testing.assert_array_equal(t.grad, [0.0, 2.0, 4.0])
    with pytest.raises(TypeError, match="only floating-point tensors can require grad, this one is int64"):
        ag.arange(3, requires_grad=True)


def test_constructors_follow_the_default_dtype(float64_default):
    assert ag.zeros(2).dtype == np.float64
    assert ag.ones(2).dtype == np.float64
    assert ag.randn(2).dtype == np.float64
    assert ag.arange(0.0, 2.0).dtype == np.float64


# dtype conventions

def test_dtype_conventions():
    assert Tensor([1, 2, 3]).dtype == np.int64
    assert Tensor([1.0, 2.0]).dtype == np.float32
    assert Tensor(2.5).dtype == np.float32
    assert Tensor([[1, 2.5]]).dtype == np.float32
    assert Tensor(np.array([1.0, 2.0])).dtype == np.float64  # a float64 ndarray keeps float64
    assert Tensor(np.array([1.0], dtype=np.float32)).dtype == np.float32
    assert Tensor(np.array([1, 2], dtype=np.int32)).dtype == np.int32
    assert Tensor([True, False]).dtype == np.bool_
    assert Tensor([1.0], dtype=np.float64).dtype == np.float64
    assert Tensor([1, 2], dtype="float32").dtype == np.float32
    assert ag.get_default_dtype() == np.float32


def test_set_default_dtype_changes_python_numbers(float64_default):
    assert ag.get_default_dtype() == np.float64
    assert Tensor([1.0, 2.0]).dtype == np.float64
    assert Tensor([1, 2]).dtype == np.int64  # integers stay integers
    assert Tensor(np.array([1.0], dtype=np.float32)).dtype == np.float32  # arrays keep theirs


def test_default_dtype_is_restored_by_the_fixture():
    assert ag.get_default_dtype() == np.float32


def test_python_numbers_take_the_tensors_dtype():
    x = Tensor(np.ones(2, dtype=np.float32))
    for y in (x * 2.0, 2.0 * x, x + 1, x / 3.0, x ** 2, 1.0 - x):
        assert y.dtype == np.float32
    x64 = leaf([1.0])
    assert (x64 * 2.0).dtype == np.float64


def test_tensor_from_tensor_copies_nothing_into_the_graph():
    a = leaf([1.0, 2.0])
    b = Tensor(a)
    assert not b.requires_grad and b.dtype == np.float64
    np.testing.assert_array_equal(b.data, a.data)


# comparisons

def test_relu_of_bools_stays_bool_as_add_and_mul_of_bools_do():
    b = Tensor(np.array([True, False]))
    assert (b + b).dtype == (b * b).dtype == np.bool_
    y = b.relu()  # was int64, NumPy's max(bool, 0)
    assert y.dtype == np.bool_ and y.tolist() == [True, False]
    assert Tensor(np.array([3, -2])).relu().tolist() == [3, 0]


def test_comparisons_give_boolean_tensors_without_grad():
    a = leaf([1.0, 2.0, 3.0])
    b = leaf([3.0, 2.0, 1.0])
    cases = {
        "<": (a < b, [True, False, False]), "<=": (a <= b, [True, True, False]),
        ">": (a > b, [False, False, True]), ">=": (a >= b, [False, True, True]),
        "==": (a == b, [False, True, False]), "!=": (a != b, [True, False, True]),
        "> number": (a > 1.5, [False, True, True]), "== array": (a == np.array([1.0, 0, 3]), [True, False, True]),
    }
    for name, (result, expected) in cases.items():
        assert isinstance(result, Tensor), name
        assert result.dtype == np.bool_ and not result.requires_grad and result.is_leaf, name
        assert result.tolist() == expected, name


# attributes, devices, leaving the graph

def test_attributes():
    t = Tensor(np.zeros((2, 3, 4)), requires_grad=True)
    assert t.shape == (2, 3, 4) and t.ndim == 3 and t.dtype == np.float64
    assert t.device == "cpu" and t.requires_grad and t.is_leaf and t.grad is None
    assert len(t) == 2
    assert [row.shape for row in t] == [(3, 4), (3, 4)]


def test_to_cpu_and_cpu():
    x = leaf([1.0, 2.0])
    assert x.to("cpu").device == "cpu"
    np.testing.assert_array_equal(x.to("cpu").data, x.data)
    y = x.cpu()
    assert y.device == "cpu"
    (y * 3.0).sum().backward()
    np.testing.assert_array_equal(x.grad, [3.0, 3.0])
    z = Tensor([1.0], device="cpu")
    assert z.device == "cpu" and isinstance(z.data, np.ndarray)


def test_numpy_item_tolist():
    x = Tensor([[1.5, 2.5]])
    arr = x.numpy()
    assert isinstance(arr, np.ndarray) and arr.dtype == np.float32
    np.testing.assert_array_equal(arr, [[1.5, 2.5]])
    s = x.sum().item()
    assert isinstance(s, float) and s == 4.0
    assert Tensor([7]).sum().item() == 7 and isinstance(Tensor([7]).sum().item(), int)
    assert x.tolist() == [[1.5, 2.5]]
    assert Tensor([1, 2]).tolist() == [1, 2]


def test_item_on_a_non_scalar_fails():
    with pytest.raises(ValueError):
        Tensor([1.0, 2.0]).item()


def test_repr_names_dtype_and_grad():
    r = repr(leaf([1.0]) * 2.0)
    assert "float64" in r and "requires_grad=True" in r and "Mul" in r
