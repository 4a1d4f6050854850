"""NumPy broadcasting for every binary op, on shapes hypothesis draws: forward values, and gradients summed back
to each input's shape (checked against a brute-force reference and against finite differences)."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

import autograd as ag

from ._helpers import check, leaf, unbroadcast_reference

SMALL = settings(max_examples=25, deadline=None)

pair_shapes = hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, max_side=3)
# empty axes too: broadcasting a length-0 axis must still give gradients of the right (empty or zero) shape
pair_shapes_with_empty = hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, min_side=0, max_side=3)

OPS = {
    "add": (lambda a, b: a + b, np.add),
    "sub": (lambda a, b: a - b, np.subtract),
    "mul": (lambda a, b: a * b, np.multiply),
    "div": (lambda a, b: a / b, np.divide),
    "pow": (lambda a, b: a ** b, np.power),
}


def _local_partials(op, x, y):
    """∂z/∂x and ∂z/∂y elementwise, in the broadcast shape, derived by hand."""
    x, y = np.broadcast_arrays(x, y)
    if op == "add":
        return np.ones_like(x), np.ones_like(y)
    if op == "sub":
        return np.ones_like(x), -np.ones_like(y)
    if op == "mul":
        return y, x
    if op == "div":
        return 1 / y, -x / y ** 2
    return y * x ** (y - 1), x ** y * np.log(x)  # pow


def _operands(data, op, shapes):
    sx, sy = shapes.input_shapes
    base = st.floats(0.5, 2.0) if op == "pow" else st.floats(-3.0, 3.0)
    if op == "div":
        other = st.floats(0.5, 3.0).flatmap(lambda m: st.sampled_from([m, -m]))
    elif op == "pow":
        other = st.floats(-2.0, 2.0)
    else:
        other = st.floats(-3.0, 3.0)
    x = data.draw(hnp.arrays(np.float64, sx, elements=base), label="x")
    y = data.draw(hnp.arrays(np.float64, sy, elements=other), label="y")
    return x, y


@pytest.mark.parametrize("op", list(OPS))
@SMALL
@given(shapes=st.one_of(pair_shapes, pair_shapes_with_empty), data=st.data())
def test_binary_op_broadcasts_like_numpy(op, shapes, data):
    x_np, y_np = _operands(data, op, shapes)
    fn, reference = OPS[op]
    x, y = leaf(x_np), leaf(y_np)
    out = fn(x, y)
    expected = reference(x_np, y_np)
    assert out.shape == shapes.result_shape
    np.testing.assert_allclose(out.data, expected, rtol=1e-13, atol=1e-300)

    upstream = np.random.default_rng(0).normal(size=shapes.result_shape)
    out.backward(upstream)
    dx, dy = _local_partials(op, x_np, y_np)
    assert x.grad.shape == x_np.shape and x.grad.dtype == np.float64
    assert y.grad.shape == y_np.shape and y.grad.dtype == np.float64
    np.testing.assert_allclose(x.grad, unbroadcast_reference(upstream * dx, x_np.shape), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(y.grad, unbroadcast_reference(upstream * dy, y_np.shape), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("op", ["add", "mul", "div"])
@SMALL
@given(shapes=pair_shapes, data=st.data())
def test_binary_op_broadcast_gradcheck(op, shapes, data):
    x_np, y_np = _operands(data, op, shapes)
    check(OPS[op][0], leaf(x_np), leaf(y_np))


@SMALL
@given(shapes=hnp.mutually_broadcastable_shapes(signature=np.matmul.signature, max_dims=2, max_side=3),
       data=st.data())
def test_matmul_broadcasts_like_numpy(shapes, data):
    sa, sb = shapes.input_shapes
    a_np = data.draw(hnp.arrays(np.float64, sa, elements=st.floats(-2, 2)), label="a")
    b_np = data.draw(hnp.arrays(np.float64, sb, elements=st.floats(-2, 2)), label="b")
    a, b = leaf(a_np), leaf(b_np)
    out = a @ b
    assert out.shape == shapes.result_shape
    np.testing.assert_allclose(out.data, np.matmul(a_np, b_np), rtol=1e-12, atol=1e-12)
    check(lambda p, q: p @ q, a, b)
    assert a.grad.shape == sa and b.grad.shape == sb


@SMALL
@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=3, min_dims=0, max_dims=3, max_side=3),
       data=st.data())
def test_where_broadcasts_like_numpy(shapes, data):
    sc, sa, sb = shapes.input_shapes
    cond = data.draw(hnp.arrays(np.bool_, sc), label="cond")
    a_np = data.draw(hnp.arrays(np.float64, sa, elements=st.floats(-2, 2)), label="a")
    b_np = data.draw(hnp.arrays(np.float64, sb, elements=st.floats(-2, 2)), label="b")
    a, b = leaf(a_np), leaf(b_np)
    out = ag.where(cond, a, b)
    np.testing.assert_array_equal(out.data, np.where(cond, a_np, b_np))
    upstream = np.random.default_rng(1).normal(size=shapes.result_shape)
    out.backward(upstream)
    full_cond = np.broadcast_to(cond, shapes.result_shape)
    np.testing.assert_allclose(a.grad, unbroadcast_reference(np.where(full_cond, upstream, 0), sa), atol=1e-12)
    np.testing.assert_allclose(b.grad, unbroadcast_reference(np.where(full_cond, 0, upstream), sb), atol=1e-12)


def test_unbroadcast_reference_itself():
    # guard the test helper: (2, 3) summed back to (1, 3) and to (3,) and to ()
    g = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(unbroadcast_reference(g, (1, 3)), [[3.0, 5.0, 7.0]])
    np.testing.assert_array_equal(unbroadcast_reference(g, (3,)), [3.0, 5.0, 7.0])
    np.testing.assert_array_equal(unbroadcast_reference(g, (2, 1)), [[3.0], [12.0]])
    assert unbroadcast_reference(g, ()) == 15.0
