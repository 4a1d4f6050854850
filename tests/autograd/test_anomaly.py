"""detect_anomaly: a NaN put at a known op in a known module is named exactly, forward and backward; off, nothing changes."""
import contextlib
import inspect
import os

import numpy as np
import pytest

import autograd as ag
import nn
from autograd import Function, Tensor
from autograd import tensor as engine

from ._helpers import while_another_thread_pauses


class Poison(Function):
    """z = x, except that entry `at` of the output (forward) or of the gradient (backward) becomes NaN."""

    rule = "dx = g"

    def forward(self, x, at=None, in_backward=False):
        self.at, self.in_backward = at, in_backward
        z = x.copy()
        if not in_backward:
            z[at] = np.nan
        return z

    def backward(self, g):
        g = g.copy()
        if self.in_backward:
            g[self.at] = np.inf
        return g


def model(x, w, **poison):
    """Three ops in two modules; Poison sits in h.1.mlp, between a MatMul and a Tanh."""
    with ag.name_scope("h.0"):
        h = (x @ w).tanh()
    with ag.name_scope("h.1.mlp"):
        h = Poison.apply(h * 2.0, **poison)
        return (h.tanh() * 3.0).sum()


def inputs():
    rng = np.random.default_rng(0)
    return (Tensor(rng.normal(size=(2, 3)).astype(np.float32)),
            Tensor(rng.normal(size=(3, 4)).astype(np.float32), requires_grad=True))


def line_of(function, text):
    """'FILE:LINE in FUNCTION: CODE' for the line of `function` that holds `text`, as a report's forward call."""
    lines, first = inspect.getsourcelines(function)
    n = next(i for i, line in enumerate(lines) if text in line)
    return f"{os.path.relpath(__file__)}:{first + n} in {function.__name__}: {lines[n].strip()}"


def test_a_nan_made_in_forward_is_named_with_its_op_module_rule_and_inputs():
    x, w = inputs()
    with pytest.raises(ag.AnomalyError) as caught, ag.detect_anomaly(where="training iteration 7"):
        model(x, w, at=(1, 2))
    lines = str(caught.value).splitlines()
    assert lines[0] == "detect_anomaly: forward of Poison made NaN/inf at training iteration 7"
    assert lines[1:4] == ["  op: Poison, rule dx = g", "  module: h.1.mlp",
                          f"  forward call: {line_of(model, 'Poison.apply')}"]
    assert lines[4].startswith("  output: shape (2, 4) float32, min ")
    assert lines[4].endswith(", 1 NaN, 0 inf  ← first non-finite: every input is finite")
    h = np.tanh(x.data @ w.data) * 2
    assert lines[5] == f"  input x: shape (2, 4) float32, min {h.min():.4g}, max {h.max():.4g}, 0 NaN, 0 inf"
    anomaly = caught.value.anomaly
    assert (anomaly.phase, anomaly.op.name, anomaly.scope, anomaly.culprit) == ("forward", "Poison", "h.1.mlp", "output")
    assert isinstance(caught.value, FloatingPointError)
    assert engine._mode.anomaly is None  # the mode ends with the block, error or not


def test_a_nan_made_by_a_vjp_is_named_with_its_step_of_backward():
    x, w = inputs()
    loss = model(x, w, at=(0, 1), in_backward=True)
    with pytest.raises(ag.AnomalyError) as caught, ag.detect_anomaly():
        loss.backward()
    lines = str(caught.value).splitlines()
    # backward runs Sum, Mul (× 3), Tanh, then Poison: the fourth step
    assert lines[0] == "detect_anomaly: backward of Poison (step 4 of backward) returned NaN/inf as the gradient for x"
    assert lines[1:3] == ["  op: Poison, rule dx = g", "  module: h.1.mlp"]
    assert lines[3].startswith("  incoming gradient g: shape (2, 4) float32") and lines[3].endswith("0 NaN, 0 inf")
    assert lines[4].startswith("  input x: shape (2, 4) float32")
    assert lines[5].endswith(", 0 NaN, 1 inf  ← first non-finite: g and the inputs are finite")
    anomaly = caught.value.anomaly
    assert (anomaly.phase, anomaly.step, anomaly.culprit, anomaly.root) == ("backward", 4, "the gradient for x", loss)
    assert w.grad is None  # stopped before the gradient reached the parameter
    assert "forward call" not in str(caught.value)  # the forward ran before detect_anomaly: nothing recorded where


def test_a_nan_made_by_a_vjp_names_the_forward_call_that_applied_the_op():
    """Backward's traceback ends at loss.backward(): the report named the op and its module, but not which line of
    the code outside every module (a loss written by hand) applied it."""
    x, w = inputs()

    def loss_of(x, w):
        h = (x @ w).tanh()
        return Poison.apply(h, at=(0, 1), in_backward=True).sum()
    with pytest.raises(ag.AnomalyError) as caught, ag.detect_anomaly():
        loss_of(x, w).backward()
    lines = str(caught.value).splitlines()
    assert lines[0] == "detect_anomaly: backward of Poison (step 2 of backward) returned NaN/inf as the gradient for x"
    assert lines[1:4] == ["  op: Poison, rule dx = g",
                          "  module: (none: the top module's own forward, or outside any module)",
                          f"  forward call: {line_of(loss_of, 'Poison.apply')}"]
    # the ops a method composes of others (var: mean, subtract, square, mean) are named at the line that called it
    with ag.detect_anomaly():
        spread, line = w.var(), inspect.currentframe().f_lineno
    ops = [t.op for t in ag.topological_order(spread) if t.op is not None]
    assert len(ops) > 3 and {op.site for op in ops} == {(__file__, line, inspect.currentframe().f_code.co_name)}


def test_a_non_finite_leaf_is_named_as_the_input_that_came_in_so():
    x, w = inputs()
    w.data[0, 0] = np.inf
    w.name = "h.0.weight"
    with pytest.raises(ag.AnomalyError) as caught, ag.detect_anomaly():
        model(x, w, at=(0, 0))
    message = str(caught.value)
    assert message.splitlines()[0] == "detect_anomaly: forward of MatMul received NaN/inf in its input B"
    assert "  module: h.0\n" in message
    assert ("input B: shape (3, 4) float32, min " in message and "0 NaN, 1 inf  ← first non-finite: it came in so, "
            "the leaf h.0.weight (a parameter: the optimizer's last update or its initialisation made it so)" in message)
    assert caught.value.anomaly.culprit == "B"


def test_a_non_finite_starting_gradient_is_named():
    x, w = inputs()
    loss = (x @ w).sum()
    with pytest.raises(ag.AnomalyError, match=r"backward from Sum's output starts from a non-finite gradient\n"
                                              r"  op: Sum"):
        with ag.detect_anomaly():
            loss.backward(np.float32(np.nan))


def test_as_a_decorator_nested_and_reentered_it_restores_the_previous_mode():
    outer = ag.detect_anomaly()

    @ag.detect_anomaly()
    def inner():
        assert engine._mode.anomaly is not outer
        return engine._mode.anomaly

    with outer:
        assert engine._mode.anomaly is outer
        assert inner() is not outer
        assert engine._mode.anomaly is outer
    assert engine._mode.anomaly is None


def test_a_decorated_generator_is_checked_in_its_body_and_not_between_its_steps():
    # decorating wrapped only the call that makes the generator: its body's NaN went unchecked
    @ag.detect_anomaly()
    def logs():
        yield Tensor([-1.0]).log()

    steps = logs()
    with pytest.raises(ag.AnomalyError, match="Log"), np.errstate(invalid="ignore"):
        next(steps)
    assert engine._mode.anomaly is None


def test_without_the_call_it_decorates_as_with_it():
    """@ag.detect_anomaly took the function for its pictures: calling it raised "ModeDecorator.__call__() missing
    1 required positional argument: 'func'", or with an argument silently returned a wrapper and never ran it.
    pictures and where are keyword-only, so the bare form decorates, as @ag.no_grad's does."""
    @ag.detect_anomaly
    def step():
        return Tensor([-1.0]).log()

    @ag.detect_anomaly
    def scaled(x):
        return x * 2

    with pytest.raises(ag.AnomalyError, match="forward of Log made NaN/inf"), np.errstate(invalid="ignore"):
        step()
    assert scaled(Tensor([1.0])).tolist() == [2.0]
    with pytest.raises(TypeError):
        ag.detect_anomaly(print, print)  # pictures by position: keyword-only


def test_it_checks_only_the_ops_of_the_thread_that_entered_it():
    """One process-wide mode: a log(-1) here raised another thread's AnomalyError (and was scanned at every op)."""
    def hold(pause):
        with ag.detect_anomaly():
            pause()

    with np.errstate(all="ignore"):
        out = while_another_thread_pauses(hold, lambda: Tensor([-1.0]).log())
    assert np.isnan(out.item())


def test_two_threads_overlapping_blocks_leave_it_off():
    """Entered here, then in another thread, left here, then there: the other thread's exit restored this
    thread's finished mode, which then checked every op of the process for good."""
    def hold(pause):
        with ag.detect_anomaly():
            pause()
        assert not ag.is_anomaly_enabled()

    with contextlib.ExitStack() as mine:
        mine.enter_context(ag.detect_anomaly())
        while_another_thread_pauses(hold, mine.close)  # this thread leaves while the other is still inside
    assert not ag.is_anomaly_enabled() and engine._mode.anomaly is None
def test_pictures_hook_gets_the_anomaly_and_its_paths_are_in_the_message(tmp_path):
    x, w = inputs()
    seen = []

    def pictures(anomaly):
        seen.append(anomaly)
        assert engine._mode.anomaly is None  # drawing runs ops: the check is off meanwhile
        assert anomaly.root.op.inputs is not None  # with pictures the graph is kept, so a trace can walk all of it
        return {"graph": str(tmp_path / "g.svg")}

    loss = model(x, w, at=(0, 1), in_backward=True)
    with pytest.raises(ag.AnomalyError) as caught, ag.detect_anomaly(pictures=pictures):
        loss.backward()
    assert str(caught.value).endswith(f"\n  graph: {tmp_path / 'g.svg'}")
    assert seen == [caught.value.anomaly] and caught.value.anomaly.files == {"graph": str(tmp_path / "g.svg")}


def test_a_failing_pictures_hook_does_not_hide_the_anomaly():
    def broken(anomaly):
        raise OSError("disk full")

    x, w = inputs()
    with pytest.raises(ag.AnomalyError, match=r"\n  pictures: not written \(OSError: disk full\)$"):
        with ag.detect_anomaly(pictures=broken):
            model(x, w, at=(0, 0))


def test_pictures_must_be_a_function():
    with pytest.raises(TypeError, match="detect_anomaly: pictures must be a function"):
        ag.detect_anomaly(pictures="out")


def test_on_without_an_anomaly_every_number_is_bit_identical_to_off():
    def run():
        rng = np.random.default_rng(3)
        x = Tensor(rng.normal(size=(4, 8)).astype(np.float32))
        w = Tensor(rng.normal(size=(8, 5)).astype(np.float32), requires_grad=True)
        loss = ag.cross_entropy(ag.layer_norm((x @ w).gelu(), ag.ones(5)), np.array([0, 1, 2, 3]))
        loss.backward()
        return loss.data.copy(), w.grad.copy()

    off = run()
    with ag.detect_anomaly():
        on = run()
    assert all(a.tobytes() == b.tobytes() for a, b in zip(off, on))


def test_a_summary_writes_its_counts_with_thousands_separators():
    from autograd.anomaly import summary
    a = np.full(5574, np.nan, dtype=np.float32)
    assert summary(a) == "shape (5574,) float32, all 5,574 NaN"
    a[:2] = 1.0
    a[2:1202] = np.inf
    assert summary(a) == "shape (5574,) float32, min 1, max inf, 4,372 NaN, 1,200 inf"


def test_a_0d_gradient_is_summarised_like_any_other():
    """A 0-d VJP returns a NumPy scalar, not an array: the report still summarises it."""
    x = Tensor(np.zeros((), np.float32), requires_grad=True)
    with pytest.raises(ag.AnomalyError) as caught, np.errstate(divide="ignore"), ag.detect_anomaly():
        x.sqrt().backward()
    lines = str(caught.value).splitlines()
    assert lines[0] == "detect_anomaly: backward of Sqrt (step 1 of backward) returned NaN/inf as the gradient for x"
    assert lines[-1] == ("    gradient for x: shape () float32, min inf, max inf, 0 NaN, 1 inf  ← first non-finite: "
                         "g and the inputs are finite")


class Twice(nn.Module):
    def forward(self, t):
        return t * 2.0


class CheckpointedAfterSqrt(nn.Module):
    """sqrt(x) (its VJP inf at 0), then a checkpointed module, whose backward runs a pass of its own."""

    def __init__(self):
        super().__init__()
        self.inner = Twice()

    def forward(self, x):
        return ag.checkpoint(self.inner, x.sqrt())


def test_a_checkpoints_inner_backward_leaves_the_outer_pass_its_root_and_steps():
    x = Tensor(np.array([1.0, 0.0, 2.0], np.float32), requires_grad=True)
    loss = (CheckpointedAfterSqrt()(x) * 3.0 + 1.0).sum()
    with pytest.raises(ag.AnomalyError) as caught, np.errstate(divide="ignore"), ag.detect_anomaly():
        loss.backward()
    # Sum, Add, Mul, Checkpoint (its recompute's Mul a pass of its own), then Sqrt: the fifth step
    assert str(caught.value).splitlines()[0] == ("detect_anomaly: backward of Sqrt (step 5 of backward) returned "
                                                 "NaN/inf as the gradient for x")
    anomaly = caught.value.anomaly
    assert anomaly.step == 5 and anomaly.root is loss and anomaly.root_grad.shape == ()


def test_under_no_grad_the_module_that_made_the_nan_is_named():
    class Log(nn.Module):
        def forward(self, t):
            scopes.append(list(engine._mode.scopes))
            return t.log()

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Log()

        def forward(self, t):
            return self.inner(t)

    scopes, model, x = [], Outer(), Tensor(np.array([1.0, 0.0], np.float32))
    with ag.no_grad(), np.errstate(divide="ignore"):
        model(x)  # off: no scope entered, the no_grad speed-up
        with pytest.raises(ag.AnomalyError) as caught, ag.detect_anomaly():
            model(x)
    assert scopes == [[], ["", "inner"]]
    assert "\n  module: inner\n" in str(caught.value) and caught.value.anomaly.scope == "inner"


def test_under_create_graph_a_vjps_nan_is_the_same_backward_anomaly():
    x = Tensor(np.array([1.0, 0.0, 2.0], np.float32), requires_grad=True)
    loss = (x.sqrt() * 3.0).sum()
    with pytest.raises(ag.AnomalyError) as caught, np.errstate(divide="ignore"), ag.detect_anomaly():
        loss.backward(create_graph=True)  # the VJP g/(2√x) recorded as ops: Div makes the inf
    lines = str(caught.value).splitlines()
    assert lines[0] == "detect_anomaly: backward of Sqrt (step 3 of backward) returned NaN/inf as the gradient for x"
    assert lines[-1].endswith(", 0 NaN, 1 inf  ← first non-finite: g and the inputs are finite")
    anomaly = caught.value.anomaly
    assert (anomaly.phase, anomaly.op.name, anomaly.step, anomaly.root) == ("backward", "Sqrt", 3, loss)


@pytest.mark.parametrize("create_graph", [False, True])
def test_finite_gradients_that_sum_to_inf_are_named(create_graph):
    x = Tensor(np.array([1e-30], np.float32), requires_grad=True)
    x.name = "x"
    loss = (x * 2e38).sum() + (x * 2e38).sum()
    with pytest.raises(ag.AnomalyError) as caught, np.errstate(over="ignore"), ag.detect_anomaly():
        loss.backward(create_graph=create_graph)
    lines = str(caught.value).splitlines()
    # Add, Sum, Mul (x's first 2e38), Sum, Mul (its second): the fifth step
    assert lines == [
        "detect_anomaly: backward summed the gradients for x from 2 ops to NaN/inf at step 5 of backward, adding "
        "Mul's for its input x",
        "  op: Mul, rule dx = g·y, dy = g·x",
        "  module: (none: the top module's own forward, or outside any module)",
        "  gradient so far, from 1 op: shape (1,) float32, min 2e+38, max 2e+38, 0 NaN, 0 inf",
        "  gradient for x from Mul: shape (1,) float32, min 2e+38, max 2e+38, 0 NaN, 0 inf",
        "  sum: shape (1,) float32, min inf, max inf, 0 NaN, 1 inf  ← first non-finite: every part is finite, the "
        "sum overflowed float32"]
    anomaly = caught.value.anomaly
    assert (anomaly.step, anomaly.culprit, anomaly.root) == (5, "the summed gradient for x", loss)
    assert x.grad is None


def test_a_grad_that_overflows_as_backward_adds_into_it_is_named_and_kept():
    x = Tensor(np.array([1e-30], np.float32), requires_grad=True)
    x.name = "x"
    (x * 3e38).sum().backward()
    with pytest.raises(ag.AnomalyError) as caught, np.errstate(over="ignore"), ag.detect_anomaly():
        (x * 3e38).sum().backward()
    assert str(caught.value).splitlines() == [
        "detect_anomaly: backward() added the gradient for x into its .grad and got NaN/inf (.grad sums every "
        "backward() until it is cleared: opt.zero_grad())",
        "  .grad before: shape (1,) float32, min 3e+38, max 3e+38, 0 NaN, 0 inf",
        "  this backward's gradient: shape (1,) float32, min 3e+38, max 3e+38, 0 NaN, 0 inf",
        "  sum: shape (1,) float32, min inf, max inf, 0 NaN, 1 inf  ← first non-finite: every part is finite, the "
        "sum overflowed float32"]
    assert x.grad.tolist() == [np.float32(3e38)]  # checked before it was written


@pytest.mark.parametrize("create_graph", [False, True])
def test_a_finite_gradient_that_overflows_summed_over_broadcast_axes_is_named(create_graph):
    # a bias's gradient is its output's summed over the batch: 100 rows of 1e37 are inf in float32, though every
    # VJP returned finite numbers (the forward stays finite: the rows' signs cancel)
    b = Tensor(np.zeros(1, np.float32), requires_grad=True)
    x = Tensor(np.where(np.arange(100) % 2, 1.0, -1.0).astype(np.float32).reshape(100, 1))
    loss = ((x + b) * 1e37).sum()
    with pytest.raises(ag.AnomalyError) as caught, np.errstate(over="ignore"), ag.detect_anomaly():
        loss.backward(create_graph=create_graph)
    lines = str(caught.value).splitlines()
    assert lines[0] == ("detect_anomaly: backward of Add (step 3 of backward) returned a finite gradient for y, "
                        "which summed over the broadcast axes became NaN/inf")
    assert lines[-1].endswith("shape (1,) float32, min inf, max inf, 0 NaN, 1 inf  ← first non-finite: every part "
                              "is finite, the result overflowed float32")
    anomaly = caught.value.anomaly
    assert (anomaly.phase, anomaly.op.name, anomaly.step, anomaly.culprit) == ("backward", "Add", 3,
                                                                               "the gradient for y")
    assert b.grad is None


def test_a_finite_gradient_that_overflows_cast_to_its_inputs_dtype_is_named():
    x = Tensor(np.ones(1, np.float16), requires_grad=True)
    loss = (x * Tensor(np.array([1e6], np.float32))).sum()  # x's gradient is float32's 1e6: inf as float16
    with pytest.raises(ag.AnomalyError) as caught, np.errstate(over="ignore"), ag.detect_anomaly():
        loss.backward()
    assert str(caught.value).splitlines()[0] == (
        "detect_anomaly: backward of Mul (step 2 of backward) returned a finite gradient for x, which cast to "
        "float16 became NaN/inf")
    assert x.grad is None
