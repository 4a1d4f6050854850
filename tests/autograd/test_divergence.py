"""ag.diverge: a kernel altered here is named, forward or backward, whichever run holds it; the drift is float32's."""
import numpy as np
import pytest

import autograd as ag
from autograd import Tensor, divergence, kernels

IDS = np.array([[0, 1, 2], [3, 1, 5]])
TARGETS = np.array([[1, 2, 3], [4, 5, 0]])


def small_model(dtype=np.float32):
    """An embedding, a matmul, a tanh and a cross-entropy, in two module scopes: fn() is the loss."""
    rng = np.random.default_rng(0)
    table = Tensor(rng.standard_normal((6, 4)).astype(dtype), requires_grad=True)
    weight = Tensor(rng.standard_normal((4, 6)).astype(dtype), requires_grad=True)

    def loss():
        with ag.name_scope("embed"):
            x = ag.embedding(table, IDS)
        with ag.name_scope("head"):
            h = (x @ weight).tanh()
        return ag.cross_entropy(h, TARGETS)

    return loss


def plant(monkeypatch, name, kernel):
    """Make the fused path's kernel `name` the one given, on every array; AUTOGRAD_FUSED=0 still bypasses it
    (kernels.fused reads the switch before it asks for a CPU kernel)."""
    original = kernels._cpu_kernel
    monkeypatch.setattr(kernels, "_cpu_kernel", lambda n, array: kernel if n == name else original(n, array))


def matmul_a_thousandth_high(a, b, bias=None):
    return (a @ b) * np.float32(1.001)


def embedding_backward_one_row_high(ids, rows, count):
    """The scatter-add, with the row of the first id scaled by 1.001."""
    dw = np.zeros((count, rows.shape[1]), dtype=rows.dtype)
    np.add.at(dw, ids, rows)
    dw[ids[0]] *= np.float32(1.001)
    return dw


@pytest.mark.parametrize("a, b", [({"fused": True}, {"fused": False}), ({"fused": False}, {"fused": True})])
def test_a_planted_forward_kernel_is_named_in_forward_order_from_either_side(monkeypatch, a, b):
    plant(monkeypatch, "matmul", matmul_a_thousandth_high)
    report = ag.diverge(small_model(), a=a, b=b)
    assert (report.forward.op, report.forward.scope, report.forward.index) == ("MatMul", "head", 2)
    assert report.rows["forward"][0].abs == 0 and not report.rows["forward"][0].parts  # the Embedding before it
    assert report.forward.ratio > 1000
    assert "forward: the runs part first at #2 MatMul in head" in str(report)


@pytest.mark.parametrize("a, b", [({"fused": True}, {"fused": False}), ({"fused": False}, {"fused": True})])
def test_a_planted_backward_kernel_is_named_in_backward_order_from_either_side(monkeypatch, a, b):
    plant(monkeypatch, "embedding_backward", embedding_backward_one_row_high)
    report = ag.diverge(small_model(), a=a, b=b)
    assert report.forward is None and report.first_difference["forward"] is None  # the same bits forward
    assert (report.backward.op, report.backward.scope, report.backward.step) == ("Embedding", "embed", 4)
    assert [c.op for c in report.rows["backward"]] == ["CrossEntropy", "Tanh", "MatMul", "Embedding"]
    assert all(c.abs == 0 for c in report.rows["backward"][:3])
    assert "backward: the runs part first at #1 Embedding in embed" in str(report)


def test_the_report_is_the_same_every_time(monkeypatch):
    plant(monkeypatch, "matmul", matmul_a_thousandth_high)
    fn = small_model()
    assert str(ag.diverge(fn, a={"fused": True}, b={"fused": False})) == \
        str(ag.diverge(fn, a={"fused": True}, b={"fused": False}))


def test_the_expected_drift_is_float32s_distance_from_a_float64_run_of_the_same_graph():
    x32 = np.random.default_rng(1).standard_normal(50).astype(np.float32) * 3
    x = Tensor(x32, requires_grad=True)
    report = ag.diverge(lambda t: t.exp().sum(), [x], a={"dtype": "float32"}, b={"dtype": "float64"})
    exp64 = np.exp(x32.astype(np.float64))
    exp32 = np.exp(x32).astype(np.float64)
    drift = max(np.abs(exp32 - exp64).max(), np.finfo(np.float32).eps * exp64.max())
    first = report.rows["forward"][0]
    assert first.op == "Exp" and first.drift == drift
    assert first.abs == np.abs(exp32 - exp64).max()  # run a is float32's own run, run b the float64 one
    assert report.forward is None and report.backward is None  # float32 alone never parts from float64


def test_a_float64_graph_expects_float64s_rounding():
    x = Tensor(np.linspace(-2, 2, 7), requires_grad=True)
    report = ag.diverge(lambda t: (t * t).tanh().sum(), [x], a={"fused": True}, b={"fused": False})
    assert all(c.drift < 1e-14 for phase in ("forward", "backward") for c in report.rows[phase])
    assert "the runs agree to the bit at all 3 ops" in str(report)


def matmul_one_rounding_high(a, b, bias=None):
    """The product one float32 step up: a kernel that sums in another order differs by as much."""
    return np.nextafter(a @ b, np.float32(np.inf))


@pytest.mark.parametrize("kernel, parts", [(matmul_one_rounding_high, False), (matmul_a_thousandth_high, True)])
def test_a_float32_models_loss_cast_to_float64_expects_float32s_drift(monkeypatch, kernel, parts):
    """The drift was scaled to the loss's dtype: a float32 model whose loss is cast to float64 was held to
    float64's rounding at every op, and one float32 rounding in a kernel parted the runs 10⁷ drifts apart."""
    plant(monkeypatch, "matmul", kernel)
    fn = small_model()
    report = ag.diverge(lambda: fn().astype(np.float64), a={"fused": True}, b={"fused": False})
    matmul = report.rows["forward"][1]
    assert matmul.op == "MatMul" and matmul.abs > 0
    assert 1e-7 < matmul.drift < 1e-6  # float32's rounding of values near 4 (float64's would be 1e-15)
    assert (report.forward is matmul) == parts


def test_a_second_implementation_in_float32_is_held_to_float32s_drift():
    """The drift was scaled to the recorded graph's dtype alone: a float32 implementation of a float64 graph
    parted from it at its first op, 10⁸ drifts apart, though it differed by float32's rounding only."""
    x = Tensor(np.linspace(-1, 1, 8), requires_grad=True)

    def in_float32(scale):
        return lambda t: (Tensor(t.data.astype(np.float32), requires_grad=True) * scale).tanh().sum()
    agrees = ag.diverge(lambda t: (t * 2.0).tanh().sum(), [x], a=in_float32(2.0))
    assert agrees.forward is None and agrees.backward is None
    assert agrees.first_difference["forward"].op == "Mul"  # the runs do differ, by float32's rounding
    parts = ag.diverge(lambda t: (t * 2.0).tanh().sum(), [x], a=in_float32(2.002))
    assert (parts.forward.op, parts.forward.index) == ("Mul", 1)


def test_one_tensor_given_as_the_inputs_is_fns_one_argument():
    x = Tensor(np.linspace(-2, 2, 6).reshape(2, 3), requires_grad=True)  # list() made its two rows two arguments
    report = ag.diverge(lambda t: (t * t).tanh().sum(), x, a={"fused": True}, b={"fused": False})
    assert "the runs agree to the bit at all 3 ops" in str(report)


def test_a_second_implementation_is_matched_op_by_op():
    x = Tensor(np.linspace(-1, 1, 8).astype(np.float32), requires_grad=True)
    report = ag.diverge(lambda t: (t * 2.0).tanh().sum(), [x], a=lambda t: (t * 2.001).tanh().sum())
    assert (report.forward.op, report.forward.index) == ("Mul", 1)
    other = ag.diverge(lambda t: (t * 2.0).tanh().sum(), [x], a=lambda t: (t * 2.0).sigmoid().sum())
    assert other.forward.index == 2 and "one runs Tanh (8,), the other Sigmoid (8,)" in other.forward.note
    assert other.rows["backward"] == []


def test_a_nan_in_one_run_is_called_a_nan_not_a_difference_of_inf():
    """The report read "its output differs by inf, inf × the drift float32 alone has there" where run a had a
    nan: a learner chasing the nan found the word nowhere, and an inf that was never in either run."""
    x = Tensor(np.array([1.0, 2.0, 3.0]), requires_grad=True)
    report = ag.diverge(lambda t: (t.tanh() * 2.0).sum(), x,
                        a=lambda t: (t.tanh() * Tensor(np.array([2.0, np.nan, 2.0]))).sum())
    assert (report.forward.index, report.forward.abs, report.backward.index) == (2, np.inf, 2)
    text = str(report)
    assert ("forward: the runs part first at #2 Mul (step 2 of 3 in forward order): its output differs by inf: nan "
            "or ±inf in one run, where the other has another value\n") in text
    assert ("backward: the runs part first at #2 Mul (step 2 of 3 as backward runs them): its gradients for its "
            "inputs differ by inf: nan or ±inf in one run, where the other has another value\n") in text


def test_an_op_that_parts_before_the_graphs_differ_is_named_first():
    """The place where a second implementation's graph leaves the recorded one was listed before the ops
    compared up to it, so it was named as where the runs part though an op before it had already parted."""
    x = Tensor(np.linspace(-1, 1, 8).astype(np.float32), requires_grad=True)
    report = ag.diverge(lambda t: (t * 2.0).tanh().sum(), [x], a=lambda t: (t * 2.001).sigmoid().sum())
    assert (report.forward.op, report.forward.index, report.forward.note) == ("Mul", 1, "")
    assert report.first_difference["forward"] is report.forward
    assert [(c.index, c.parts, bool(c.note)) for c in report.rows["forward"]] == [(1, True, False), (2, True, True)]
    text = str(report)
    assert "forward: the runs part first at #1 Mul" in text
    assert "backward: not compared (the graphs differ at #2, so backward's steps cannot be matched)" in text


def test_reference_arrays_against_a_function_whose_graph_differs_are_refused_by_place():
    fn = small_model()
    out = fn().op.inputs[0].data  # head's output

    def other():
        with ag.name_scope("embed"):
            x = ag.embedding(Tensor(np.ones((6, 4), np.float32), requires_grad=True), IDS)
        return x.sigmoid().sum()
    with pytest.raises(ValueError, match=r"setting a's function leaves the recorded graph at op #2 \(the graphs "
                                         r"differ here: one runs MatMul \(2, 3, 6\), the other Sigmoid"):
        ag.diverge(fn, a=other, reference={"head": out})


def test_torch_tensors_are_references_as_their_arrays_are():
    """A forward hook's outputs, kept as torch tensors: compared as NumPy arrays (a torch dtype has no .kind)."""
    torch = pytest.importorskip("torch")
    fn = small_model()
    captured = {t.op.scope: torch.from_numpy(t.data.copy())
                for t in reversed(ag.topological_order(fn())) if t.op is not None and t.op.scope}
    agree = ag.diverge(fn, reference=captured)
    assert [(c.scope, c.abs) for c in agree.rows["forward"]] == [("embed", 0.0), ("head", 0.0)]


def test_reference_arrays_are_compared_with_each_modules_output():
    fn = small_model()
    captured = {}
    for t in reversed(ag.topological_order(fn())):  # forward order: each module's last op is its output
        if t.op is not None and t.op.scope:
            captured[t.op.scope] = t.data.copy()
    agree = ag.diverge(fn, reference=captured)
    assert agree.b == "reference arrays" and agree.forward is None
    assert [(c.scope, c.abs) for c in agree.rows["forward"]] == [("embed", 0.0), ("head", 0.0)]
    captured["head"] = captured["head"] * 1.001
    parts = ag.diverge(fn, reference=captured)
    assert (parts.forward.op, parts.forward.output) == ("Tanh", "head's output")
    assert parts.rows["backward"] == [] and "references hold forward values only" in str(parts)


def test_a_reference_heading_names_the_module_compared_not_its_last_ops_scope():
    """A module whose last op is a sub-module's (a block's MLP ends in c_proj) was named by that sub-module, whose
    own reference agreed."""
    table = Tensor(np.random.default_rng(0).standard_normal((6, 6)).astype(np.float32), requires_grad=True)

    def fn():
        with ag.name_scope("mlp"), ag.name_scope("mlp.c_proj"):
            h = ag.embedding(table, IDS).tanh()
        return ag.cross_entropy(h, TARGETS)
    out = fn().op.inputs[0].data
    parts = ag.diverge(fn, reference={"mlp.c_proj": out.copy(), "mlp": out * 1.001})
    assert (parts.forward.scope, parts.forward.output) == ("mlp", "mlp's output")
    assert "the runs part first at #2 Tanh in mlp (step 2 of 2" in str(parts)


def test_a_reference_for_a_module_the_graph_lacks_is_refused_by_name():
    with pytest.raises(KeyError, match="no module named 'transformer.h.0' .* include embed, head"):
        ag.diverge(small_model(), reference={"transformer.h.0": np.zeros(3)})


def test_a_reference_for_a_graph_without_modules_says_it_has_none():
    """The list of the graph's modules was left empty: "... the modules it has include " and nothing."""
    x = Tensor(np.ones(4), requires_grad=True)
    with pytest.raises(KeyError, match=r"no module named 'head' .*; it has no modules \(no op ran inside an "
                                       r"nn.Module or ag.name_scope\)"):
        ag.diverge(lambda t: (t * t).sum(), [x], reference={"head": np.ones(4)})


def test_a_reference_that_is_not_a_mapping_is_refused_by_name():
    """A list of arrays failed with AttributeError: 'list' object has no attribute 'items'."""
    with pytest.raises(TypeError, match="reference must map module names to their output arrays.*; got list"):
        ag.diverge(small_model(), reference=[np.zeros((2, 3, 6))])


def test_an_empty_reference_is_refused_not_reported_as_compared():
    """{} was taken as references and the report said "forward: not compared (no op)", as if fn had no ops."""
    with pytest.raises(ValueError, match="the reference holds no arrays; give {module name: its output array}"):
        ag.diverge(small_model(), reference={})


@pytest.mark.parametrize("reference, error, message", [
    ({"head": np.zeros(3, np.float32)}, ValueError,
     r"the reference for 'head' has shape \(3,\), the module's output \(2, 3, 6\); capture the module's output"),
    ({"nohead": np.zeros((2, 3, 6))}, KeyError, "no module named 'nohead' recorded ops in fn's graph"),
    ({"head": np.full((2, 3, 6), "a")}, TypeError,
     "the reference for 'head' holds <U1 values; give the module's output, an array of numbers"),
])
def test_a_reference_that_cannot_be_compared_is_refused_before_any_replay(monkeypatch, reference, error, message):
    """The shape was checked after the float64, float32 and setting a replays (a minute on the main job's model);
    text failed inside np.asarray as "could not convert string to float"."""
    replays = []
    monkeypatch.setattr(divergence, "_replay", lambda *args: replays.append(args))
    with pytest.raises(error, match=message):
        ag.diverge(small_model(), reference=reference)
    assert replays == []


@pytest.mark.parametrize("a, error, message", [
    ({"fusd": True}, TypeError, "unknown key\\(s\\) 'fusd'; the keys are fused, device, dtype, threads"),
    ({"dtype": "float16"}, TypeError, "dtype must be float32 or float64"),
    ({"dtype": "floaty"}, TypeError, "setting a's dtype must be float32 or float64, got 'floaty'"),
    ({"threads": 0}, ValueError, "threads must be a positive int"),
    ("fused", TypeError, "must be a dict of fused, device, dtype, threads"),
])
def test_a_bad_setting_is_refused_by_name(a, error, message):
    with pytest.raises(error, match=message):
        ag.diverge(small_model(), a=a)


def test_random_ops_are_refused_as_they_part_by_design():
    x = Tensor(np.ones(4), requires_grad=True)
    with pytest.raises(ValueError, match="Dropout draws random masks.*eval mode"):
        ag.diverge(lambda t: ag.dropout(t, 0.5).sum(), [x])


def test_the_switch_and_the_threads_are_put_back():
    before = (divergence.switches.read("AUTOGRAD_FUSED"), kernels._cpu["threads"])
    ag.diverge(small_model(), a={"fused": False, "threads": 1}, b={"fused": True, "threads": 2})
    assert (divergence.switches.read("AUTOGRAD_FUSED"), kernels._cpu["threads"]) == before
