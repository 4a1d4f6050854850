"""The fused ops a transformer leans on: linear and attention (with dropout), and the no-alias rule for adopted grads."""
import numpy as np
import pytest

import autograd as ag
from autograd import Tensor

from ._helpers import check, leaf, rand


@pytest.mark.parametrize("x_shape", [(5,), (3, 5), (2, 3, 5)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_linear_matches_matmul_plus_bias_and_gradchecks(rng, x_shape, with_bias):
    x, w, b = rand(rng, *x_shape), rand(rng, 5, 4), rand(rng, 4)
    bias = b if with_bias else None
    expected = x.data @ w.data + (b.data if with_bias else 0)
    np.testing.assert_allclose(ag.linear(x, w, bias).data, expected, rtol=1e-12)
    inputs = (x, w, b) if with_bias else (x, w)
    check(lambda *t: ag.linear(*t), *inputs)


def test_linear_shape_errors_name_the_op_and_shapes(rng):
    with pytest.raises(ag.ShapeError, match=r"linear: input \(2, 3\) does not fit weight \(4, 5\)"):
        ag.linear(rand(rng, 2, 3), rand(rng, 4, 5))
    with pytest.raises(ag.ShapeError, match=r"linear: bias has shape \(4,\), expected \(5,\)"):
        ag.linear(rand(rng, 2, 4), rand(rng, 4, 5), rand(rng, 4))


@pytest.mark.parametrize("x_shape", [(2, 0), (2, 3, 0)], ids=str)
def test_linear_with_no_input_features_is_its_bias(rng, x_shape):
    x, w, b = rand(rng, *x_shape), rand(rng, 0, 4), rand(rng, 4)
    y = ag.linear(x, w, b)
    np.testing.assert_array_equal(y.data, np.broadcast_to(b.data, (*x_shape[:-1], 4)))
    y.sum().backward()
    assert x.grad.shape == x_shape and w.grad.shape == (0, 4)
    np.testing.assert_array_equal(b.grad, np.full(4, np.prod(x_shape[:-1])))
    check(lambda *t: ag.linear(*t), x, w, b)


def attention_reference(q, k, v, causal, drop=None):
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if causal:
        tq, tk = scores.shape[-2:]
        scores = np.where(np.arange(tk)[None, :] <= np.arange(tq)[:, None] + tk - tq, scores, -np.inf)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return (p if drop is None else p * drop) @ v


def seeded_attention(p_drop):
    def fn(q, k, v):
        ag.manual_seed(7)  # the same dropout mask on every call, so finite differences see one function
        return ag.scaled_dot_product_attention(q, k, v, dropout_p=p_drop)
    return fn


def test_attention_dropout_uses_one_mask_forward_and_backward(rng):
    q, k, v = rand(rng, 1, 2, 4, 3), rand(rng, 1, 2, 4, 3), rand(rng, 1, 2, 4, 3)
    out = seeded_attention(0.5)(q, k, v).data
    ag.manual_seed(7)
    mask = (ag.rand(1, 2, 4, 4, dtype=np.float64).data >= 0.5) * 2.0  # the generator draws the same numbers
    np.testing.assert_allclose(out, attention_reference(q.data, k.data, v.data, True, mask), rtol=1e-12)
    check(seeded_attention(0.5), q, k, v)
    check(seeded_attention(0.0), q, k, v)


def test_attention_cached_queries_see_earlier_keys(rng):
    q, k, v = rand(rng, 2, 1, 2, 3), rand(rng, 2, 1, 5, 3), rand(rng, 2, 1, 5, 4)
    got = ag.scaled_dot_product_attention(q, k, v).data
    np.testing.assert_allclose(got, attention_reference(q.data, k.data, v.data, True), rtol=1e-12)
    check(lambda q, k, v: ag.scaled_dot_product_attention(q, k, v, causal=False), q, k, v)


def test_attention_rejects_bad_dropout():
    x = leaf(np.ones((1, 1, 2, 2)))
    with pytest.raises(ValueError, match=r"dropout_p must be a number in \[0, 1\), got 1.0"):
        ag.scaled_dot_product_attention(x, x, x, dropout_p=1.0)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])  # float32 of this size: the CPU kernels' own path
def test_attention_over_no_keys_is_zeros(dtype):
    q = Tensor(np.ones((2, 3, 300, 64), dtype), requires_grad=True)
    k, v = (Tensor(np.ones((2, 3, 0, d), dtype), requires_grad=True) for d in (64, 32))
    out = ag.scaled_dot_product_attention(q, k, v)
    np.testing.assert_array_equal(out.data, np.zeros((2, 3, 300, 32), dtype))
    out.sum().backward()
    np.testing.assert_array_equal(q.grad, np.zeros(q.shape, dtype))
    assert k.grad.shape == k.shape and v.grad.shape == v.shape


def test_adopted_grad_is_not_shared_with_a_leaf_reached_through_another_path():
    a, b = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    h = b.reshape(2) + 0.0  # b's gradient arrives as the same array Add also hands to a
    (a + h).backward(np.array([1.0, 1.0]))
    assert not np.shares_memory(a.grad, b.grad)
    a.grad *= 10
    np.testing.assert_array_equal(b.grad, [1.0, 1.0])



def test_attention_with_fully_masked_rows_gives_zeros_and_finite_grads(rng):
    q, k, v = rand(rng, 1, 1, 3, 2), rand(rng, 1, 1, 3, 2), rand(rng, 1, 1, 3, 2)
    mask = np.array([[True, False, False], [False, False, False], [True, True, True]])
    out = ag.ops.ScaledDotProductAttention.apply(q, k, v, mask=mask)
    assert np.array_equal(out.data[0, 0, 1], [0.0, 0.0])
    out.sum().backward()
    assert all(np.isfinite(t.grad).all() for t in (q, k, v))
    check(lambda q, k, v: ag.ops.ScaledDotProductAttention.apply(q, k, v, mask=mask), q, k, v)


def test_attention_rebuilds_p_for_contexts_longer_than_four_head_sizes(rng):
    # Tk = 6 keys of D = 1 feature: P is not kept but rebuilt from the row log-sum-exps in backward
    q, k, v = rand(rng, 2, 2, 6, 1), rand(rng, 2, 2, 6, 1), rand(rng, 2, 2, 6, 2)
    out = ag.scaled_dot_product_attention(q, k, v)
    np.testing.assert_allclose(out.data, attention_reference(q.data, k.data, v.data, True), rtol=1e-12)
    check(lambda q, k, v: ag.scaled_dot_product_attention(q, k, v), q, k, v)
    check(seeded_attention(0.5), q, k, v)
    mask = np.tril(np.ones((6, 6), dtype=bool))
    mask[2] = False  # a row that sees nothing: zeros, finite gradients
    check(lambda q, k, v: ag.ops.ScaledDotProductAttention.apply(q, k, v, mask=mask), q, k, v)
