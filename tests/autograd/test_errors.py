"""Bad input gets a clear error that names the op and the shapes or dtypes involved."""
import operator
import re

import numpy as np
import pytest

import autograd as ag
import nn
from autograd import ShapeError, Tensor


def _cuda_available():
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


needs_no_gpu = pytest.mark.skipif(_cuda_available(), reason="CuPy and a GPU are present: 'cuda' works here")


def _message(excinfo):
    return str(excinfo.value)


def _has_shape(message, shape):
    """The shape appears in the message, in Python's (2, 3) or NumPy's (2,3) spelling."""
    return str(shape) in message or str(shape).replace(" ", "") in message


@pytest.mark.parametrize("op, name", [
    (lambda a, b: a + b, "add"), (lambda a, b: a - b, "sub"),
    (lambda a, b: a * b, "mul"), (lambda a, b: a / b, "div"),
])
def test_elementwise_shape_mismatch_names_op_and_shapes(op, name):
    a, b = Tensor(np.ones((2, 3))), Tensor(np.ones((4,)))
    with pytest.raises(ShapeError) as info:
        op(a, b)
    message = _message(info)
    assert name in message.lower()
    assert _has_shape(message, (2, 3)) and _has_shape(message, (4,))


def test_shape_error_is_a_value_error():
    with pytest.raises(ValueError):
        Tensor(np.ones((2, 3))) * Tensor(np.ones((3, 2)))


def test_matmul_inner_dimension_mismatch():
    with pytest.raises(ShapeError) as info:
        Tensor(np.ones((2, 3))) @ Tensor(np.ones((2, 3)))
    message = _message(info)
    assert "matmul" in message.lower()
    assert _has_shape(message, (2, 3))
    assert message.count("(2, 3)") == 2  # both operands named


def test_matmul_batch_mismatch():
    with pytest.raises(ShapeError) as info:
        Tensor(np.ones((2, 2, 3))) @ Tensor(np.ones((3, 3, 2)))
    message = _message(info)
    assert message == ("matmul: cannot multiply (2, 2, 3) by (3, 3, 2): the batch axes (2,) and (3,) do not "
                       "broadcast (each axis equal, or 1 in one of them); reshape or repeat an operand so its batches "
                       "match")


def test_matmul_batches_that_broadcast_still_multiply():
    a, b = np.arange(12.0).reshape(2, 1, 2, 3), np.arange(18.0).reshape(3, 3, 2)
    np.testing.assert_array_equal((Tensor(a) @ Tensor(b)).numpy(), a @ b)


def test_matmul_of_scalars_is_refused():
    with pytest.raises(ShapeError, match="matmul"):
        Tensor(2.0) @ Tensor([1.0, 2.0])


def test_integer_tensor_cannot_require_grad():
    with pytest.raises(TypeError) as info:
        Tensor([1, 2, 3], requires_grad=True)
    assert "int64" in _message(info) and "float" in _message(info)
    t = Tensor([1, 2])
    with pytest.raises(TypeError, match="int64"):
        t.requires_grad = True
    assert not t.requires_grad
    with pytest.raises(TypeError, match="bool"):
        Tensor([True, False], requires_grad=True)


def test_backward_on_non_scalar_needs_grad():
    y = Tensor(np.ones((2, 3)), requires_grad=True) * 2.0
    with pytest.raises(RuntimeError) as info:
        y.backward()
    message = _message(info)
    assert "backward" in message and "scalar" in message and _has_shape(message, (2, 3))


def test_backward_grad_of_wrong_shape():
    y = Tensor(np.ones(3), requires_grad=True) * 2.0
    with pytest.raises(ShapeError) as info:
        y.backward(np.ones(2))
    assert _message(info) == ("backward: grad has shape (2,) but the tensor has shape (3,); pass a gradient of "
                              "shape (3,), one entry per element (it is never broadcast)")


@pytest.mark.parametrize("seed", [np.ones((1, 3)), np.float64(2.0), 2.0], ids=["(1, 3)", "numpy", "python"])
def test_grad_outputs_that_would_broadcast_to_the_output_are_refused_in_one_line(seed):
    # a number gave Python's "'float' object is not iterable", naming neither grad nor grad_outputs
    x = Tensor(np.ones(3), requires_grad=True)
    with pytest.raises(ShapeError) as info:
        ag.grad(x * 2.0, x, grad_outputs=seed)
    assert _message(info) == (f"grad: grad has shape {np.shape(seed)} but the tensor has shape (3,); pass a gradient "
                              "of shape (3,), one entry per element (it is never broadcast)")


@pytest.mark.parametrize("seed", [np.float64(2.0), 2.0], ids=["numpy", "python"])
@pytest.mark.parametrize("create_graph", [False, True])
def test_a_scalar_outputs_grad_output_may_be_a_number_as_backwards_may(seed, create_graph):
    a = np.array([0.5, -1.25, 2.0])
    x = Tensor(a, requires_grad=True)
    (g,) = ag.grad((x ** 3).sum(), x, grad_outputs=seed, create_graph=create_graph)
    h = 1e-6
    numeric = [seed * (((a + h * e) ** 3).sum() - ((a - h * e) ** 3).sum()) / (2 * h) for e in np.eye(3)]
    np.testing.assert_allclose(g.numpy(), numeric, rtol=1e-8)
    np.testing.assert_allclose(g.numpy(), 2.0 * 3 * a ** 2, rtol=1e-12)


@pytest.mark.parametrize("update, symbol, name", [
    (operator.iadd, "+=", "Add"), (operator.isub, "-=", "Sub"), (operator.imul, "*=", "Mul"),
    (operator.itruediv, "/=", "Div"), (operator.ipow, "**=", "Pow"),
])
def test_an_augmented_assignment_that_would_broadcast_its_tensor_larger_is_refused(update, symbol, name):
    # `total += losses` turned a (3,) total into (2, 3), where NumPy and PyTorch refuse to write into it
    a = Tensor(np.ones(3), requires_grad=True)
    with pytest.raises(ShapeError) as info:
        update(a, Tensor(np.ones((2, 3))))
    assert _message(info) == (
        f"{symbol} ({name}): a tensor of shape (3,) cannot take an operand of shape (2, 3) in place, which would "
        f"broadcast it to (2, 3); a {symbol} b keeps a's shape, as in NumPy and PyTorch: write a = a "
        f"{symbol[:-1]} b for the broadcast result, or reduce b to shape (3,)")
    np.testing.assert_array_equal(a.data, np.ones(3))


def test_an_augmented_assignment_that_keeps_the_tensors_shape_is_the_operator_with_its_gradient():
    a = np.array([[1.0, 2.0, 3.0]])
    x = Tensor(a, requires_grad=True)
    y = x * 1.0
    y += [1.0, 2.0, 3.0]  # (1, 3) + (3,) stays (1, 3), as in NumPy
    y *= Tensor(np.array([2.0, 3.0, 4.0]))
    y -= 1.0
    y /= 2.0
    y **= 2
    assert y.shape == (1, 3)
    y.sum().backward()
    np.testing.assert_allclose(y.numpy(), (((a + [1, 2, 3]) * [2, 3, 4] - 1) / 2) ** 2)
    np.testing.assert_allclose(x.grad, 2 * (((a + [1, 2, 3]) * [2, 3, 4] - 1) / 2) * np.array([2, 3, 4]) / 2)


def test_backward_on_tensor_without_grad():
    with pytest.raises(RuntimeError, match="does not require grad"):
        Tensor([1.0, 2.0]).sum().backward()


def test_backward_through_freed_graph():
    x = Tensor([1.0], requires_grad=True)
    y = (x * x).sum()
    y.backward()
    with pytest.raises(RuntimeError) as info:
        y.backward()
    message = _message(info)
    assert "freed" in message and "retain_graph=True" in message
    assert re.search(r"Sum|Mul", message)  # names the op whose saved arrays are gone


@needs_no_gpu
def test_cuda_without_cupy_at_construction():
    with pytest.raises(RuntimeError, match="CuPy"):
        Tensor([1.0, 2.0], device="cuda")


@needs_no_gpu
def test_cuda_without_cupy_at_to():
    t = Tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="CuPy"):
        t.to("cuda")
    with pytest.raises(RuntimeError, match="CuPy"):
        ag.zeros(2, device="cuda")
    assert t.device == "cpu"  # nothing changed


@pytest.mark.parametrize("make", [
    lambda: Tensor([1.0], device="tpu"),
    lambda: Tensor([1.0]).to("tpu"),
    lambda: ag.zeros(2, device="gpu"),
    lambda: ag.randn(2, device="cuda:9x"),
], ids=["Tensor", "to", "zeros", "randn"])
def test_unknown_device(make):
    with pytest.raises(ValueError, match="unknown device") as info:
        make()
    assert "cpu" in _message(info) and "cuda" in _message(info)


@pytest.mark.parametrize("data, dtype_name", [
    (np.array([1 + 2j]), "complex128"),
    ([1j, 2j], "complex"),
    (["a", "b"], "<U1"),
    (np.array(["text"]), "<U4"),
    ([None], "object"),
])
def test_unsupported_dtype(data, dtype_name):
    with pytest.raises(TypeError) as info:
        Tensor(data)
    assert "Tensor" in _message(info) and dtype_name in _message(info)


def test_unsupported_dtype_requested():
    with pytest.raises(TypeError, match="complex64"):
        Tensor([1.0], dtype=np.complex64)
    with pytest.raises(TypeError, match="astype.*complex64"):
        Tensor([1.0]).astype(np.complex64)
    with pytest.raises(TypeError, match="int32"):
        ag.set_default_dtype(np.int32)


def test_cross_entropy_wrong_targets_shape():
    logits = Tensor(np.zeros((2, 3)), requires_grad=True)
    with pytest.raises(ShapeError) as info:
        ag.cross_entropy(logits, [0, 1, 2])
    message = _message(info)
    assert "cross_entropy" in message and _has_shape(message, (3,)) and _has_shape(message, (2, 3))
    assert _has_shape(message, (2,))


def test_cross_entropy_target_out_of_range():
    logits = Tensor(np.zeros((2, 3)))
    with pytest.raises(IndexError) as info:
        ag.cross_entropy(logits, [0, 3])
    assert "cross_entropy" in _message(info) and "3" in _message(info)
    with pytest.raises(IndexError, match="cross_entropy"):
        ag.cross_entropy(logits, [-1, 0])


def test_cross_entropy_float_targets_and_bad_reduction():
    logits = Tensor(np.zeros((2, 3)))
    with pytest.raises(TypeError, match="cross_entropy.*float64"):
        ag.cross_entropy(logits, np.array([0.0, 1.0]))
    with pytest.raises(ValueError, match="cross_entropy.*reduction"):
        ag.cross_entropy(logits, [0, 1], reduction="avg")


@pytest.mark.parametrize("ignore", [1.5, "-100", True])
def test_cross_entropy_refuses_an_ignore_index_that_is_not_an_int(ignore):
    # equal to no integer target, 1.5 or "-100" skipped no row, silently (PyTorch refuses them too)
    with pytest.raises(TypeError) as info:
        ag.cross_entropy(Tensor(np.zeros((2, 3))), [1, -100], ignore_index=ignore)
    assert _message(info) == ("cross_entropy: ignore_index must be an int (the target value of the rows to skip, "
                              f"e.g. -100) or None, got {ignore!r}")


def test_cross_entropy_takes_a_numpy_integer_ignore_index():
    logits = Tensor(np.log([[1.0, 1.0, 2.0], [1.0, 3.0, 4.0]]))
    assert ag.cross_entropy(logits, [2, 1], ignore_index=np.int64(2)).item() == pytest.approx(-np.log(3 / 8))


def test_embedding_with_float_ids():
    with pytest.raises(TypeError) as info:
        ag.embedding(Tensor(np.ones((4, 3))), np.array([0.0, 1.0]))
    assert "embedding" in _message(info) and "float64" in _message(info)


def test_embedding_id_out_of_range():
    with pytest.raises(IndexError, match="embedding"):
        ag.embedding(Tensor(np.ones((4, 3))), [0, 4])


@pytest.mark.parametrize("ids, values", [([0, 4], "0 to 4"), ([[2, -1]], "-1 to 2")])
def test_the_embedding_op_refuses_an_id_outside_its_table(ids, values):
    # the op, not only ag.embedding, checks: NumPy would read row -1 as the last one, CuPy wraps 4 around to 0
    table = Tensor(np.arange(12.0).reshape(4, 3), requires_grad=True)
    with pytest.raises(IndexError) as error:
        ag.ops.Embedding.apply(table, ids=np.array(ids))
    assert str(error.value) == (f"embedding: ids must lie in [0, 4) (the table's rows); got values from {values}; "
                                "an id past the table is one the model's vocabulary lacks: encode with the tokenizer "
                                "the model was made for, or give the table a row for every id")


@pytest.mark.parametrize("targets, ignore, values", [([0, 8192], None, "0 to 8192"), ([-3, -1], -1, "-3 to -3")])
def test_the_cross_entropy_op_refuses_a_target_before_the_cpu_kernel_reads_it(targets, ignore, values):
    # float32 rows of 8,192 logits take numba's kernel (kernels.fused), which indexes the row with the target
    logits = Tensor(np.zeros((2, 8192), np.float32), requires_grad=True)
    aside = "" if ignore is None else f", ignore_index={ignore} aside"
    with pytest.raises(IndexError) as error:
        ag.ops.CrossEntropy.apply(logits, targets=np.array(targets), ignore_index=ignore)
    assert str(error.value) == (f"cross_entropy: targets must lie in [0, 8192) (the number of classes{aside}); got "
                                f"values from {values}; each target is the index of its class on the logits' last "
                                "axis: give targets of the logits' own vocabulary (and ignore_index=k for rows marked "
                                "k to skip)")


def test_layer_norm_weight_and_bias_of_wrong_shape():
    x = Tensor(np.ones((2, 3)))
    with pytest.raises(ShapeError) as info:
        ag.layer_norm(x, Tensor(np.ones(4)), Tensor(np.zeros(3)))
    message = _message(info)
    assert "layer_norm" in message and "weight" in message
    assert _has_shape(message, (4,)) and _has_shape(message, (3,))
    with pytest.raises(ShapeError, match="layer_norm: bias"):
        ag.layer_norm(x, Tensor(np.ones(3)), Tensor(np.zeros((1, 3))))


def test_softmax_mask_not_boolean():
    with pytest.raises(TypeError) as info:
        ag.softmax(Tensor(np.ones((2, 3))), mask=np.ones((2, 3)))
    assert "softmax" in _message(info) and "float64" in _message(info) and "boolean" in _message(info)
    with pytest.raises(TypeError, match="softmax"):
        ag.softmax(Tensor(np.ones((2, 3))), mask=np.ones((2, 3), dtype=np.int64))


@pytest.mark.parametrize("mask_shape", [(4,), (3, 3), (2, 2, 3)], ids=str)
def test_softmax_mask_must_broadcast_to_the_scores(mask_shape):
    with pytest.raises(ShapeError) as info:
        ag.softmax(Tensor(np.ones((2, 3))), mask=np.ones(mask_shape, dtype=bool))
    assert "softmax" in _message(info) and _has_shape(_message(info), mask_shape)


def test_split_into_unequal_pieces():
    with pytest.raises(ShapeError) as info:
        ag.split(Tensor(np.ones(5)), 2)
    assert "split" in _message(info) and "5" in _message(info)


def test_where_condition_must_be_boolean():
    with pytest.raises(TypeError, match="where"):
        ag.where(np.array([1, 0]), Tensor([1.0, 2.0]), 0.0)


def test_attention_shape_mismatch():
    q = Tensor(np.ones((1, 1, 2, 3)))
    with pytest.raises(ShapeError, match="scaled_dot_product_attention"):
        ag.scaled_dot_product_attention(q, Tensor(np.ones((1, 1, 2, 4))), Tensor(np.ones((1, 1, 2, 3))))


def test_attention_dropout_p_that_is_no_number():
    x = Tensor(np.ones((1, 1, 2, 3)))
    with pytest.raises(ValueError) as info:  # was Python's "'<=' not supported between 'int' and 'str'"
        ag.scaled_dot_product_attention(x, x, x, dropout_p="0.1")
    assert _message(info) == "scaled_dot_product_attention: dropout_p must be a number in [0, 1), got '0.1'"


def test_attention_of_integers_computes_in_the_default_float():
    """As exp does: NumPy's rule made integer q, k, v float64, whatever the default."""
    ints = np.arange(24).reshape(1, 2, 3, 4) % 5
    out = ag.scaled_dot_product_attention(Tensor(ints), Tensor(ints), Tensor(ints))
    assert out.dtype == np.float32
    floats = Tensor(ints.astype(np.float32))
    np.testing.assert_array_equal(out.numpy(), ag.scaled_dot_product_attention(floats, floats, floats).numpy())


def test_dropout_probability_out_of_range():
    with pytest.raises(ValueError, match="dropout.*1.5"):
        ag.dropout(Tensor([1.0]), 1.5)


def test_index_with_float_array():
    with pytest.raises(IndexError) as info:
        Tensor(np.ones((2, 3)))[np.array([0.5])]
    assert _message(info) == ("getitem: index arrays must be integer or bool, got float64 (tensor of shape (2, 3)); "
                              "convert the index with .astype('int64')")


@pytest.mark.parametrize("dtype", ["int64", "float64"])
def test_a_float_slice_bound_is_an_index_error_of_getitem_whatever_the_dtype(dtype):
    # an integer tensor's was the TypeError of float-only ops: "convert with .astype('float32')", the wrong fix
    with pytest.raises(IndexError) as info:
        Tensor(np.ones((2, 3), dtype=dtype))[0.5:2]
    assert _message(info).startswith("getitem: slice indices must be integers or None or have an __index__ method "
                                     "(tensor of shape (2, 3)); an index along an axis of length n lies in [-n, n)")


@pytest.mark.parametrize("key", [[0, slice(None)], [[0, 1], [0]], np.array(["a"])], ids=["slice", "ragged", "str"])
def test_an_index_list_of_no_integers_names_getitem_not_tensor(key):
    with pytest.raises(IndexError) as info:
        Tensor(np.ones((2, 3)))[key]
    assert _message(info) == ("getitem: an index list or array must hold integers or bools, in rows of one length "
                              "(tensor of shape (2, 3)); put slices, None and ... beside it in the key, not inside it")


@pytest.mark.parametrize("make, name", [
    (lambda t: t.reshape(4, 2), "Reshape"),
    (lambda t: t.sum(axis=2), "Sum"),
    (lambda t: ag.concat([t, Tensor(np.ones((2, 2)))], axis=0), "Concat"),
    (lambda t: ag.stack([t, Tensor(np.ones((2, 2)))]), "Stack"),
])
def test_other_shape_errors_name_the_op(make, name):
    with pytest.raises(ShapeError) as info:
        make(Tensor(np.ones((2, 3))))
    assert name in _message(info) and _has_shape(_message(info), (2, 3))


def test_gradcheck_refuses_float32_and_inputs_without_grad():
    with pytest.raises(TypeError, match="float64"):
        ag.gradcheck(lambda t: t * 2, [Tensor([1.0], requires_grad=True)])
    with pytest.raises(ValueError, match="requires grad"):
        ag.gradcheck(lambda t: t * 2, [Tensor(np.array([1.0]))])


def test_gradcheck_catches_a_wrong_gradient():
    class WrongSquare(ag.Function):
        def forward(self, x):
            self.save(x)
            return x * x

        def backward(self, g):
            return g * 3 * self.saved[0]  # should be 2x

    x = Tensor(np.array([1.0, 2.0]), requires_grad=True)
    with pytest.raises(ag.GradcheckError, match="input 0"):
        ag.gradcheck(lambda t: WrongSquare.apply(t), [x])


def test_failed_op_leaves_state_untouched():
    a = Tensor(np.ones((2, 3)), requires_grad=True)
    (a * 2.0).sum().backward()
    before = a.grad.copy()
    with pytest.raises(ShapeError):
        a + Tensor(np.ones(4))
    np.testing.assert_array_equal(a.grad, before)
    np.testing.assert_array_equal(a.data, np.ones((2, 3)))


@pytest.mark.parametrize("call, op", [
    (lambda x: ag.softmax(x), "Softmax"), (lambda x: x.log_softmax(), "LogSoftmax"),
    (lambda x: ag.cross_entropy(x, np.array([0])), "CrossEntropy"), (lambda x: x.gelu(), "GELU"),
    (lambda x: ag.layer_norm(x, Tensor(np.ones(3, np.float32))), "LayerNorm"),
])
def test_an_integer_tensor_given_to_a_floating_point_op_is_named_with_its_fix(call, op):
    with pytest.raises(TypeError) as excinfo:
        call(Tensor([[1, 2, 3]]))
    assert _message(excinfo).startswith(f"{op}: computes in floating point, but got int64")
    assert "convert with .astype('float32') first" in _message(excinfo)


def test_integer_operands_take_the_float_operands_dtype_as_in_pytorch():
    ints, floats = Tensor([1, 2]), Tensor([1.0, 2.0], requires_grad=True)
    for out in (ints + floats, floats * ints, ints * 0.5, 2.0 ** ints, ints / floats,
                Tensor([[1, 2]]) @ Tensor([[1.0], [2.0]]), Tensor([True, False]) * floats,
                ag.where(np.array([True, False]), ints, floats), ag.concat([ints, floats]), ag.stack([floats, ints])):
        assert out.dtype == np.float32
    assert (ints + Tensor(np.ones(2))).dtype == np.float64  # a float64 operand still widens
    assert (ints + ints).dtype == np.int64
    y = ints * floats
    y.sum().backward()
    np.testing.assert_array_equal(floats.grad, [1.0, 2.0])
    assert nn.Linear(2, 3)(Tensor(np.ones((4, 2), np.int64))).dtype == np.float32


@pytest.mark.parametrize("reduce", ["mean", "var"])
def test_an_axis_out_of_range_names_the_reduction_and_the_axes_there_are(reduce):
    with pytest.raises(ShapeError, match=rf"^{reduce}: axis 2 is out of range for shape \(3, 4\); its axes are "
                                         r"-2 to 1$"):
        getattr(Tensor(np.ones((3, 4))), reduce)(axis=2)


@pytest.mark.parametrize("reduce", ["mean", "var"])
def test_an_axis_given_twice_names_the_reduction_not_the_sum_it_is_made_of(reduce):
    with pytest.raises(ShapeError, match=rf"^{reduce}: axis \(0, -2\) names an axis of shape \(3, 4\) twice "
                                         r"\(-1 is the last axis\); give each axis once$"):
        getattr(Tensor(np.ones((3, 4))), reduce)(axis=(0, -2))


def test_a_comparison_of_shapes_that_do_not_broadcast_is_a_shape_error():
    with pytest.raises(ShapeError, match=r"^lt: .*\(3,\) \(2,\); broadcasting needs each trailing axis equal or 1"):
        Tensor([1.0, 2.0, 3.0]) < Tensor([1.0, 2.0])


def test_layer_norm_without_a_weight_and_gradcheck_of_a_non_tensor_say_what_to_pass():
    with pytest.raises(TypeError, match=r"layer_norm: weight must be a Tensor of shape \(3,\), got NoneType"):
        ag.layer_norm(Tensor(np.ones((2, 3), np.float32)), None)
    with pytest.raises(TypeError, match="gradcheck: fn must return a Tensor, got float"):
        ag.gradcheck(lambda t: 3.0, [Tensor([1.0, 2.0], dtype=np.float64, requires_grad=True)])


def test_max_over_a_nonempty_axis_of_an_empty_tensor_is_empty_and_over_an_empty_axis_refused():
    x = Tensor(np.zeros((0, 3)), requires_grad=True)
    y = x.max(axis=1)
    assert y.shape == (0,)
    y.sum().backward()
    assert x.grad.shape == (0, 3)
    with pytest.raises(ShapeError, match=r"max: no maximum over an axis of length 0 \(shape \(0, 3\), axis 0\)"):
        x.max(axis=0)


@pytest.mark.parametrize("mask, covered", [
    (np.array([True, False]), "(4,) (from axis 0 of shape (4, 3))"),          # shorter than its axis
    (np.array([True] * 5), "(4,) (from axis 0 of shape (4, 3))"),            # longer
    (np.array([[True, False, True]]), "(4, 3) (from axis 0 of shape (4, 3))"),  # a row where the rows are 4
], ids=["short", "long", "row"])
def test_a_boolean_mask_must_have_the_shape_of_the_axes_it_indexes(mask, covered):
    x = Tensor(np.arange(12.0).reshape(4, 3))
    with pytest.raises(IndexError) as info:
        x[mask]
    assert _message(info) == (f"getitem: a boolean mask of shape {mask.shape} must have the shape of the axes it "
                              f"indexes, {covered}; make the mask that shape")
    with pytest.raises(IndexError, match=r"mask of shape \(2,\) .* indexes, \(3,\) \(from axis 1 of shape \(4, 3\)\)"):
        x[..., np.array([True, False])]


@pytest.mark.parametrize("key", [5, [0, 5], (0, 0, 0)], ids=["int", "list", "too_many"])
def test_an_index_out_of_bounds_names_getitem_the_shape_and_the_fix(key):
    with pytest.raises(IndexError) as info:
        Tensor(np.ones((4, 3)))[key]
    assert re.fullmatch(r"getitem: .* \(tensor of shape \(4, 3\)\); an index along an axis of length n lies in "
                        r"\[-n, n\), and at most 2 axes can be indexed \(None and \.\.\. aside\)", _message(info))


def test_an_integer_to_a_negative_power_is_a_value_error_not_a_shape_error():
    with pytest.raises(ValueError) as info:
        Tensor([1, 2]) ** -1
    assert type(info.value) is ValueError
    assert _message(info) == ("Pow: Integers to negative integer powers are not allowed. (input shapes (2,), (), "
                              "dtypes int64, int64); integers compute as integers here: convert with "
                              ".astype('float32') first")
    with pytest.raises(ShapeError, match="Pow: operands could not be broadcast"):  # shapes stay a ShapeError
        Tensor([1.0, 2.0]) ** Tensor([1.0, 2.0, 3.0])


@pytest.mark.parametrize("call, message", [
    (lambda x: x.swapaxes(0, 5), "swapaxes: axis 5 is out of range for shape (4, 3); its axes are -2 to 1"),
    (lambda x: x.swapaxes(0, -3), "swapaxes: axis -3 is out of range for shape (4, 3); its axes are -2 to 1"),
    (lambda x: ag.concat([x, x], 2), "concat: axis 2 is out of range for shape (4, 3); its axes are -2 to 1"),
    (lambda x: ag.concat([Tensor(1.0)]), "concat: axis 0 is out of range for shape (); a 0-d tensor has no axes"),
    (lambda x: ag.cross_entropy(Tensor(1.0, requires_grad=True), np.array(0)),
     "cross_entropy: logits of shape () have no axis of classes; give them one, the last, e.g. logits of shape "
     "(N, C) with targets of shape (N,)"),
    (lambda x: ag.layer_norm(Tensor(1.0), Tensor(np.ones(()))),
     "layer_norm: the input has shape (), no axis of features to normalise (the last axis); give it one, "
     "e.g. x.reshape(1, -1)"),
    (lambda x: ag.scaled_dot_product_attention(Tensor(np.ones((1, 2, 3, 4))), Tensor(np.ones(4)), Tensor(np.ones(4))),
     "scaled_dot_product_attention: q (1, 2, 3, 4), k (4,), v (4,) do not fit; expected (B, H, Tq, D), "
     "(B, H, Tk, D), (B, H, Tk, Dv)"),
    (lambda x: ag.embedding(Tensor(np.ones(5), requires_grad=True), np.array([1, 2])),
     "embedding: weight must be a table of shape (V, C), one row of C features per id, got shape (5,); "
     "reshape it to (V, C)"),
], ids=["swapaxes", "swapaxes_negative", "concat", "concat_0d", "cross_entropy_0d", "layer_norm_0d",
        "attention_1d", "embedding_1d"])
def test_shapes_that_name_no_axis_or_the_wrong_rank_are_refused_in_one_line(call, message):
    with pytest.raises(ShapeError) as info:
        call(Tensor(np.ones((4, 3))))
    assert _message(info) == message


@pytest.mark.parametrize("call, message", [
    (lambda x: x.sum(axis=1.0), "sum: axis must be given as ints, got 1.0"),
    (lambda x: x.max(axis=[0, 1.0]), "max: axis must be given as ints, got (0, 1.0)"),
    (lambda x: x.softmax(axis=1.5), "softmax: axis must be given as ints, got 1.5"),
    (lambda x: ag.log_softmax(x, dim=1.0), "log_softmax: axis must be given as ints, got 1.0"),
    (lambda x: x.transpose(0, 1.0), "transpose: axes must be given as ints, got (0, 1.0)"),
    (lambda x: x.swapaxes(0, True), "swapaxes: axes must be given as ints, got (0, True)"),
    (lambda x: x.reshape(3.0, 4), "reshape: shape must be given as ints, got (3.0, 4)"),
    (lambda x: ag.concat([x, x], axis=0.0), "concat: axis must be given as ints, got 0.0"),
], ids=["sum", "max", "softmax", "log_softmax", "transpose", "swapaxes", "reshape", "concat"])
def test_axes_and_sizes_that_are_not_ints_name_the_op(call, message):
    with pytest.raises(TypeError) as info:
        call(Tensor(np.ones((4, 3))))
    assert _message(info) == message + "; write whole numbers as ints (1, not 1.0)"


def test_an_operand_that_holds_no_numbers_names_the_operator():
    x = Tensor([1.0, 2.0])
    for call, op in ((lambda: x + None, "Add"), (lambda: None * x, "Mul"), (lambda: x / "2", "Div")):
        with pytest.raises(TypeError) as info:
            call()
        assert _message(info).startswith(f"{op}: cannot compute with a ")
        assert _message(info).endswith(" operand; use a Tensor, a number, or a list or array of numbers")


@pytest.mark.parametrize("eps", [-1.0, float("nan")])
def test_layer_norm_refuses_an_eps_outside_0_to_inf(eps):
    # nn.LayerNorm refused these; the function gave NaN rows where the variance is below -eps (or everywhere)
    with pytest.raises(ValueError) as info:
        ag.layer_norm(Tensor(np.ones((2, 4))), Tensor(np.ones(4)), None, eps)
    assert _message(info) == f"layer_norm: eps must be a number in [0, inf), got {eps!r}"


def test_arange_refuses_a_step_of_0():
    with pytest.raises(ValueError) as info:
        ag.arange(0, 1, 0)
    assert _message(info) == "arange: step must be nonzero, got step=0 from 0 to 1; a step of 0 never reaches stop"


def test_layer_norm_bias_that_is_not_a_tensor_is_refused_like_the_weight():
    with pytest.raises(TypeError) as info:
        ag.layer_norm(Tensor(np.ones((2, 3))), Tensor(np.ones(3)), np.ones(3))
    assert _message(info) == ("layer_norm: bias must be a Tensor of shape (3,) or None, got ndarray; wrap it, "
                              "Tensor(bias), or pass None for no shift")


@pytest.mark.parametrize("call, op", [
    (lambda a: ag.softmax(a), "Softmax"), (lambda a: ag.log_softmax(a), "LogSoftmax"),
    (lambda a: ag.cross_entropy(a, np.array([0, 1])), "CrossEntropy"), (lambda a: ag.dropout(a, 0.5), "Dropout"),
    (lambda a: ag.layer_norm(a, Tensor(np.ones(3, np.float32))), "LayerNorm"),
    (lambda a: ag.linear(a, Tensor(np.ones((3, 2), np.float32))), "Linear"),
    (lambda a: nn.Linear(3, 2)(a), "Linear"),
])
def test_an_array_where_an_op_takes_a_tensor_names_the_op_and_the_fix(call, op):
    # a NumPy array has a .device as a Tensor does: it got as far as an AttributeError inside the op
    with pytest.raises(TypeError) as info:
        call(np.ones((2, 3), np.float32))
    assert _message(info) == f"{op}: input 0 is a ndarray, not a Tensor; wrap it first, Tensor(x)"


@pytest.mark.parametrize("call, message", [
    (lambda t: t.sum(axis=0, keepdims="yes"), "sum: keepdims must be True or False, got 'yes'"),
    (lambda t: t.mean(keepdim=1), "mean: keepdim must be True or False, got 1"),
    (lambda t: t.astype("foo"), "astype: 'foo' is not a dtype; give a NumPy dtype or its name, such as 'float32', "
                                "'float64', 'int64' or 'bool'"),
])
def test_a_flag_or_dtype_of_the_wrong_kind_names_the_op_and_the_argument(call, message):
    # they raised NumPy's "'str' object cannot be interpreted as an integer" and "data type 'foo' not understood"
    with pytest.raises(TypeError) as info:
        call(Tensor(np.ones((2, 3))))
    assert _message(info) == message


def test_transpose_of_some_axes_names_the_shape_and_both_fixes():
    # NumPy said "axes don't match array"
    with pytest.raises(ShapeError) as info:
        Tensor(np.ones((2, 3, 4))).transpose(0, 1)
    assert _message(info) == ("transpose: axes (0, 1) are not a permutation of the 3 axes of shape (2, 3, 4); give "
                              "every axis once, as NumPy's transpose does; to exchange two axes, swapaxes(0, 1)")
    with pytest.raises(ShapeError, match=r"^transpose: axes \(0, 0, 1\) are not a permutation .*does$"):
        Tensor(np.ones((2, 3, 4))).transpose(0, 0, 1)
    assert Tensor(np.ones((2, 3, 4))).transpose(-1, 0, 1).shape == (4, 2, 3)
    with pytest.raises(ShapeError, match=r"^transpose: axes \(0, 5\) are not a permutation .*does$"):
        Tensor(np.ones((2, 3, 4))).transpose(0, 5)  # no "swapaxes(0, 5)", which would fail too
    with pytest.raises(ShapeError, match=r"^transpose: axes \(0,\) are not a permutation of the 0 axes of shape \(\)"):
        Tensor(np.float32(3)).transpose(0)  # was a ZeroDivisionError


def test_keepdims_as_numpys_bool_keeps_the_dimension():
    t = Tensor(np.ones((2, 3)))  # NumPy's reductions refuse its own bool_ as keepdims
    assert t.sum(1, keepdims=np.True_).shape == (2, 1) and t.mean(keepdim=np.array(True)).shape == (1, 1)


@pytest.mark.parametrize("join", [ag.concat, ag.stack], ids=["concat", "stack"])
def test_concat_and_stack_along_a_tuple_of_axes_are_refused_in_their_words(join):
    # stack raised NumPy's "'tuple' object cannot be interpreted as an integer", concat a '<=' TypeError
    a = Tensor(np.ones(3))
    with pytest.raises(TypeError) as info:
        join([a, a], axis=(0, 1))
    name = join.__name__
    assert _message(info) == f"{name}: axis must be one int, got (0, 1); {name} joins along one axis at a time"


# ---- a user's own op (ag.Function): its mistakes are named with the op and the fix ------------------------------

class Scale(ag.Function):
    """y = a ⊙ b; a correct op whose backward the cases below get wrong, one way each."""
    input_names = ("a", "b")

    def forward(self, a, b):
        self.save(a, b)
        return a * b

    def backward(self, g):
        a, b = self.saved
        return g * b, g * a


def _scale_backward(backward):
    op = type("MyScale", (Scale,), {"backward": lambda self, g: backward(g, *self.saved)})
    a, b = (Tensor(np.arange(1.0, 7.0).reshape(2, 3), requires_grad=True) for _ in range(2))
    op.apply(a, b).sum().backward()
    return a, b


@pytest.mark.parametrize("backward, error, message", [
    (lambda g, a, b: g * b, RuntimeError,
     "MyScale.backward returned 1 gradient for its 2 inputs (a, b); return one per input, in order"),
    (lambda g, a, b: (g * b, g * a, g), RuntimeError, "MyScale.backward returned 3 gradients for its 2 inputs (a, b)"),
    (lambda g, a, b: [g * b, g * a], TypeError,
     "MyScale.backward returned a list; return one array per input, several as a tuple"),
    (lambda g, a, b: (g * b, 2.0), TypeError,
     "MyScale.backward returned a float as the gradient for b; return an array of b's shape (2, 3)"),
    (lambda g, a, b: (g * b, (g * a).tolist()), TypeError, "MyScale.backward returned a list as the gradient for b"),
    (lambda g, a, b: (g * b, (g * a).astype(np.int64)), TypeError,
     "MyScale.backward returned a gradient of dtype int64 for b (float64); a gradient is floating point"),
    (lambda g, a, b: (g * b, (g * a).astype(np.complex128)), TypeError,
     "MyScale.backward returned a gradient of dtype complex128 for b (float64)"),
    (lambda g, a, b: (g * b, np.stack([g * a] * 4)), ShapeError,
     "MyScale.backward returned a gradient of shape (4, 2, 3) for an input of shape (2, 3) (output shape (2, 3)): "
     "the op's VJP is wrong"),
])
def test_a_user_ops_backward_that_returns_what_no_gradient_is_names_the_op_and_the_fix(backward, error, message):
    """Each was taken before: zipped away (a missing gradient silently none, an extra one dropped), summed over
    axes no broadcasting made, cast from int or complex (its imaginary part dropped), or an AttributeError."""
    with pytest.raises(error) as info:
        _scale_backward(backward)
    assert _message(info).startswith(message)


def test_a_user_op_that_broadcasts_has_its_gradient_summed_back_and_right():
    """The engine's sum over axes that broadcasting made in the op stays (the check above spares it)."""
    class Repeat(ag.Function):
        def forward(self, x):
            return np.broadcast_to(x, (4, *x.shape)) * 1.0

        def backward(self, g):
            return g  # (4, 2, 3) for x (2, 3): broadcasting made the 4, so the engine sums it away

    x = Tensor(np.random.default_rng(0).standard_normal((2, 3)), requires_grad=True)
    assert ag.gradcheck(lambda t: Repeat.apply(t) * Tensor(np.arange(24.0).reshape(4, 2, 3)), [x])
    _, b = _scale_backward(lambda g, a, b: (g * b, None))  # None: no gradient flows there, as in PyTorch
    assert b.grad is None


@pytest.mark.parametrize("returned, message", [
    (lambda x: Tensor(x), "MyOp.forward returned a Tensor, not an array; forward computes on arrays: return the array"),
    (lambda x: (x, x), "MyOp.forward returned a tuple, not an array; an op has one output"),
    (lambda x: x.tolist(), "MyOp.forward returned a list, not an array; return the result as an array"),
    (lambda x: None, "MyOp.forward returned None, not an array"),
])
def test_a_user_ops_forward_that_returns_no_array_names_the_op(returned, message):
    """A tuple was stacked into one output and a Tensor unwrapped, silently; None came out as a tensor that
    'does not require grad'."""
    op = type("MyOp", (ag.Function,), {"forward": lambda self, x: returned(x), "backward": lambda self, g: g})
    with pytest.raises(TypeError) as info:
        op.apply(Tensor([1.0, 2.0], requires_grad=True))
    assert _message(info).startswith(message)


def test_a_user_op_given_a_tensor_that_requires_grad_as_a_keyword_says_it_gets_no_gradient():
    x, w = Tensor([1.0, 2.0], requires_grad=True), Tensor([3.0, 4.0], requires_grad=True)
    with pytest.raises(TypeError) as info:
        Scale.apply(x, b=w)  # w.grad was left None, silently
    assert _message(info).startswith("Scale.apply: b= is a Tensor that requires grad, but keywords are settings, "
                                     "which get no gradient; pass it positionally, Scale.apply(..., b)")
    Scale.apply(x, w).sum().backward()  # positionally, as the message says: both get their gradient
    np.testing.assert_array_equal(x.grad, [3.0, 4.0])
    np.testing.assert_array_equal(w.grad, [1.0, 2.0])


def test_a_user_op_without_inputs_or_without_backward_says_what_to_write():
    with pytest.raises(TypeError, match=r"^Scale\.apply: no input tensors; pass the tensors to differentiate "
                                        r"positionally"):
        Scale.apply()  # was IndexError: tuple index out of range
    forward_only = type("Half", (ag.Function,), {"forward": lambda self, x: x / 2})
    with pytest.raises(NotImplementedError, match=r"^Half must define backward\(self, g\), returning one gradient"):
        forward_only.apply(Tensor([1.0], requires_grad=True)).backward()  # was a NotImplementedError with no words
