"""nn layers against the formulas they promise, computed here with NumPy in float64."""
import math

import numpy as np
import pytest

import autograd as ag
import nn
from autograd import Tensor


def f64(array):
    return ag.Tensor(np.asarray(array, dtype=np.float64))


def test_linear_stores_its_weight_as_in_by_out_and_initialises_within_pytorch_bounds():
    ag.manual_seed(0)
    layer = nn.Linear(4, 3)
    assert layer.weight.shape == (4, 3) and layer.bias.shape == (3,)
    bound = 1 / math.sqrt(4)
    for p in (layer.weight, layer.bias):
        assert p.dtype == np.float32
        assert np.all(np.abs(p.numpy()) <= bound)
    assert [name for name, _ in layer.named_parameters()] == ["weight", "bias"]


def test_linear_computes_x_at_w_plus_b():
    rng = np.random.default_rng(0)
    layer = nn.Linear(4, 3)
    w, b = rng.normal(size=(4, 3)), rng.normal(size=3)
    layer.weight, layer.bias = nn.Parameter(w), nn.Parameter(b)
    x = rng.normal(size=(2, 5, 4))
    y = layer(f64(x))
    assert y.shape == (2, 5, 3)
    np.testing.assert_allclose(y.numpy(), x @ w + b, rtol=1e-12)


def test_linear_gradients_are_x_transpose_g_and_the_summed_g():
    rng = np.random.default_rng(1)
    layer = nn.Linear(3, 2)
    layer.weight, layer.bias = nn.Parameter(rng.normal(size=(3, 2))), nn.Parameter(rng.normal(size=2))
    x, g = rng.normal(size=(5, 3)), rng.normal(size=(5, 2))
    layer(f64(x)).backward(g)
    np.testing.assert_allclose(layer.weight.grad, x.T @ g, rtol=1e-12)
    np.testing.assert_allclose(layer.bias.grad, g.sum(axis=0), rtol=1e-12)


def test_linear_without_bias():
    layer = nn.Linear(3, 2, bias=False)
    assert layer.bias is None
    assert [name for name, _ in layer.named_parameters()] == ["weight"]
    x = np.ones((1, 3), dtype=np.float32)
    np.testing.assert_allclose(layer(ag.Tensor(x)).numpy(), x @ layer.weight.numpy())


def test_embedding_picks_rows_and_scatter_adds_their_gradients():
    table = nn.Embedding(5, 3)
    assert table.weight.shape == (5, 3)
    table.weight = nn.Parameter(np.arange(15, dtype=np.float64).reshape(5, 3))
    ids = np.array([[1, 4, 1]])
    out = table(ids)
    np.testing.assert_array_equal(out.numpy(), table.weight.numpy()[ids])
    out.backward(np.ones((1, 3, 3)))
    expected = np.zeros((5, 3))
    expected[1], expected[4] = 2, 1  # id 1 is looked up twice: both gradients count
    np.testing.assert_array_equal(table.weight.grad, expected)


def test_embedding_rejects_out_of_range_ids():
    with pytest.raises(IndexError, match=r"\[0, 5\)"):
        nn.Embedding(5, 3)(np.array([5]))


def test_layer_norm_normalises_the_last_axis_then_scales_and_shifts():
    rng = np.random.default_rng(2)
    ln = nn.LayerNorm(4)
    assert ln.weight.shape == ln.bias.shape == (4,)
    np.testing.assert_array_equal(ln.weight.numpy(), np.ones(4))
    np.testing.assert_array_equal(ln.bias.numpy(), np.zeros(4))
    gamma, beta = rng.normal(size=4), rng.normal(size=4)
    ln.weight, ln.bias = nn.Parameter(gamma), nn.Parameter(beta)
    x = rng.normal(size=(3, 4)) * 5 + 2
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    expected = (x - mean) / np.sqrt(var + 1e-5) * gamma + beta
    np.testing.assert_allclose(ln(f64(x)).numpy(), expected, rtol=1e-12)


def test_layer_norm_with_unit_scale_gives_zero_mean_unit_variance():
    x = np.random.default_rng(3).normal(size=(6, 8)) * 3 - 1
    ln = nn.LayerNorm(8, eps=0.0)
    ln.weight, ln.bias = nn.Parameter(np.ones(8)), nn.Parameter(np.zeros(8))
    y = ln(f64(x)).numpy()
    np.testing.assert_allclose(y.mean(-1), 0, atol=1e-12)
    np.testing.assert_allclose(y.var(-1), 1, rtol=1e-12)


def test_layer_norm_without_bias():
    ln = nn.LayerNorm(3, bias=False)
    assert ln.bias is None and [name for name, _ in ln.named_parameters()] == ["weight"]
    ln(ag.Tensor(np.arange(3, dtype=np.float32)))


def test_gelu_is_gpt2s_tanh_approximation():
    x = np.linspace(-4, 4, 17)
    expected = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    # atol: at x = −4 this tanh-form reference loses digits to 1 + tanh u ≈ 0 (the layer does not)
    np.testing.assert_allclose(nn.GELU()(f64(x)).numpy(), expected, rtol=1e-12, atol=1e-15)


def test_relu_keeps_positives_and_zeros_the_rest():
    x = np.array([-2.0, -0.0, 0.5, 3.0])
    np.testing.assert_array_equal(nn.ReLU()(f64(x)).numpy(), np.maximum(x, 0))


def test_sequential_applies_its_modules_in_order_and_names_them_by_position():
    rng = np.random.default_rng(4)
    first, second = nn.Linear(3, 4), nn.Linear(4, 2)
    for layer in (first, second):
        layer.weight = nn.Parameter(rng.normal(size=layer.weight.shape))
        layer.bias = nn.Parameter(rng.normal(size=layer.bias.shape))
    seq = nn.Sequential(first, nn.ReLU(), second)
    x = rng.normal(size=(2, 3))
    hidden = np.maximum(x @ first.weight.numpy() + first.bias.numpy(), 0)
    expected = hidden @ second.weight.numpy() + second.bias.numpy()
    np.testing.assert_allclose(seq(f64(x)).numpy(), expected, rtol=1e-12)
    assert [name for name, _ in seq.named_parameters()] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert len(seq) == 3 and seq[1] is seq.children()[1]


def test_module_list_indexes_iterates_and_appends():
    blocks = nn.ModuleList([nn.Linear(2, 2)])
    blocks.append(nn.Linear(2, 2))
    assert len(blocks) == 2
    assert list(blocks) == list(blocks[:]) and isinstance(blocks[:], nn.ModuleList)
    assert blocks[-1] is blocks[1]
    assert [name for name, _ in blocks.named_parameters()] == ["0.weight", "0.bias", "1.weight", "1.bias"]


def test_a_slice_of_a_sequential_is_a_sequential_and_a_non_module_is_refused():
    """A slice was a plain list (not callable), and a function or a number given to a container was kept as a
    plain attribute: never called, never trained."""
    x = Tensor(np.ones((1, 2), np.float32))
    stack = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    head = stack[:2]
    assert isinstance(head, nn.Sequential) and len(head) == 2 and head[0] is stack[0]
    np.testing.assert_array_equal(head(x).data, stack[1](stack[0](x)).data)
    with pytest.raises(TypeError, match=r"^Sequential: item 1 \(function\) is not an nn.Module; wrap it"):
        nn.Sequential(nn.Linear(2, 2), lambda t: t)
    with pytest.raises(TypeError, match=r"^ModuleList: item 0 \(int\) is not an nn.Module"):
        nn.ModuleList([1])
    with pytest.raises(IndexError, match=r"^Sequential: index 7 is out of range for 3 modules$"):
        stack[7]


def test_an_item_of_a_module_list_is_replaced_in_its_place_as_in_pytorch():
    """`blocks[1] = layer` was "object does not support item assignment"; a bad index was a list's error."""
    x = f64(np.ones((1, 2)))
    stack = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 1))
    replacement = nn.Linear(2, 2)
    stack[-2] = replacement
    assert stack[1] is replacement and len(stack) == 3
    assert [name for name, _ in stack.named_parameters()] == ["0.weight", "0.bias", "1.weight", "1.bias",
                                                              "2.weight", "2.bias"]
    np.testing.assert_array_equal(stack(x).numpy(), stack[2](replacement(stack[0](x))).numpy())
    with pytest.raises(TypeError, match=r"^Sequential: item 0 \(method\) is not an nn.Module"):
        stack[0] = nn.ReLU().forward
    with pytest.raises(IndexError, match=r"^Sequential: index -4 is out of range for 3 modules$"):
        stack[-4] = nn.ReLU()
    with pytest.raises(TypeError, match=r"^Sequential: index must be an integer, got '1'$"):
        stack["1"]
    assert stack[1] is replacement


def test_assigning_a_non_parameter_over_a_parameter_is_refused():
    """It silently unregistered the weight: no longer trained, no longer saved."""
    lin = nn.Linear(2, 2)
    with pytest.raises(TypeError, match=r"^Linear.weight is a Parameter: assign an nn.Parameter \(or None\), not a "
                                        r"Tensor, .* assign weight.data$"):
        lin.weight = Tensor(np.zeros((2, 2), np.float32))
    assert [name for name, _ in lin.named_parameters()] == ["weight", "bias"]


def test_repr_shows_the_tree():
    text = repr(nn.Sequential(nn.Linear(2, 3), nn.Dropout(0.1)))
    assert "(0): Linear(in_features=2, out_features=3, bias=True)" in text
    assert "(1): Dropout(p=0.1)" in text


def test_a_module_without_forward_says_so():
    with pytest.raises(NotImplementedError, match="forward"):
        nn.Module()(1)


def test_a_negative_eps_and_a_mode_that_is_not_a_bool_are_refused():
    """LayerNorm(eps=-1) made NaNs of rows of small variance; train("no") left the model training."""
    with pytest.raises(ValueError, match=r"^LayerNorm: eps must be a number in \[0, inf\), got -1$"):
        nn.LayerNorm(4, eps=-1)
    model = nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.5))
    with pytest.raises(ValueError, match=r"^Sequential.train: mode must be True or False, got 'no'; use .eval\(\)"):
        model.train("no")
    assert model.training and model[1].training
