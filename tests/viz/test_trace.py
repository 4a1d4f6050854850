"""viz.trace: the backward pass step by step must be exactly what Tensor.backward does."""
import errno
import os
import shutil
import stat
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import autograd as ag
from autograd import Constant, Tensor, topological_order
from models.numbers import fixed
from tests.viz import demo_module
from viz import trace as vt

MODULE = "tests.viz.demo_module"
REPO = Path(__file__).resolve().parents[2]


def all_ops(root):
    """Every op reachable from root, found independently of the engine's ordering."""
    found, stack, seen = [], [root], set()
    while stack:
        t = stack.pop()
        if id(t) in seen:
            continue
        seen.add(id(t))
        if t.op is not None:
            found.append(t.op)
            stack.extend(x for x in t.op.inputs if x.requires_grad)
    return found


def leaves_of(root):
    seen, stack, leaves = set(), [root], []
    while stack:
        t = stack.pop()
        if id(t) in seen:
            continue
        seen.add(id(t))
        if t.op is None:
            if t.requires_grad:
                leaves.append(t)
        else:
            stack.extend(t.op.inputs)
    return leaves


def test_every_op_once_in_the_engines_backward_order():
    loss = demo_module.demo_loss()
    steps = vt.trace(loss)
    ops = [s.op for s in steps]
    assert len({id(op) for op in ops}) == len(ops)  # each op once
    assert {id(op) for op in ops} == {id(op) for op in all_ops(loss)}  # and all of them
    assert ops == [t.op for t in topological_order(loss) if t.op is not None]
    assert [s.number for s in steps] == list(range(1, len(steps) + 1))
    assert steps[0].name == "CrossEntropy" and steps[0].rule == "dz = p − y"
    assert all(s.rule == s.op.rule and s.name == type(s.op).__name__ for s in steps)
    assert {s.name for s in steps} >= {"Embedding", "MatMul", "LayerNorm", "Softmax", "CrossEntropy"}
    assert next(s for s in steps if s.name == "Softmax").scope == "block.attn"


def test_values_are_the_engines_bit_for_bit():
    loss = demo_module.demo_loss()
    steps = vt.trace(loss)
    for t in topological_order(loss):
        if not t.is_leaf:
            t.retain_grad()
    loss.backward(retain_graph=True)
    for s in steps:  # what each op received is what the engine handed it
        np.testing.assert_array_equal(s.grad, s.output.grad)
        for inp in s.inputs:
            if inp.grad is not None:
                assert inp.grad.shape == inp.tensor.shape and inp.grad.dtype == inp.tensor.dtype
    leaves = leaves_of(loss)
    assert {id(leaf.tensor) for leaf in steps.leaves} == {id(t) for t in leaves}
    for leaf in steps.leaves:
        np.testing.assert_array_equal(leaf.grad, leaf.tensor.grad)
    wte = next(leaf for leaf in steps.leaves if leaf.label == "wte.weight")
    assert wte.contributions == 2  # the embedding and the tied LM head


def test_trace_writes_nothing_and_frees_nothing():
    loss = demo_module.demo_loss()
    leaves, ops = leaves_of(loss), all_ops(loss)
    vt.trace(loss)
    vt.trace(loss)
    assert all(t.grad is None for t in leaves)
    assert all(op.inputs is not None for op in ops)
    loss.backward()  # the real backward still works after two traces
    assert all(t.grad is not None for t in leaves)


def test_a_freed_graph_is_a_clear_error():
    loss = demo_module.demo_loss()
    loss.backward()
    with pytest.raises(RuntimeError, match=r"retain_graph=True"):
        vt.trace(loss)


def test_hand_checkable_example_and_its_text():
    x = Tensor([1.0, 2.0, 3.0], requires_grad=True)
    x.name = "x"
    b = Tensor([[0.5], [-1.0]], requires_grad=True)  # broadcast against x: (2, 1) + (3,) -> (2, 3)
    b.name = "b"
    y = ((x * x) + b).sum()
    y.name = "y"
    steps = vt.trace(y)
    assert [s.name for s in steps] == ["Sum", "Add", "Mul"]
    add = steps[1]
    assert [i.label for i in add.inputs][1] == "b"
    assert add.inputs[1].returned_shape == (2, 3) and add.inputs[1].grad.tolist() == [[3.0], [3.0]]
    assert add.inputs[0].returned_shape == (2, 3) and add.inputs[0].grad.tolist() == [2.0, 2.0, 2.0]
    mul = steps[2]
    assert [i.grad.tolist() for i in mul.inputs] == [[2.0, 4.0, 6.0], [2.0, 4.0, 6.0]]
    assert {leaf.label: leaf.grad.tolist() for leaf in steps.leaves} == {"x": [4.0, 8.0, 12.0], "b": [[3.0], [3.0]]}
    assert next(leaf for leaf in steps.leaves if leaf.label == "x").contributions == 2
    text = vt.format_trace(steps)
    assert text.startswith("Backward pass of L = y = 26.5,")
    assert text.count("\nstep ") == 3
    assert "step 1/3  Sum" in text and "rule  dx = broadcast(g)" in text
    assert "∂L/∂b  (2, 1)" in text and "(summed from (2, 3) over broadcast axes)" in text
    assert "x.grad  (3,)  [ 4.000000,  8.000000, 12.000000]   (sum of 2 contributions)" in text


def test_format_shows_small_values_and_summarises_large_ones():
    steps = vt.trace(demo_module.demo_loss())
    text = vt.format_trace(steps)
    assert text.count("\nstep ") == len(steps)
    for s in steps:
        assert f"  rule  {s.rule}" in text
    assert "p − y" in text and "scatter-add" in text
    assert "(24 values, not shown)" in text  # (6, 4) is over the 16-value limit
    assert "[[" in text  # block.attn.weight's (4, 4) values are printed
    wide = vt.format_trace(steps, max_values=1000)
    assert "not shown" not in wide
    assert "constant: needs no gradient" in text


def test_integer_arrays_show_values_or_nothing_never_a_norm():
    logits = Tensor(np.linspace(-1, 1, 40 * 3).reshape(40, 3), requires_grad=True)
    targets = np.arange(40) % 3  # 40 integers: over the 16-value limit
    text = vt.format_trace(vt.trace(ag.cross_entropy(logits, targets)))
    assert "targets = (40,)  (40 integers, not shown)" in text
    assert "p = (40, 3)  ‖·‖ = " in text  # a float array keeps its norm
    few = vt.format_trace(vt.trace(ag.cross_entropy(logits[:4], targets[:4])))
    assert "targets = (4,)  [0, 1, 2, 0]" in few

def test_zero_dimensional_leaves():
    x = Tensor(3.0, requires_grad=True)
    x.name = "x"
    y = (x * x).exp() * 0.0 + x * 2.0
    steps = vt.trace(y)
    (leaf,) = steps.leaves
    y.backward()
    assert leaf.grad.shape == () and leaf.grad.dtype == x.dtype
    np.testing.assert_array_equal(leaf.grad, x.grad)
    assert "x.grad  scalar  2.0" in vt.format_trace(steps)


def test_non_scalar_roots_need_a_grad():
    x = Tensor([[1.0, -2.0]], requires_grad=True)
    y = x.relu()
    with pytest.raises(RuntimeError, match="grad="):
        vt.trace(y)
    steps = vt.trace(y, grad=[[5.0, 5.0]])
    assert steps.leaves[0].grad.tolist() == [[5.0, 0.0]]
    with pytest.raises(RuntimeError, match="does not require grad"):
        vt.trace(Tensor([1.0]))


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 4), cols=st.integers(1, 4), seed=st.integers(0, 2**16), dtype=st.sampled_from(["float32", "float64"]))
def test_matches_the_engine_on_random_graphs(rows, cols, seed, dtype):
    rng = np.random.default_rng(seed)
    w = Tensor(rng.standard_normal((cols, cols)).astype(dtype), requires_grad=True)
    b = Tensor(rng.standard_normal(cols).astype(dtype), requires_grad=True)
    x = Tensor(rng.standard_normal((rows, cols)).astype(dtype), requires_grad=True)
    h = ag.softmax(x @ w + b) * x          # broadcast bias, x used twice
    loss = ag.layer_norm(h, b, None).tanh().mean() + (w * w).sum()
    steps = vt.trace(loss)
    assert [s.op for s in steps] == [t.op for t in topological_order(loss) if t.op is not None]
    loss.backward()
    for leaf in steps.leaves:
        np.testing.assert_array_equal(leaf.grad, leaf.tensor.grad)


def test_cli(capsys):
    assert vt.main([MODULE, "--decimals", "3"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Backward pass of L = loss = 2.351,")
    assert "CrossEntropy" in out and "dW = scatter-add rows" in out and "Leaves:" in out
    assert "block.ln.bias.grad  (4,)  [0.015, 0.025, 0.092, 0.076]" in out
    assert vt.main([MODULE, "--max-values", "3"]) == 0
    assert "block.ln.bias.grad  (4,)  ‖·‖ = " in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--decimals", "-1"], "--decimals must be at least 0, got -1"),
    (["--max-values", "-2"], "--max-values must be at least 0, got -2"),
    (["--max-values", "many"], "argument --max-values: invalid int value: 'many'"),
    (["--decimals", "10000"], "--decimals must be at most 20 (past that, a float64's 17 significant digits are "
                              "used up), got 10000"),
    (["--decimals", "21"], "--decimals must be at most 20"),
    (["--html", "{file}/page.html"], "argument --html: cannot make {file}/page.html: {file} is a file"),
    (["--html", "{loop}/page.html"], "argument --html: cannot use {loop}/page.html: Too many levels of symbolic links"),
    (["--html", "{tmp}"], "argument --html: {tmp} is a folder; give a file name"),
    (["--html", "{tmp}/" + "p" * 300], "argument --html: cannot use {tmp}/ppp"),
])
def test_cli_mistakes_cost_one_line_before_any_work(argv, message, capsys, tmp_path):
    (tmp_path / "file").write_text("")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    names = {"file": tmp_path / "file", "loop": tmp_path / "loop", "tmp": tmp_path}
    argv, message = [a.format(**names) for a in argv], message.format(**names)
    with pytest.raises(SystemExit) as exit_:
        vt.main(["no_such_module_for_viz"] + argv)  # parse errors come first: the module is never imported
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"python -m viz.trace: error: {message}") and err.count("\n") == 1


def test_the_tools_need_nothing_from_models_but_its_shared_number_rule_and_atomic_files():
    code = ("import sys, viz.graph, viz.trace, viz.walk, viz.numbers, viz.loading; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'models'))")
    run = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    # no family; models.cli only when a command runs
    assert run.stdout.strip() == "['models', 'models.io', 'models.numbers']"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="makes a named pipe")
@pytest.mark.parametrize("name", ["page.html", "pipe"])
def test_html_into_a_pipe_is_written_in_place_and_leaves_the_pipe_a_pipe(tmp_path, capsys, name):
    """The page is written beside its name and moved there, but over a device or a pipe that would leave a plain
    file in its place (run as root, `--html /dev/null` replaced the system's null device). A pipe needs no .html
    name: `--html /dev/null` was refused as not HTML."""
    if not shutil.which("dot"):
        pytest.skip("the page draws the graph with Graphviz's dot")
    pipe = tmp_path / name
    os.mkfifo(pipe)
    read = []
    reader = threading.Thread(target=lambda: read.append(pipe.read_text(encoding="utf-8")), daemon=True)
    reader.start()
    assert vt.main([MODULE, "--html", str(pipe)]) == 0
    reader.join(timeout=30)
    assert read and read[0].startswith("<!DOCTYPE html>") and "<svg" in read[0]
    assert stat.S_ISFIFO(os.stat(pipe).st_mode) and [p.name for p in tmp_path.iterdir()] == [name]


def test_python_dash_m_entry_point():
    run = subprocess.run([sys.executable, "-m", "viz.trace", MODULE], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "step  1/10  CrossEntropy" in run.stdout


def test_each_step_prints_the_saved_forward_values_its_rule_uses():
    # z = tanh(x), y = eᶻ: tanh's rule reads its output z, exp's reads its output eᶻ; cross-entropy reads p
    x = Tensor(np.array([[0.5, -1.0, 2.0]]), requires_grad=True)
    y = x.tanh().exp()
    loss = ag.cross_entropy(y, np.array([2]))
    text = vt.format_trace(vt.trace(loss))
    z = np.tanh(x.numpy())
    p = np.exp(np.exp(z)) / np.exp(np.exp(z)).sum()
    blocks = {b.split("\n")[0].split()[2]: b for b in text.split("\n\n") if b.startswith("step")}
    assert f"uses  p = (1, 3)  {vt.values_text(p)}" in blocks["CrossEntropy"]
    assert "targets = (1,)  [2]" in blocks["CrossEntropy"]
    assert f"uses  z (the output) = (1, 3)  {vt.values_text(np.exp(z))}" in blocks["Exp"]
    assert f"uses  z (the output) = (1, 3)  {vt.values_text(z)}" in blocks["Tanh"]


def test_layer_norm_step_shows_what_it_saved_x_hat_and_one_over_sigma():
    # rows (1, 3) and (2, 6): μ = 2, 4; deviations ±1, ±2; σ = √(1 + ε), √(4 + ε); x̂ = ±1/σ, ±2/σ
    x = Tensor(np.array([[1.0, 3.0], [2.0, 6.0]]), requires_grad=True)
    w = Tensor(np.ones(2), requires_grad=True)
    loss = (ag.layer_norm(x, w, None) * Tensor(np.array([1.0, 2.0]))).sum()
    step = next(s for s in vt.trace(loss) if s.name == "LayerNorm")
    saved = dict(step.saved)
    sigma = np.sqrt(np.array([[1.0], [4.0]]) + 1e-5)
    assert list(saved) == ["x̂", "1/σ", "γ"]
    np.testing.assert_allclose(saved["1/σ"], 1 / sigma, rtol=1e-12)
    np.testing.assert_allclose(saved["x̂"], np.array([[-1.0, 1.0], [-2.0, 2.0]]) / sigma, rtol=1e-12)
    assert saved["γ"] is w.data
    text = vt.format_trace(vt.trace(loss))
    assert "uses  x̂ = (2, 2)" in text and "1/σ = (2, 1)" in text


def test_log_softmax_step_shows_p_the_probabilities_it_saved():
    # log_softmax keeps p = softmax(z), not log p: its rule dz = g − p·Σg reads p; z = (0, ln 3) gives p = (¼, ¾)
    z = Tensor(np.array([[0.0, np.log(3.0)]]), requires_grad=True)
    loss = (z.log_softmax() * Tensor(np.array([[1.0, 2.0]]))).sum()
    step = next(s for s in vt.trace(loss) if s.name == "LogSoftmax")
    assert [name for name, _ in step.saved] == ["p"]
    np.testing.assert_allclose(step.saved[0][1], [[0.25, 0.75]], rtol=1e-12)
    assert f"uses  p = (1, 2)  {vt.values_text(np.array([[0.25, 0.75]]))}" in vt.format_trace(vt.trace(loss))
    assert [i.role for i in step.inputs] == ["z"]


def test_values_below_1e_4_print_in_scientific_notation():
    assert vt.values_text(np.array([0.5, 3e-11, 0.0])) == "[0.500000, 3.00e-11, 0.000000]"
    assert vt.values_text(np.array(2.5e-7)) == "2.50e-07"
    assert vt.values_text(np.array([4, 1])) == "[4, 1]"


def test_fewer_decimals_write_what_they_would_round_to_zero_in_scientific_notation_in_aligned_columns():
    """With --decimals 2, 0.003 (above 1e-4) printed as 0.00, and the cells beside a tiny one were narrower."""
    text = vt.values_text(np.array([[0.003, 0.5], [-12.25, -1e-6]]), decimals=2)
    assert text == "[[ 3.00e-03,      0.50],\n [   -12.25, -1.00e-06]]"
    assert vt.values_text(np.array(0.003), decimals=2) == "3.00e-03"
    assert (fixed(0.003, 2), fixed(0.003, 4), fixed(0.01, 2)) == ("3.00e-03", "0.0030", "0.01")


def test_each_value_is_written_as_the_lesson_commands_write_it():
    values = np.array([0.5, 3e-11, 0.0, -2.5e-7, 1e-4, -0.125, -np.inf])
    assert [cell.strip() for cell in vt.values_text(values).strip("[]").split(",")] == [fixed(v) for v in values]
    assert vt.values_text(np.array(-2.5e-7)) == fixed(-2.5e-7)


# chapter one: a Value's graph, through the same steps


def test_the_lecture_neuron_is_traced_node_by_node_with_its_local_derivatives():
    from models.lessons import neuron
    o = neuron.demo_loss()
    steps = vt.trace(o)
    assert [(s.name, s.output_label) for s in steps] == [
        ("tanh", "o"), ("+", "n"), ("+", "x1*w1 + x2*w2"), ("*", "x1*w1"), ("*", "x2*w2")]
    tanh, _, _, x1w1, x2w2 = steps
    assert tanh.rule == "∂out/∂x = 1 − out²" and tanh.grad == 1.0 and tanh.scope == ""
    assert [name for name, _ in tanh.saved] == ["∂out/∂x"]
    assert tanh.saved[0][1] == pytest.approx(0.5)  # 1 − o², o = 1/√2
    # x1·w1 saved ∂out/∂a = w1 = −3 and ∂out/∂b = x1 = 2; it hands on g · each: −1.5 to x1, 1 to w1
    assert x1w1.saved == [("∂out/∂a", -3.0), ("∂out/∂b", 2.0)] and x1w1.grad == pytest.approx(0.5)
    assert [(i.label, i.role, i.grad) for i in x1w1.inputs] == [
        ("x1", "a", pytest.approx(-1.5)), ("w1", "b", pytest.approx(1.0))]
    assert [i.grad for i in x2w2.inputs] == [pytest.approx(0.5), 0.0]  # x2 = 0: w2 cannot matter
    assert {leaf.label: leaf.grad for leaf in steps.leaves} == {
        "x1": pytest.approx(-1.5), "w1": pytest.approx(1.0), "x2": pytest.approx(0.5), "w2": 0.0,
        "b": pytest.approx(0.5)}
    assert all(v.grad == 0.0 for v in o.topological_order())  # the trace wrote no gradient
    with pytest.raises(TypeError, match="grad= is for a non-scalar Tensor"):
        vt.trace(o, grad=2.0)
    with pytest.raises(TypeError, match="expected an autograd Tensor or Value, got float"):
        vt.trace(0.5)


def test_the_neurons_text_trace():
    from models.lessons import neuron
    text = vt.format_trace(vt.trace(neuron.demo_loss()))
    assert text.startswith("Backward pass of L = o = 0.707107, step by step as Value.backward runs it.")
    assert "broadcast" not in text and text.count("\nstep ") == 5
    tanh = text.split("\n\n")[1]
    assert tanh.splitlines() == ["step 1/5  tanh", "  rule  ∂out/∂x = 1 − out²", "  uses  ∂out/∂x = 0.5",
                                 "  g     ∂L/∂o  1.0", "  out   ∂L/∂n  0.5"]
    assert "  uses  ∂out/∂a = -3.0\n        ∂out/∂b = 2.0\n  g     ∂L/∂(x1*w1)  0.5\n" \
           "  out   ∂L/∂x1  -1.5\n        ∂L/∂w1  1.0" in text
    assert text.endswith("  x1.grad  -1.5\n  w1.grad  1.0\n  x2.grad  0.5\n  w2.grad  0.0\n  b.grad  0.5")


def test_a_value_trace_is_value_backwards_to_the_bit():
    # the moons demo's loss: 56 Values, 39 of them made by ops, weights used twice (the network, the L2 penalty w·w)
    from models.lessons import moons
    loss = moons.demo_loss()
    order = loss.topological_order()
    steps = vt.trace(loss)
    # its 17 leaves: 9 weights, and 8 constants (the point, the label, the 1 of the margin, α, …), which get none
    assert (len(order), len(steps), len(steps.leaves)) == (56, 39, 9)
    assert [s.output for s in steps] == [v for v in order if v.inputs]  # backward's order, node for node
    loss.backward()
    for s in steps:
        assert s.grad == s.output.grad
        assert [i.grad for i in s.inputs] == [None if isinstance(x, Constant) else local * s.grad
                                              for x, local in zip(s.output.inputs, s.output.local_grads)]
    for leaf in steps.leaves:
        assert leaf.grad == leaf.tensor.grad and not isinstance(leaf.tensor, Constant)
    assert max(leaf.contributions for leaf in steps.leaves) == 3  # in the network once, in w·w twice


def test_a_value_traces_constants_as_the_picture_draws_them_with_no_gradient():
    """The leaves listed "1.grad 1.0", "0.grad" and "α.grad", which the picture draws as constants."""
    from models.lessons import moons
    text = vt.format_trace(vt.trace(moons.demo_loss()))
    leaves = text[text.index("Leaves:"):].splitlines()[1:]
    assert [line.split(".grad")[0].strip() for line in leaves] == [
        f"L{layer}.n{n}.{p}" for layer, n in ((1, 0), (1, 1), (2, 0)) for p in ("w0", "w1", "b")]
    assert "        α: constant: needs no gradient" in text and "∂L/∂α" not in text


@pytest.mark.parametrize("module, first", [("models.neuron", "step 1/5  tanh"), ("models.moons", "step  1/39  +")])
def test_cli_traces_value_modules(module, first):
    run = subprocess.run([sys.executable, "-m", "viz.trace", module], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "as Value.backward runs it" in run.stdout and first in run.stdout and "Leaves:" in run.stdout


def test_html_makes_the_folders_it_is_written_into(tmp_path, capsys):
    if not shutil.which("dot"):
        pytest.skip("the page draws the graph with Graphviz's dot")
    out = tmp_path / "new" / "deeper" / "t.html"
    assert vt.main([MODULE, "--html", str(out)]) == 0
    assert "<svg" in out.read_text(encoding="utf-8")
    assert sorted(p.name for p in out.parent.iterdir()) == ["t.html"]


def test_html_on_a_full_disk_is_one_line_and_leaves_no_part_file(tmp_path, capsys, monkeypatch):
    if not shutil.which("dot"):
        pytest.skip("the page draws the graph with Graphviz's dot")

    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(self))
    monkeypatch.setattr(Path, "write_text", full)
    assert vt.main([MODULE, "--html", str(tmp_path / "t.html")]) == 1
    assert capsys.readouterr().err == f"viz.trace: error: cannot write {tmp_path / 't.html'}: No space left on device\n"
    assert list(tmp_path.iterdir()) == []


def test_the_help_says_what_double_seeds_for_a_tensor_and_for_a_value(capsys):
    with pytest.raises(SystemExit):
        vt.main(["--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "the backward of ½‖g‖² for a Tensor's g (LEAF receives H g), of g itself for a Value's" in help_text
    from models.lessons import neuron
    grad = vt.gradient_of(neuron.demo_loss(), "w1")
    assert vt.trace(grad)[0].grad == 1.0  # a Value's g is traced from ∂g/∂g = 1: g's own backward


def test_a_double_backward_is_traced_as_the_engine_runs_it(capsys):
    grad = vt.gradient_of(demo_module.demo_loss(), "block.ln.weight")
    steps = vt.trace(grad, grad.data)
    assert {s.scope for s in steps} >= {"backward 1: CrossEntropy", "block.ln.backward 3: LayerNorm"}
    assert "AddAt" in {s.name for s in steps}
    leaves = {leaf.label: leaf.grad for leaf in steps.leaves}
    grad.backward(grad.data)  # what the trace walked, for real: ½‖g‖²'s gradient, H g on the parameters
    for t in topological_order(grad):
        if t.is_leaf and t.name in leaves:
            np.testing.assert_array_equal(leaves[t.name], t.grad)
    assert vt.main([MODULE, "--double", "block.ln.weight", "--max-values", "0"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Backward pass of L = ½‖∂loss/∂block.ln.weight‖², step by step as Tensor.backward runs it.")
    assert "[backward 1: CrossEntropy]" in out and "block.ln.weight.grad" in out


def test_the_text_names_an_expressions_gradient_in_brackets_and_counts_the_parts_of_a_sum():
    from models.lessons import neuron, tiny
    text = vt.format_trace(vt.trace(neuron.demo_loss()))
    assert "  out   ∂L/∂(x1*w1 + x2*w2)  0.5" in text and "∂L/∂x1*w1" not in text
    text = vt.format_trace(vt.trace(tiny.demo_loss()))
    # H1 feeds the FFN and the residual stream: its gradient arrives in two parts
    assert "(part 1 of 2 of its sum)" in text and "(part 2 of 2 of its sum)" in text
    relu = next(s for s in vt.trace(tiny.demo_loss()) if s.name == "ReLU")
    assert relu.rule == "dx = g·1[z > 0]" and [name for name, _ in relu.saved] == ["z (the output)"]
