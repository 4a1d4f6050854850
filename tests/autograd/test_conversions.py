"""A Tensor where Python and NumPy take it: truth values, float()/int(), np.asarray and NumPy's functions;
integer data that must fit its dtype; constant operands keeping the tensor's dtype; PyTorch's spellings
(dim=, keepdim=, view); and the reductions at their edges (no elements, no degrees of freedom).
The same edges against PyTorch itself: test_edges_interop.py."""
import math
import warnings

import numpy as np
import pytest

import autograd as ag
from autograd import Tensor

from ._helpers import check, leaf, rand


# ---- truth values and Python numbers ------------------------------------------------------------


@pytest.mark.parametrize("data, truth", [
    ([0.0], False), ([1.0], True), ([-0.5], True), (0.0, False), (3.0, True), ([[2]], True), ([0], False),
    ([True], True), ([False], False), ([float("nan")], True),
])
def test_one_element_is_true_when_nonzero(data, truth):
    assert bool(Tensor(data)) is truth


@pytest.mark.parametrize("data, values", [([1.0, 2.0], "2 values"), ([[0.0, 0.0]], "2 values"),
                                          (np.zeros((2, 3)), "6 values"), ([], "no values"),
                                          (np.zeros((0, 4)), "no values")])
def test_truth_of_any_other_size_is_ambiguous(data, values):
    t = Tensor(data)
    with pytest.raises(RuntimeError) as info:
        bool(t)
    assert str(info.value) == (f"bool: the truth value of a tensor with {values} (shape {t.shape}) is ambiguous; "
                               "use .any() or .all()")
    with pytest.raises(RuntimeError, match="ambiguous"):
        if t:
            pass
    with pytest.raises(RuntimeError, match="ambiguous"):
        t and 1


def test_a_comparison_takes_the_branch_its_value_says():
    taken = []
    for value, limit in ((1.0, 5), (7.0, 5), (5.0, 5)):
        if Tensor([value]) > limit:
            taken.append(value)
    assert taken == [7.0]
    assert not (Tensor(2.0) == 3.0) and (Tensor([2.0]) != 3.0)
    assert (Tensor([1.0, 9.0]) > 5).any() and not (Tensor([1.0, 9.0]) > 5).all()


def test_none_and_strings_are_no_operands_of_a_comparison_as_in_pytorch():
    t = Tensor([1.0, 2.0])
    assert (t == None) is False and (t != None) is True and (t == "a") is False  # noqa: E711
    assert t not in [None, "a"] and [None, t].index(t) == 1  # membership, not an ambiguous element-wise truth
    with pytest.raises(TypeError, match="'<' not supported between instances of 'Tensor' and 'NoneType'"):
        t < None
    assert (t == [1.0, 3.0]).tolist() == [True, False] and (t >= (2.0, 2.0)).tolist() == [False, True]


def test_a_comparison_with_ragged_lists_says_they_are_ragged():
    with pytest.raises(ValueError, match="the nested lists are ragged") as info:
        Tensor([1.0, 2.0]) == [[1.0], [2.0, 3.0]]
    assert "broadcast" not in str(info.value)


def test_len_and_iteration_of_a_0_d_tensor_name_the_fix():
    for call in (len, list):
        with pytest.raises(TypeError, match=r"len: a 0-d tensor \(float32\) has no length .* use \.item\(\)"):
            call(Tensor(1.0))
    assert len(Tensor([[1.0], [2.0]])) == 2


@pytest.mark.parametrize("shape, expected", [
    ((0, 3), "Tensor([], shape=(0, 3), dtype=float32)"), ((2, 0, 1), "Tensor([], shape=(2, 0, 1), dtype=float32)"),
    ((0,), "Tensor([], dtype=float32)"),
])
def test_repr_of_an_empty_tensor_keeps_its_shape(shape, expected):
    assert repr(ag.zeros(shape)) == expected


def test_any_and_all_reduce_like_numpy_and_stay_out_of_the_graph():
    a = np.array([[0.0, 1.0, 0.0], [0.0, 2.0, 3.0]])
    t = Tensor(a, requires_grad=True)
    for axis in (None, 0, 1, (0, 1), -1):
        for keepdims in (False, True):
            for name in ("any", "all"):
                got = getattr(t, name)(axis, keepdims)
                assert got.dtype == bool and not got.requires_grad and got.is_leaf
                np.testing.assert_array_equal(got.numpy(), getattr(a, name)(axis=axis, keepdims=keepdims))
    np.testing.assert_array_equal(t.any(dim=0, keepdim=True).numpy(), [[False, True, True]])
    assert t.all(dim=1).tolist() == [False, False]


@pytest.mark.parametrize("data, as_float, as_int", [
    ([2.5], 2.5, 2), ([-2.7], -2.7, -2), (7, 7.0, 7), ([[3]], 3.0, 3), ([True], 1.0, 1), (np.float32(0.1), 0.1, 0),
])
def test_float_and_int_of_one_element(data, as_float, as_int):
    t = Tensor(data)
    assert float(t) == pytest.approx(as_float, rel=1e-7) and type(float(t)) is float
    assert int(t) == as_int and type(int(t)) is int  # int() truncates toward zero, as Python and PyTorch do
    assert t.item() == pytest.approx(as_float, rel=1e-7)


@pytest.mark.parametrize("convert, op", [(float, "float"), (int, "int"), (lambda t: t.item(), "item")])
@pytest.mark.parametrize("data", [[1.0, 2.0], [], np.ones((2, 2))])
def test_float_int_and_item_need_exactly_one_element(convert, op, data):
    t = Tensor(data)
    with pytest.raises(ValueError) as info:
        convert(t)
    assert str(info.value) == (f"{op}: only a one-element tensor converts to a Python number, this one has shape "
                               f"{t.shape}; index one element first, or use .tolist()")


def test_a_tensor_with_grad_converts_without_touching_the_graph():
    x = Tensor([3.0], requires_grad=True)
    y = x * 2
    assert float(y) == 6.0 and int(y) == 6 and bool(y) and math.isclose(math.sqrt(y), math.sqrt(6))
    y.sum().backward()
    np.testing.assert_array_equal(x.grad, [2.0])


# ---- NumPy reads a tensor as its data --------------------------------------------------------------


def test_np_asarray_gives_the_data_without_the_graph():
    t = Tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    a = np.asarray(t)
    assert type(a) is np.ndarray and a.dtype == np.float32 and a.shape == (2, 2)
    np.testing.assert_array_equal(a, [[1.0, 2.0], [3.0, 4.0]])
    np.testing.assert_array_equal(np.asarray(t, dtype=np.float64), a.astype(np.float64))
    assert np.asarray(t, dtype=np.float64).dtype == np.float64
    copy = np.array(t)  # np.array copies: writing into it leaves the tensor alone
    copy[0, 0] = 100.0
    assert t.data[0, 0] == 1.0
    assert np.array(Tensor([1, 2])).dtype == np.int64
    np.testing.assert_array_equal(np.array([Tensor([1.0, 2.0]), Tensor([3.0, 4.0])]), [[1, 2], [3, 4]])


@pytest.mark.parametrize("fn, expected", [
    (np.mean, 2.5), (np.sum, 10.0), (np.max, 4.0), (np.min, 1.0), (np.std, math.sqrt(1.25)), (np.var, 1.25),
    (np.median, 2.5), (np.argmax, 3), (lambda t: float(np.linalg.norm(t)), math.sqrt(30.0)),
    (lambda t: np.mean(t, axis=0).tolist(), [2.0, 3.0]),
    (lambda t: np.sum(t, axis=1, keepdims=True).tolist(), [[3.0], [7.0]]),
    (lambda t: np.concatenate([t, t]).shape, (4, 2)), (lambda t: np.stack([t, t], axis=2).shape, (2, 2, 2)),
    (lambda t: np.where(t > 2, t, 0).tolist(), [[0, 0], [3, 4]]), (lambda t: np.allclose(t, [[1, 2], [3, 4]]), True),
    (lambda t: np.isfinite(np.asarray(t)).all(), True), (lambda t: np.percentile(t, 50), 2.5),
])
def test_numpy_functions_compute_on_the_data(fn, expected):
    t = Tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    got = fn(t)
    if isinstance(expected, float):
        assert got == pytest.approx(expected, rel=1e-7)
    else:
        assert got == expected
    assert t.grad is None and t.is_leaf


def test_numpy_functions_return_numpy_not_tensors():
    t = Tensor([1.0, 2.0, 3.0])
    assert isinstance(np.mean(t), np.floating) and isinstance(np.concatenate([t, [4.0]]), np.ndarray)
    assert isinstance(np.sum(t, axis=0, keepdims=True), np.ndarray)


def test_arithmetic_with_an_ndarray_still_makes_tensors():
    """__array__ must not turn `ndarray * tensor` into NumPy's: the operators stay the tensor's (and its graph)."""
    x = Tensor([1.0, 2.0], requires_grad=True)
    for y in (np.array([3.0, 4.0]) * x, np.array([3.0, 4.0]) + x, np.float32(2.0) * x, 1.0 - x):
        assert isinstance(y, Tensor) and y.requires_grad
    (np.array([3.0, 4.0]) * x).sum().backward()
    np.testing.assert_array_equal(x.grad, [3.0, 4.0])


def test_matplotlib_plots_a_tensor():
    matplotlib = pytest.importorskip("matplotlib", reason="matplotlib is not installed")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    x = Tensor([0.0, 1.0, 2.0])
    y = Tensor([1.0, 4.0, 9.0], requires_grad=True)
    figure, axes = plt.subplots()
    try:
        (line,) = axes.plot(x, y)
        np.testing.assert_array_equal(line.get_xdata(), [0.0, 1.0, 2.0])
        np.testing.assert_array_equal(line.get_ydata(), [1.0, 4.0, 9.0])
        axes.hist(y)
        axes.scatter(x, y)
    finally:
        plt.close(figure)


# ---- integer data must fit its dtype ---------------------------------------------------------------------


@pytest.mark.parametrize("data, dtype, value", [
    ([300], "uint8", 300), ([256], "uint8", 256), ([-1], "uint8", -1), ([0, -3, 5], "uint16", -3),
    ([128], "int8", 128), ([-129], "int8", -129), ([40000], "int16", 40000), ([2 ** 31], "int32", 2 ** 31),
    ([-2 ** 31 - 1], "int32", -2 ** 31 - 1), ([2 ** 32], "uint32", 2 ** 32), ([-5], "uint64", -5),
    (np.array([1, 70000]), "int16", 70000), (np.array([-1], dtype=np.int8), "uint8", -1),
    (np.array([2 ** 63 - 1], dtype=np.uint64) + np.uint64(1), "int64", 2 ** 63),
    ([1.5], "int64", 1.5), ([2.0, -0.25], "int32", -0.25), ([float("nan")], "int64", float("nan")),
    ([float("inf")], "int32", float("inf")), ([-float("inf")], "int64", -float("inf")), ([300.0], "uint8", 300.0),
    ([2.0 ** 63], "int64", 2.0 ** 63), ([-1.0], "uint8", -1.0), (np.array([1e10], dtype=np.float32), "int32", 1e10),
])
def test_integer_data_that_does_not_fit_its_dtype_is_refused(data, dtype, value):
    with pytest.raises(ValueError) as info:
        Tensor(data, dtype=dtype)
    info_ = np.iinfo(dtype)
    message = str(info.value)
    assert message.startswith("Tensor: ") and dtype in message and f"from {info_.min} to {info_.max}" in message
    shown = message.split()[1]
    assert (math.isnan(float(shown)) if value != value else float(shown) == value), message


@pytest.mark.parametrize("data, dtype, expected", [
    ([255, 0], "uint8", [255, 0]), ([-128, 127], "int8", [-128, 127]), ([2.0, -3.0], "int64", [2, -3]),
    ([2 ** 31 - 1], "int32", [2 ** 31 - 1]), ([True, False], "uint8", [1, 0]), ([], "int16", []),
    (np.array([7], dtype=np.int64), "uint8", [7]), ([1.0], "float32", [1.0]), ([0.0, 65535.0], "uint16", [0, 65535]),
])
def test_integer_data_that_fits_is_stored_exactly(data, dtype, expected):
    t = Tensor(data, dtype=dtype)
    assert t.dtype == np.dtype(dtype) and t.tolist() == expected


@pytest.mark.parametrize("args, dtype, value", [((250, 260), "uint8", 256), ((0, 300, 100), "int8", 200),
                                                ((-3, 2), "uint16", -3), ((0.5, 3), "int64", 0.5)])
def test_arange_into_a_narrow_integer_dtype_does_not_wrap(args, dtype, value):
    with pytest.raises(ValueError, match=rf"^Tensor: {value} cannot be stored as {dtype}"):
        ag.arange(*args, dtype=dtype)


@pytest.mark.parametrize("args, dtype, expected", [
    ((3,), "int8", [0, 1, 2]), ((250, 256), "uint8", list(range(250, 256))), ((0.0, 4.0, 2.0), "int32", [0, 2]),
    ((2,), None, [0, 1]),
])
def test_arange_into_an_integer_dtype_that_holds_it(args, dtype, expected):
    t = ag.arange(*args, dtype=dtype)
    assert t.tolist() == expected and t.dtype == np.dtype(dtype or "int64")


@pytest.mark.parametrize("data, dtype, said", [
    (np.array([1 + 2j]), "float32", "is complex128"), (np.array([3 + 0j]), "float64", "is complex128"),
    (np.array([1 + 2j]), "bool", "is complex128"), ([1.0, None], "float32", r"holds None \(a NoneType\)"),
    (None, "float64", "holds None"), (["1.5", "2"], "float32", "is <U3"), (["7"], "int64", "is <U1"),
    (b"12", "uint8", r"is \|S2"), (np.array(["2020-01-01"], dtype="datetime64[D]"), "int64", "is datetime64"),
])
def test_data_that_is_not_real_numbers_is_refused_whatever_the_dtype(data, dtype, said):
    """Without a dtype these were refused; with one, NumPy's cast made 1+2j 1.0, None NaN, "1.5" 1.5 and b"12" 12."""
    with pytest.raises(TypeError, match=rf"^Tensor: the data {said}.*, which no cast to {dtype} keeps: only real "
                                        r"numbers \(floats, integers, bools\) convert"):
        Tensor(data, dtype=dtype)


def test_an_object_array_of_numbers_still_converts_to_the_dtype_given():
    assert Tensor(np.array([1, 2.5], dtype=object), dtype="float32").tolist() == [1.0, 2.5]
    assert Tensor([2 ** 70, 1.5], dtype="float64").tolist() == [2.0 ** 70, 1.5]  # too large for int64, beside floats


@pytest.mark.parametrize("device", [0, "", False])
def test_a_device_that_is_falsy_is_refused_not_taken_for_the_datas(device):
    """device=0 (PyTorch's first GPU) made a CPU tensor without a word."""
    with pytest.raises(ValueError, match=rf"^unknown device {device!r}; use one of \('cpu', 'cuda'\)$"):
        Tensor([1.0], device=device)
    assert Tensor([1.0], device=None).device == "cpu"


def test_explicit_astype_keeps_numpys_truncation():
    """Only construction is checked: astype is a cast the caller asked for by name (PyTorch's .to truncates too)."""
    assert Tensor([1.7, -1.7]).astype("int64").tolist() == [1, -1]


# ---- constant operands keep the tensor's dtype ---------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("operand", [[1, 2], [1.0, 2.0], (3, 4), [[1], [2]], [True, True], 2, 2.5, True])
@pytest.mark.parametrize("op", [
    lambda t, o: t + o, lambda t, o: o + t, lambda t, o: t - o, lambda t, o: o - t, lambda t, o: t * o,
    lambda t, o: o * t, lambda t, o: t / o, lambda t, o: o / t, lambda t, o: t ** o, lambda t, o: o ** t,
    lambda t, o: ag.where(Tensor([True, False]), t, o),
], ids=["add", "radd", "sub", "rsub", "mul", "rmul", "div", "rdiv", "pow", "rpow", "where"])
def test_python_lists_and_numbers_take_the_tensors_float_dtype(dtype, operand, op):
    t = Tensor(np.array([1.0, 2.0], dtype=dtype))
    assert op(t, operand).dtype == dtype


def test_list_operands_compute_the_same_values_as_arrays():
    t = Tensor([1.5, 2.5], requires_grad=True)
    y = t * [2, 4] + [1, 1] - (3, 1)
    assert y.dtype == np.float32 and y.tolist() == [1.0, 10.0]
    y.sum().backward()
    assert t.grad.dtype == np.float32 and t.grad.tolist() == [2.0, 4.0]
    assert (Tensor([[1.0, 2.0]]) @ [[1], [2]]).dtype == np.float32
    assert ag.concat([Tensor([1.0]), [2, 3]]).dtype == np.float32


def test_numpy_arrays_keep_numpys_promotion():
    t = Tensor([1.0, 2.0])
    assert (t + np.array([1.0, 2.0])).dtype == np.float64  # a float64 array widens, as in NumPy and PyTorch
    assert (t + np.array([1, 2], dtype=np.int8)).dtype == np.float32
    assert (Tensor([1, 2]) + [1, 2]).dtype == np.int64  # integer tensors stay as they were


# ---- PyTorch's spellings -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["sum", "mean", "var", "any", "all"])
@pytest.mark.parametrize("dim", [0, 1, -1, (0, 1), [0, 2], None])
@pytest.mark.parametrize("keep", [False, True])
def test_dim_and_keepdim_are_axis_and_keepdims(name, dim, keep):
    t = Tensor(np.arange(24.0).reshape(2, 3, 4))
    axis = tuple(dim) if isinstance(dim, list) else dim
    expected = getattr(t, name)(axis, keep).numpy()
    for got in (getattr(t, name)(dim=dim, keepdim=keep), getattr(t, name)(axis=dim, keepdim=keep),
                getattr(t, name)(dim=dim, keepdims=keep)):
        np.testing.assert_array_equal(got.numpy(), expected)
    np.testing.assert_allclose(getattr(np.arange(24.0).reshape(2, 3, 4), name)(axis=axis, keepdims=keep),
                               expected, rtol=1e-14)


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax_takes_dim(name, dim):
    t = Tensor(np.arange(6.0).reshape(2, 3))
    expected = getattr(t, name)(axis=dim).numpy()
    np.testing.assert_array_equal(getattr(t, name)(dim=dim).numpy(), expected)
    np.testing.assert_array_equal(getattr(ag, name)(t, dim=dim).numpy(), expected)


def test_softmax_with_a_mask_takes_dim():
    t = Tensor(np.arange(6.0).reshape(2, 3))
    mask = np.array([[True, False, True], [True, True, False]])
    np.testing.assert_array_equal(ag.softmax(t, dim=1, mask=mask).numpy(), ag.softmax(t, 1, mask).numpy())


@pytest.mark.parametrize("name, dim", [("concat", 1), ("concat", -2), ("stack", 0), ("stack", -1), ("stack", -3)])
def test_concat_and_stack_take_dim(name, dim):
    a, b = Tensor(np.arange(6.0).reshape(2, 3)), Tensor(np.arange(6.0, 12.0).reshape(2, 3))
    expected = (np.concatenate if name == "concat" else np.stack)([a.numpy(), b.numpy()], axis=dim)
    np.testing.assert_array_equal(getattr(ag, name)([a, b], dim=dim).numpy(), expected)


def test_max_with_dim_returns_values_and_indices_as_torch_max():
    t = Tensor([[1.0, 5.0, 5.0], [7.0, 2.0, 7.0], [0.0, -1.0, 3.0]])
    values, indices = t.max(dim=1)
    assert values.tolist() == [5.0, 7.0, 3.0] and indices.tolist() == [1, 0, 2]  # the first of tied maxima
    result = t.max(dim=0, keepdim=True)
    assert result.values.tolist() == [[7.0, 5.0, 7.0]] and result.indices.tolist() == [[1, 0, 1]]
    assert result.indices.dtype == np.int64 and not result.indices.requires_grad
    assert t.max(dim=-1).values.tolist() == t.max(axis=-1).tolist()
    assert isinstance(t.max(axis=1), Tensor) and isinstance(t.max(1), Tensor)  # NumPy's spelling: the values


def test_max_values_with_dim_carry_the_gradient():
    x = leaf([[1.0, 5.0, 2.0], [7.0, 2.0, 3.0]])
    values, _ = x.max(dim=1)
    (values * Tensor([2.0, 3.0], dtype="float64")).sum().backward()
    np.testing.assert_array_equal(x.grad, [[0.0, 2.0, 0.0], [3.0, 0.0, 0.0]])


@pytest.mark.parametrize("call, message", [
    (lambda t: t.sum(0, dim=1), "sum: give axis or dim (PyTorch's name for it), not both"),
    (lambda t: t.mean(axis=0, dim=0), "mean: give axis or dim (PyTorch's name for it), not both"),
    (lambda t: t.var(keepdims=True, keepdim=True), "var: give keepdims or keepdim (PyTorch's name for it), not both"),
    (lambda t: t.max(0, dim=1), "max: give axis or dim (PyTorch's name for it), not both"),
    (lambda t: t.max(dim=(0, 1)), "max: dim must be one int, as in torch.max, got (0, 1); "
                                  "for the maximum over several axes use max(axis=(...))"),
    (lambda t: t.softmax(0, dim=1), "softmax: give axis or dim (PyTorch's name for it), not both"),
    (lambda t: ag.log_softmax(t, 0, dim=1), "log_softmax: give axis or dim (PyTorch's name for it), not both"),
    (lambda t: ag.concat([t, t], 1, dim=0), "concat: give axis or dim (PyTorch's name for it), not both"),
    (lambda t: ag.stack([t, t], axis=1, dim=0), "stack: give axis or dim (PyTorch's name for it), not both"),
])
def test_both_spellings_at_once_is_a_clear_error(call, message):
    with pytest.raises(TypeError) as info:
        call(Tensor(np.ones((2, 3))))
    assert str(info.value) == message


def test_gradients_through_the_pytorch_spellings(rng):
    x = rand(rng, 3, 4)
    check(lambda a: a.mean(dim=0, keepdim=True) * a.var(dim=1, keepdim=True) + a.sum(dim=(0, 1)), x)
    check(lambda a: a.softmax(dim=0) * a.log_softmax(dim=1), x)
    check(lambda a: a.view(2, 6).view(-1), x)
    check(lambda a: ag.concat([a, a * a], dim=-2) + ag.stack([a, a.exp()], dim=-1).sum(axis=-1).sum(axis=0), x)


@pytest.mark.parametrize("shape", [(4,), (2, 2), ((4, 1),), ([1, 4],), (-1,), (2, -1)])
def test_view_is_reshape(shape):
    x = Tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    y = x.view(*shape)
    np.testing.assert_array_equal(y.numpy(), x.numpy().reshape(*shape))
    y.sum().backward()
    np.testing.assert_array_equal(x.grad, np.ones((2, 2)))


def test_view_of_a_wrong_size_names_the_shapes():
    with pytest.raises(ag.ShapeError, match=r"Reshape: .*\(input shapes \(2, 2\)\)"):
        Tensor(np.ones((2, 2))).view(3)


# ---- reductions at their edges ---------------------------------------------------------------------------------


@pytest.mark.parametrize("shape, axis, expected_shape", [
    ((0,), None, ()), ((0, 3), 0, (3,)), ((0, 3), None, ()), ((2, 0), 1, (2,)), ((0, 3), (0, 1), ()),
])
def test_mean_of_no_elements_is_nan(shape, axis, expected_shape):
    x = Tensor(np.zeros(shape), requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m = x.mean(axis)
    assert m.shape == expected_shape and np.isnan(m.numpy()).all()
    m.sum().backward()
    assert x.grad.shape == shape


def test_mean_over_a_nonempty_axis_of_an_empty_batch_is_empty():
    assert Tensor(np.zeros((0, 3))).mean(axis=1).shape == (0,)


@pytest.mark.parametrize("data, ddof, expected", [
    ([3.0], 1, math.nan), ([1.0, 2.0], 2, math.inf), ([1.0, 2.0], 3, math.inf), ([1.0, 1.0], 2, math.nan),
    ([1.0, 2.0, 4.0], 5, math.inf), ([], 0, math.nan), ([], 1, math.nan), ([5.0], 1.5, math.nan),
])
def test_var_without_degrees_of_freedom_is_inf_or_nan_never_negative(data, ddof, expected):
    x = Tensor(data, requires_grad=True)
    # NumPy's own warning of 0 · inf = NaN is not the one this test is about
    with pytest.warns(RuntimeWarning, match="leave no degrees of freedom"), np.errstate(invalid="ignore"):
        v = x.var(ddof=ddof)
    got = v.item()
    assert (math.isnan(got) if math.isnan(expected) else got == expected), got


def test_var_without_degrees_of_freedom_by_axis():
    x = Tensor([[1.0, 1.0], [2.0, 1.0]], requires_grad=True)
    with pytest.warns(RuntimeWarning, match="n = 2 values with ddof = 2"), np.errstate(invalid="ignore"):
        v = x.var(axis=0, ddof=2)
        v.backward(np.ones(2, dtype=np.float32))
    assert v.numpy()[0] == math.inf and math.isnan(v.numpy()[1])
    # 2(x − μ)/0 entry by entry: ∓inf where x differs from its column's mean, NaN (0/0) where it equals it
    assert x.grad[0, 0] == -math.inf and x.grad[1, 0] == math.inf and np.isnan(x.grad[:, 1]).all()


@pytest.mark.parametrize("shape, axis, ddof", [((5,), None, 0), ((5,), None, 1), ((3, 4), 0, 1), ((3, 4), 1, 3),
                                               ((2, 3, 4), (0, 2), 1)])
def test_var_with_degrees_of_freedom_is_unchanged_and_quiet(rng, shape, axis, ddof):
    a = rng.normal(size=shape)
    x = leaf(a)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        v = x.var(axis, ddof=ddof)
    np.testing.assert_allclose(v.numpy(), a.var(axis=axis, ddof=ddof), rtol=1e-12)
    check(lambda t: t.var(axis, ddof=ddof), x)


@pytest.mark.parametrize("ddof", [-1, float("nan"), "1", None, True])
def test_var_refuses_a_ddof_that_is_not_a_count(ddof):
    with pytest.raises(ValueError) as info:
        Tensor([1.0, 2.0]).var(ddof=ddof)
    assert str(info.value) == f"var: ddof must be a number in [0, inf), got {ddof!r}"


def test_mean_and_var_of_ordinary_inputs_keep_their_arithmetic(rng):
    """The edges change nothing else: bit for bit the sum times 1/n and Σ(x − μ)² times 1/(n − ddof)."""
    a = rng.normal(size=(4, 5)).astype(np.float32)
    x = Tensor(a)
    assert np.array_equal(x.mean(1).numpy(), a.sum(axis=1) * np.float32(1 / 5))
    centred = a - a.sum(axis=0, keepdims=True) * np.float32(1 / 4)
    assert np.array_equal(x.var(0, ddof=1).numpy(), (centred * centred).sum(axis=0) * np.float32(1 / 3))


def test_comparisons_and_max_indices_hold_arrays_even_at_0_d():
    assert isinstance((Tensor(1.0) > 0).data, np.ndarray)
    assert isinstance(Tensor([1.0, 5.0, 3.0]).max(dim=0).indices.data, np.ndarray)


def test_a_0_d_tensor_formats_as_its_number_and_an_integer_one_indexes():
    assert f"{Tensor(1.5):.3f}" == "1.500" and f"{Tensor([1.0, 2.0])}" == str(Tensor([1.0, 2.0]))
    assert [10, 20][Tensor(np.array(1))] == 20
    with pytest.raises(TypeError, match="index: only an integer tensor can index, this one is float32"):
        [10, 20][Tensor(1.0)]


def test_a_recorded_graph_is_not_pickled_and_says_what_is():
    import copy
    import pickle
    x = Tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    for save in (pickle.dumps, copy.deepcopy):
        with pytest.raises(TypeError, match=r"pickle: Mul is an op of a recorded graph, .*pickle or copy t\.detach\(\)"):
            save(y)
    assert pickle.loads(pickle.dumps(y.detach())).tolist() == [2.0, 4.0]


def test_random_draws_in_float16_and_seeds_checked_when_given():
    assert ag.randn(3, dtype="float16").dtype == np.float16 and ag.rand(2, dtype="float16").dtype == np.float16
    with pytest.raises(TypeError, match="randn: draws floating-point numbers, got dtype int64"):
        ag.randn(2, dtype="int64")
    for bad in (-1, 1.5, "a", True):
        with pytest.raises(ValueError, match="manual_seed: a seed is an integer from 0 up"):
            ag.manual_seed(bad)
    ag.manual_seed(0)


def test_any_and_all_name_an_axis_out_of_range():
    from autograd import ShapeError
    with pytest.raises(ShapeError, match=r"any: axis 3 is out of range for shape \(1, 2\)"):
        Tensor([[1, 0]]).any(axis=3)
