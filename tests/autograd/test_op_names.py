"""Every op's declared names (`input_names`, `saved_names`, beside its `rule`) against what a run of it holds.

The ops are found by introspection (every Function subclass that autograd
defines), so a new op fails here until it has an example below, and an op
whose forward saves something new fails until its declaration says so.
"""
import inspect

import numpy as np
import pytest

import autograd as ag
from autograd import Function, Tensor, backend, higher, kernels, ops
from autograd.kernels import cuda_twins


def autograd_ops():
    """Every Function subclass defined in the autograd package, at any depth."""
    found, stack = [], [Function]
    while stack:
        for sub in stack.pop().__subclasses__():
            stack.append(sub)
            if sub.__module__.split(".")[0] == "autograd":
                found.append(sub)
    return sorted(found, key=lambda cls: cls.__name__)


def leaf(*shape, positive=False):
    data = np.random.default_rng(sum(shape) + len(shape)).standard_normal(shape)
    return Tensor(np.abs(data) + 0.5 if positive else data, requires_grad=True)


def attention(tq, tk, d, dropout_p=0.0):
    q, k, v = leaf(1, 2, tq, d), leaf(1, 2, tk, d), leaf(1, 2, tk, d)
    return ag.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p)


# One or more calls per op, each returning the op's output; together they fill every input and saved slot.
EXAMPLES = {
    ops.Add: [lambda: leaf(2, 3) + leaf(3)],
    ops.Sub: [lambda: leaf(2, 3) - leaf(2, 1)],
    ops.Neg: [lambda: -leaf(3)],
    ops.Mul: [lambda: leaf(2, 3) * leaf(3)],
    ops.Div: [lambda: leaf(2, 3) / leaf(3, positive=True)],
    ops.Pow: [lambda: leaf(3, positive=True) ** leaf(3), lambda: leaf(2, positive=True) ** 2.0],
    ops.MatMul: [lambda: leaf(2, 3) @ leaf(3, 4), lambda: leaf(3) @ leaf(3)],
    ops.Linear: [lambda: ag.linear(leaf(2, 3), leaf(3, 4), leaf(4)), lambda: ag.linear(leaf(2, 3), leaf(3, 4))],
    ops.Exp: [lambda: leaf(3).exp()],
    ops.Log: [lambda: leaf(3, positive=True).log()],
    ops.Sqrt: [lambda: leaf(3, positive=True).sqrt()],
    ops.Tanh: [lambda: leaf(3).tanh()],
    ops.Sigmoid: [lambda: leaf(3).sigmoid()],
    ops.ReLU: [lambda: leaf(3).relu()],
    ops.GELU: [lambda: leaf(3).gelu()],
    ops.Sum: [lambda: leaf(2, 3).sum(axis=0)],
    ops.Max: [lambda: leaf(2, 3).max(axis=1)],
    ops.Reshape: [lambda: leaf(2, 3).reshape(3, 2)],
    ops.Transpose: [lambda: leaf(2, 3).T],
    ops.GetItem: [lambda: leaf(4, 2)[1:], lambda: leaf(4, 2)[np.array([0, 0, 3])]],
    ops.Concat: [lambda: ag.concat([leaf(2), leaf(3), leaf(1)])],
    ops.Stack: [lambda: ag.stack([leaf(2), leaf(2)])],
    ops.Where: [lambda: ag.where(np.array([True, False, True]), leaf(3), leaf(3))],
    ops.Cast: [lambda: leaf(3).astype("float32")],
    ops.ToDevice: [lambda: ops.ToDevice.apply(leaf(3), device="cpu")],  # a second device is not needed to run it
    ops.BroadcastTo: [lambda: ops.BroadcastTo.apply(leaf(3), shape=(2, 3))],
    ops.AddAt: [lambda: ops.AddAt.apply(leaf(4, 2), leaf(3, 2), key=np.array([0, 0, 3]), repeats=True)],
    ops.Softmax: [lambda: leaf(2, 3).softmax(), lambda: ag.softmax(leaf(2, 3), mask=np.array([True, True, False]))],
    ops.LogSoftmax: [lambda: leaf(2, 3).log_softmax()],
    ops.CrossEntropy: [lambda: ag.cross_entropy(leaf(2, 3), np.array([0, 2])),
                       lambda: ag.cross_entropy(leaf(2, 3), np.array([1, -1]), ignore_index=-1)],
    ops.Embedding: [lambda: ag.embedding(leaf(5, 2), np.array([4, 0, 4]))],
    ops.LayerNorm: [lambda: ag.layer_norm(leaf(2, 3), leaf(3), leaf(3)), lambda: ag.layer_norm(leaf(2, 3), leaf(3))],
    ops.Dropout: [lambda: ag.dropout(leaf(4, 4), 0.5)],
    # Tk ≤ 4D keeps P; a longer context keeps the log-sum-exps alone; dropout keeps its mask
    ops.ScaledDotProductAttention: [lambda: attention(3, 3, 2, dropout_p=0.5), lambda: attention(2, 9, 2)],
    ops.Checkpoint: [lambda: ag.checkpoint(lambda h: h.tanh(), leaf(3))],
    higher.Outputs: [lambda: higher.Outputs.apply(leaf(2), leaf(2, 3), seeds=[np.ones(2), np.ones((2, 3))])],
}


def test_every_op_has_an_example():
    missing = [cls.__name__ for cls in autograd_ops() if cls not in EXAMPLES]
    assert not missing, f"add an example call for {missing} to EXAMPLES"
    assert set(EXAMPLES) == set(autograd_ops())
    in_ops_module = {c for c in vars(ops).values() if isinstance(c, type) and issubclass(c, Function)} - {Function}
    assert len(in_ops_module) > 30 and in_ops_module <= set(autograd_ops())  # the search reaches them all


@pytest.mark.parametrize("cls", autograd_ops(), ids=lambda cls: cls.__name__)
def test_declared_names_match_the_inputs_and_the_saved_arrays_of_a_run(cls):
    for names in (cls.input_names, cls.saved_names):
        assert isinstance(names, tuple) and all(isinstance(n, str) and n for n in names), \
            f"{cls.__name__}: names are a tuple of strings, e.g. ('p',) rather than ('p')"
        assert len(set(names)) == len(names), f"{cls.__name__}: {names} repeats a name"
    variadic = any(p.kind is p.VAR_POSITIONAL for p in inspect.signature(cls.forward).parameters.values())
    arities, filled = [], [False] * len(cls.saved_names)
    for make in EXAMPLES[cls]:
        out = make()
        op = out.op
        assert type(op) is cls
        arities.append(len(op.inputs))
        assert len(op.saved) == len(cls.saved_names), \
            f"{cls.__name__} saved {len(op.saved)} arrays but declares {cls.saved_names}"
        for i, (name, array) in enumerate(zip(cls.saved_names, op.saved)):
            if array is None:
                continue
            filled[i] = True
            assert backend.device_of(array) is not None, f"{cls.__name__}.saved[{i}] ({name}) is not an array"
            for role, t in zip(cls.input_names, op.inputs):  # a saved input carries that input's name, and only it
                assert (array is t.data) == (name == role), \
                    f"{cls.__name__}: saved {name!r} {'is' if array is t.data else 'is not'} its input {role!r}"
        out.sum().backward()  # the declared op runs its VJP on what it saved
    assert all(filled), f"{cls.__name__}: no example fills {[n for n, f in zip(cls.saved_names, filled) if not f]}"
    if variadic:
        assert len(cls.input_names) == 1, f"{cls.__name__} takes any number of inputs: it declares one name for all"
    else:
        assert max(arities) == len(cls.input_names), \
            f"{cls.__name__} takes up to {max(arities)} inputs but names {cls.input_names}"


def test_log_softmax_saves_p_and_says_so():
    # the drift this declaration ended: the picture called log_softmax's saved array "log p"; it is p = softmax(z)
    z = leaf(2, 3)
    out = z.log_softmax()
    assert out.op.saved_names == ("p",)
    np.testing.assert_allclose(out.op.saved[0], np.exp(out.data), rtol=1e-12)


def test_dropout_saves_the_scaled_mask_and_its_rule_scales_it_once():
    # the drift this rule ended: it read dx = g·mask/(1−p) beside a saved mask that already holds 1/(1−p), so a
    # learner following viz.trace's rule got twice the gradient backward gives
    x, g = leaf(4, 4), np.random.default_rng(5).standard_normal((4, 4))
    ag.manual_seed(0)
    out = ag.dropout(x, 0.75)
    mask = out.op.saved[0].copy()  # backward frees what the op saved
    out.backward(g)
    assert set(np.unique(mask)) == {0.0, 4.0}  # 1[u ≥ p]/(1 − p) with p = 0.75
    np.testing.assert_array_equal(x.grad, g * mask)  # dx = g·mask: no second /(1 − p)
    assert out.op.saved_names == ("mask",) and out.op.rule == "dx = g·mask, mask = 1[u ≥ p]/(1−p)"


def test_gelu_keeps_its_declared_slots_on_the_fused_cuda_path(monkeypatch):
    # The GPU's fused kernel keeps x alone; a None stands in the slot of s, so ("x", "s") still fits.
    # Stand NumPy versions of the kernels in for CuPy's: the op's own branch for them runs on the CPU.
    c, a = np.sqrt(2 / np.pi), 0.044715

    def forward(x):
        return 0.5 * x * (1 + np.tanh(c * (x + a * x ** 3)))

    def backward(x, g):
        t = np.tanh(c * (x + a * x ** 3))
        return g * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * a * x * x))

    composed = leaf(5)
    composed.gelu().sum().backward()
    monkeypatch.setattr(kernels, "fused", lambda name, array: {"gelu_forward": forward, "gelu_backward": backward}[name])
    x = leaf(5)
    out = x.gelu()
    assert len(out.op.saved) == 2 and out.op.saved[0] is x.data and out.op.saved[1] is None
    out.sum().backward()
    np.testing.assert_allclose(x.grad, composed.grad, rtol=1e-12)


def fused_run(make):
    """make()'s output with the CPU's fused kernels on, if numba is here to run them (float32, 16K elements up)."""
    pytest.importorskip("numba", reason="the fused CPU kernels need numba")
    out = make()
    assert out.op.saved_names == type(out.op).fused_saved_names, f"{out.op.name} did not take its fused path"
    return out


def test_the_fused_layer_norm_names_what_it_saves(monkeypatch):
    """x itself, not x̂, and a (2, rows) array of each row's μ and 1/σ: viz labels them so, not as x̂ and 1/σ."""
    monkeypatch.setenv("AUTOGRAD_FUSED", "1")
    rng = np.random.default_rng(0)
    x = ag.Tensor(rng.standard_normal((256, 128)).astype(np.float32), requires_grad=True)
    w, b = (ag.Tensor(rng.standard_normal(128).astype(np.float32), requires_grad=True) for _ in range(2))
    out = fused_run(lambda: ag.layer_norm(x, w, b))
    assert len(out.op.saved) == len(out.op.saved_names) == 3
    saved_x, stats, gamma = out.op.saved
    assert saved_x is x.data and gamma is w.data
    np.testing.assert_allclose(stats, [x.data.mean(-1), 1 / np.sqrt(x.data.var(-1) + 1e-5)], rtol=1e-5)
    assert ops.LayerNorm.saved_names == ("x̂", "1/σ", "γ")  # the composed path's, unchanged
    out.sum().backward()


def test_the_fused_cross_entropy_names_what_it_saves(monkeypatch):
    """p − onehot(y) in one array, the targets' and the kept rows' slots empty."""
    monkeypatch.setenv("AUTOGRAD_FUSED", "1")
    rng = np.random.default_rng(0)
    z = ag.Tensor(rng.standard_normal((512, 65)).astype(np.float32), requires_grad=True)
    t = rng.integers(0, 65, 512)
    out = fused_run(lambda: ag.cross_entropy(z, ag.Tensor(t)))
    dz, targets, kept = out.op.saved
    assert targets is None and kept is None
    p = np.exp(z.data - z.data.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    p[np.arange(512), t] -= 1
    np.testing.assert_allclose(dz, p, rtol=1e-5, atol=1e-6)
    out.backward()


def test_viz_labels_a_fused_ops_saved_arrays_by_its_own_names(monkeypatch):
    from viz.walk import saved_values
    monkeypatch.setenv("AUTOGRAD_FUSED", "1")
    rng = np.random.default_rng(0)
    x = ag.Tensor(rng.standard_normal((256, 128)).astype(np.float32), requires_grad=True)
    w = ag.Tensor(np.ones(128, np.float32), requires_grad=True)
    out = fused_run(lambda: ag.layer_norm(x, w, None))
    assert [name for name, _ in saved_values(out)] == ["x", "(μ, 1/σ)", "γ"]


def twins_as_cuda_kernels(monkeypatch):
    """The CUDA kernels' NumPy twins stand in for them, so the ops' GPU branches run here, in float64."""
    stand_ins = {"layer_norm_forward": cuda_twins.layer_norm_forward,
                 "layer_norm_backward": cuda_twins.layer_norm_backward,
                 "cross_entropy_forward": lambda z, t, vocab, ignore, out: cuda_twins.cross_entropy_forward(
                     z, t, vocab, -1 if ignore is None else ignore, out)}
    monkeypatch.setattr(kernels, "fused", lambda name, array: stand_ins.get(name))


def test_the_cuda_paths_name_what_they_save_through_the_twins(monkeypatch):
    """On a GPU, layer norm keeps (x, (μ, 1/σ), γ) and cross-entropy p − onehot(y), as on numba's path."""
    twins_as_cuda_kernels(monkeypatch)
    rng = np.random.default_rng(0)
    x, w, b = leaf(6, 40), leaf(40), leaf(40)
    out = ag.layer_norm(x, w, b)
    assert out.op.saved_names == ("x", "(μ, 1/σ)", "γ") and len(out.op.saved) == 3
    saved_x, stats, gamma = out.op.saved
    assert saved_x is x.data and gamma is w.data
    np.testing.assert_allclose(stats, [x.data.mean(-1), 1 / np.sqrt(x.data.var(-1) + 1e-5)], rtol=1e-12)
    z, t = leaf(6, 40), rng.integers(0, 40, 6)
    loss = ag.cross_entropy(z, ag.Tensor(t))
    assert loss.op.saved_names == ("p − y", "targets", "kept")
    p = np.exp(z.data - z.data.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    p[np.arange(6), t] -= 1
    np.testing.assert_allclose(loss.op.saved[0], p, rtol=1e-12, atol=1e-15)
