"""viz.graph: the picture of the backward graph, and its command line.

Rendering tests need Graphviz's `dot` and skip without it; everything that
checks the graph's content reads the DOT source, which needs only the Python
package `graphviz`.
"""
import errno
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

graphviz = pytest.importorskip("graphviz", reason='the Python package graphviz is not installed: pip install -e ".[viz]"')

import autograd as ag  # noqa: E402
from autograd import Tensor, Value  # noqa: E402
from tests.viz import demo_module  # noqa: E402
from viz import diverge as vd, graph as vg, trace as vt  # noqa: E402
from viz.loading import module_name  # noqa: E402
from viz.walk import GraphWalk  # noqa: E402

MODULE = "tests.viz.demo_module"
REPO = Path(__file__).resolve().parents[2]
needs_dot = pytest.mark.skipif(shutil.which("dot") is None,
                               reason="Graphviz's `dot` is not installed (apt-get install graphviz)")
SVG = "{http://www.w3.org/2000/svg}"


def nodes(graph):
    """Node name -> its attribute text, read from the DOT source (the legend excluded)."""
    found = {}
    for line in graph.body:
        m = re.match(r"\s*(\w+) \[label=(.*)\]\s*$", line, re.S)
        if m and m.group(1) != "legend":
            found[m.group(1)] = m.group(2)
    return found


def edges(graph):
    return [tuple(m.groups()) for line in graph.body if (m := re.match(r"\s*(\w+) -> (\w+)", line))]


def by_prefix(graph, prefix):
    return {k: v for k, v in nodes(graph).items() if re.fullmatch(prefix + r"\d+", k)}


def svg_text(path):
    root = ET.parse(path).getroot()  # raises if the SVG is not well-formed XML
    assert root.tag == SVG + "svg"
    return root, "\n".join(t for el in root.iter(SVG + "text") for t in el.itertext())


# draw()


def test_draw_returns_a_digraph_with_rules_names_shapes_and_legend():
    loss = demo_module.demo_loss()
    g = vg.draw(loss)
    assert isinstance(g, graphviz.Digraph)
    src = g.source
    for text in ("dz = p − y", "dW = scatter-add rows", "dA = G Bᵀ, dB = Aᵀ G", "diag(p) − ppᵀ",
                 "wte.weight", "block.attn.weight", "logits", "(6, 4)", "(2, 3, 6)",
                 "How to read this graph", "constant · no gradient"):
        assert text in src, text
    ops = by_prefix(g, "op")
    walk = GraphWalk(loss)
    assert len(ops) == len(walk.ops) == 10
    assert len(by_prefix(g, "t")) == len(walk.tensors)


def test_before_backward_nodes_say_so_instead_of_showing_zeros():
    src = vg.draw(demo_module.demo_loss()).source
    assert "no grad yet — backward not run" in src
    assert "grad norm =" not in src


def test_after_backward_shows_gradient_norms():
    _, loss = vg.build_demo(MODULE)
    src = vg.draw(loss).source
    assert "no grad yet" not in src
    w = next(t for t in GraphWalk(loss).tensors if t.name == "wte.weight")
    assert f"grad norm = {np.linalg.norm(w.grad.astype(np.float64)):.4g}" in src
    assert "grad 1<" in src  # the loss, small enough to show its value: ∂L/∂L = 1


def test_edges_point_the_way_gradients_flow():
    loss = demo_module.demo_loss()
    g = vg.draw(loss)
    walk = GraphWalk(loss)
    key = {id(t): f"t{i}" for i, t in enumerate(walk.tensors, 1)}
    found = set(edges(g))
    ce = f"op{walk.ops.index(loss.op) + 1}"
    logits = next(t for t in walk.tensors if t.name == "logits")
    assert (key[id(loss)], ce) in found       # loss -> CrossEntropy
    assert (ce, key[id(logits)]) in found     # CrossEntropy -> logits
    assert (ce, key[id(loss)]) not in found
    leaves = {key[id(t)] for t in walk.tensors if t.is_leaf}
    assert not any(a in leaves for a, _ in found)  # nothing flows out of a leaf


def test_saved_arrays_are_marked():
    loss = demo_module.demo_loss()
    g = vg.draw(loss)
    walk = GraphWalk(loss)
    key = {t.name: f"t{i}" for i, t in enumerate(walk.tensors, 1) if t.name}
    drawn = nodes(g)
    assert vg.SAVED in drawn[key["block.attn.weight"]]     # MatMul keeps its operands
    assert vg.SAVED not in drawn[key["block.ln.bias"]]     # LayerNorm does not keep the bias
    ce = drawn[f"op{walk.ops.index(loss.op) + 1}"]
    assert "saves 2 arrays" in ce


def test_draw_after_a_plain_backward_says_the_graph_was_freed():
    loss = demo_module.demo_loss()
    loss.backward()
    src = vg.draw(loss).source
    assert "retain_graph=True" in src and "CrossEntropy" in src
    assert "no grad yet" not in src


def test_draw_without_the_python_package_names_the_fix(monkeypatch):
    monkeypatch.setitem(sys.modules, "graphviz", None)
    with pytest.raises(ImportError, match=re.escape('pip install -e ".[viz]"')):
        vg.draw(demo_module.demo_loss())


def test_draw_rejects_bad_arguments():
    loss = demo_module.demo_loss()
    with pytest.raises(ValueError, match="depth"):
        vg.draw(loss, depth=-1)
    with pytest.raises(ValueError, match="collapse"):
        vg.draw(loss, collapse=0)
    with pytest.raises(TypeError, match="Tensor"):
        vg.draw(np.zeros(3))


# collapse


def test_collapse_gives_one_box_per_module_and_fewer_nodes():
    loss = demo_module.demo_loss()
    full, folded = vg.draw(loss), vg.draw(loss, collapse=True)
    assert len(nodes(folded)) < len(nodes(full))
    boxes = by_prefix(folded, "module")
    names = sorted(re.search(r"<B>([^<]+)</B>", label).group(1) for label in boxes.values())
    assert names == ["block", "lm_head", "wte"]  # block.attn and block.ln fold into block
    ops = by_prefix(folded, "op")
    assert len(ops) == 1 and "CrossEntropy" in next(iter(ops.values()))  # the one op outside any module
    assert "a module folded into one box" in folded.source
    block = next(label for label in boxes.values() if "<B>block</B>" in label)
    assert "attn.weight (4, 4)" in block and "6 ops" in block
    # every edge joins drawn nodes, and no module points at itself
    drawn = set(nodes(folded))
    assert all(a in drawn and b in drawn and a != b for a, b in edges(folded))


def gpt_like_loss(n_blocks=2):
    """Scopes shaped like GPT-2's: transformer.h.<i>.{attn,mlp} inside a block that adds the residuals."""
    rng = np.random.default_rng(1)
    x = Tensor(rng.standard_normal((2, 3)).astype(np.float32), requires_grad=True)
    x.name = "x"
    with ag.name_scope("transformer"):  # the model's own forward records an op too
        x = x + 0.0
    for i in range(n_blocks):
        block = f"transformer.h.{i}"
        w1 = Tensor(rng.standard_normal((3, 3)).astype(np.float32), requires_grad=True)
        w2 = Tensor(rng.standard_normal((3, 3)).astype(np.float32), requires_grad=True)
        w1.name, w2.name = f"{block}.attn.c_attn.weight", f"{block}.mlp.c_fc.weight"
        with ag.name_scope(block):
            with ag.name_scope(f"{block}.attn"):
                a = (x @ w1).tanh()
            x = x + a
            with ag.name_scope(f"{block}.mlp"):
                m = (x @ w2).relu()
            x = x + m
    with ag.name_scope("transformer.ln_f"):
        x = x * 2.0
    return x.sum()


def test_collapse_folds_transformer_blocks_and_takes_a_depth():
    loss = gpt_like_loss()
    boxes = lambda g: sorted(re.search(r"<B>([^<]+)</B>", v).group(1) for v in by_prefix(g, "module").values())
    assert boxes(vg.draw(loss, collapse=True)) == [
        "transformer", "transformer.h.0", "transformer.h.1", "transformer.ln_f"]
    assert boxes(vg.draw(loss, collapse=3)) == [
        "transformer", "transformer.h.0", "transformer.h.1", "transformer.ln_f"]
    assert boxes(vg.draw(loss, collapse=4)) == [
        "transformer", "transformer.h.0", "transformer.h.0.attn", "transformer.h.0.mlp",
        "transformer.h.1", "transformer.h.1.attn", "transformer.h.1.mlp", "transformer.ln_f"]
    assert boxes(vg.draw(loss, collapse=1)) == ["transformer"]


def test_module_of():
    scopes = {"transformer", "transformer.h.0.attn.c_attn", "transformer.wte", "lm_head"}
    assert vg._module_of("transformer.h.0.attn.c_attn", True, scopes) == "transformer.h.0"
    assert vg._module_of("transformer.wte", True, scopes) == "transformer.wte"  # not into "transformer"
    assert vg._module_of("transformer", True, scopes) == "transformer"
    assert vg._module_of("block.ln", True, {"block", "block.ln", "wte"}) == "block"
    assert vg._module_of("", True, scopes) is None
    assert vg._module_of("transformer.h.0.attn", 2, scopes) == "transformer.h"
    # a scope that encloses every other is not a useful box
    assert vg._module_of("model.attn", True, {"model", "model.attn", "model.mlp"}) == "model.attn"


# depth


def test_depth_limits_the_ops_drawn():
    loss = demo_module.demo_loss()
    counts = [len(by_prefix(vg.draw(loss, depth=d), "op")) for d in range(8)]
    assert counts[0] == 0 and counts[1] == 1 and counts[2] == 2
    assert counts == sorted(counts) and counts[3] < 10
    assert len(by_prefix(vg.draw(loss, depth=100), "op")) == 10
    shallow = vg.draw(loss, depth=1)
    assert "<B>CrossEntropy</B>" in shallow.source and "<B>MatMul</B>" not in shallow.source
    assert "⋯ earlier ops" in shallow.source
    assert "⋯ earlier ops" not in vg.draw(loss, depth=100).source
    assert len(by_prefix(vg.draw(loss, collapse=True, depth=2), "module")) == 1  # lm_head


# the command line


def test_module_names_as_users_write_them():
    assert module_name("model.bigram") == "models.bigram"
    assert module_name("models.bigram") == "models.bigram"
    assert module_name("models/bigram.py") == "models.bigram"
    assert module_name("models/lessons/bigram.py") == "models.lessons.bigram"  # the file where it lives
    assert module_name("model/tiny.py") == "models.tiny"
    assert module_name(MODULE) == MODULE


@needs_dot
def test_cli_writes_an_svg_with_rules_names_shapes_and_legend(tmp_path, capsys):
    out = tmp_path / "g.svg"
    assert vg.main([MODULE, "--out", str(out)]) == 0
    assert str(out) in capsys.readouterr().out
    root, text = svg_text(out)
    for label in ("p − y", "scatter-add", "wte.weight", "logits", "(6, 4)", "How to read this graph",
                  "grad norm =", "demo_loss()"):
        assert label in text, label
    assert "no grad yet" not in text
    titles = {el.text for el in root.iter(SVG + "title")}
    assert "legend" in titles


@needs_dot
def test_cli_collapse_renders_fewer_nodes(tmp_path):
    full, folded = tmp_path / "full.svg", tmp_path / "folded.svg"
    assert vg.main([MODULE, "--out", str(full)]) == 0
    assert vg.main([MODULE, "--out", str(folded), "--collapse"]) == 0
    count = lambda p: sum(1 for g in ET.parse(p).getroot().iter(SVG + "g") if g.get("class") == "node")
    assert count(folded) < count(full)
    assert "block" in svg_text(folded)[1]


@needs_dot
def test_cli_png_and_default_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert vg.main([MODULE, "--format", "png", "--depth", "3"]) == 0
    assert (tmp_path / "graph_demo_module.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_dot_format_needs_no_graphviz_program(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(vg.shutil, "which", lambda name: None)
    monkeypatch.chdir(tmp_path)
    assert vg.main([MODULE, "--format", "dot", "--no-backward", "--collapse-depth", "1"]) == 0
    source = (tmp_path / "graph_demo_module.dot").read_text(encoding="utf-8")
    assert source.startswith("digraph") and "no grad yet — backward not run" in source
    assert "graph_demo_module.dot" in capsys.readouterr().out


def test_cli_without_dot_writes_the_source_and_says_how_to_install(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(vg.shutil, "which", lambda name: None)
    out = tmp_path / "g.svg"
    assert vg.main([MODULE, "--out", str(out)]) == vg.NO_DOT_EXIT
    assert not out.exists()
    assert (tmp_path / "g.dot").read_text(encoding="utf-8").startswith("digraph")
    printed = capsys.readouterr()
    assert "g.dot" in printed.out
    assert "apt-get install graphviz" in printed.err and "dot -Tsvg" in printed.err


def test_cli_when_dot_vanishes_from_path(tmp_path, monkeypatch, capsys):
    """`which` said yes but running `dot` fails (PATH changed): the same fallback."""
    monkeypatch.setattr(vg.shutil, "which", lambda name: "/usr/bin/dot")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    out = tmp_path / "g.pdf"
    assert vg.main([MODULE, "--format", "pdf", "--out", str(out)]) == vg.NO_DOT_EXIT
    assert (tmp_path / "g.dot").exists() and not out.exists()
    assert "install Graphviz" in capsys.readouterr().err


def test_jupyter_without_dot_shows_how_to_install_in_place_of_the_picture(tmp_path, monkeypatch):
    """Jupyter shows draw's Digraph through _repr_mimebundle_: without `dot` that raised ExecutableNotFound, a
    traceback that stopped every notebook at its first picture."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    a = Value(2.0, label="a")
    for graph in (vg.draw(demo_module.demo_loss()), vg.draw(a * a)):
        shown = graph._repr_mimebundle_()
        assert list(shown) == ["text/plain"]
        assert "Graphviz's `dot` program is not on PATH" in shown["text/plain"]
        assert "apt-get install graphviz" in shown["text/plain"]


@pytest.mark.parametrize("command", [vg, vt, vd])
def test_cli_unknown_module_is_a_clear_error_naming_the_command(command, capsys):
    """The line named no command (SystemExit's message alone): every other error of theirs starts viz.X: error:."""
    prog = command.__name__
    assert command.main(["no_such_module_for_viz"]) == 1
    assert capsys.readouterr().err == (f"{prog}: error: cannot import 'no_such_module_for_viz' (No module named "
                                       "'no_such_module_for_viz'). Pass a dotted module name such as models.bigram "
                                       "and run from the repository root (or pip install -e . first).\n")
    for name in ("", "./", ".tiny"):  # import_module's own ValueError and TypeError, once
        assert command.main([name]) == 1
        assert capsys.readouterr().err.startswith(f"{prog}: error: cannot import {name!r}: pass a dotted module name")


@needs_dot
def test_cli_takes_the_format_from_the_suffix_of_out(tmp_path):
    """--out g.png once held SVG text (the default format), which no image viewer opens."""
    assert vg.main([MODULE, "--depth", "2", "--out", str(tmp_path / "g.png")]) == 0
    assert (tmp_path / "g.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert vg.main([MODULE, "--depth", "2", "--out", str(tmp_path / "g.pdf")]) == 0
    assert (tmp_path / "g.pdf").read_bytes()[:5] == b"%PDF-"


def test_cli_draws_a_model_file_of_your_own_by_its_path(tmp_path, monkeypatch):
    """A .py outside the current folder is loaded from its file, not turned into the dotted name tmp.….mine."""
    (tmp_path / "mine.py").write_text("import numpy as np\nfrom autograd import Tensor\n\ndef demo_loss():\n"
                                      "    w = Tensor(np.ones(2, np.float32), requires_grad=True)\n"
                                      "    return (w * w).sum()\n")
    monkeypatch.chdir(Path(vg.__file__).parents[1])
    out = tmp_path / "g.dot"
    assert vg.main([str(tmp_path / "mine.py"), "--out", str(out)]) == 0
    assert out.read_text(encoding="utf-8").startswith("digraph") and "mine.demo_loss()" in out.read_text()


@pytest.mark.parametrize("argv, message", [
    (["--depth", "-1"], "--depth must be at least 0, got -1"),
    (["--collapse-depth", "0"], "--collapse-depth must be at least 1, got 0"),
    (["--format", "gif"], "argument --format: invalid choice: 'gif'"),
    (["--out", "file/g.svg"], "argument --out: cannot make file/g.svg: {tmp}/file is a file"),
    (["--out", "loop/g.svg"], "argument --out: cannot use loop/g.svg: Too many levels of symbolic links"),
    (["--out", "."], "argument --out: . is a folder; give a file name"),
    (["--out", "g" * 300], "argument --out: cannot use ggg"),
    (["--out", "g.txt"], "--out g.txt: the format comes from the suffix, .svg, .png, .pdf or .dot"),
    (["--format", "png", "--out", "g.svg"], "--format png but --out g.svg names a .svg file; make the two agree"),
])
def test_cli_mistakes_cost_one_line_before_any_work(argv, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "file").write_text("")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    message = message.format(tmp=tmp_path)
    before = sorted(tmp_path.iterdir())
    with pytest.raises(SystemExit) as exit_:
        vg.main(["no_such_module_for_viz"] + argv)  # parse errors come first: the module is never imported
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"python -m viz.graph: error: {message}") and err.count("\n") == 1
    assert sorted(tmp_path.iterdir()) == before


def test_a_write_the_disk_refuses_is_one_line(tmp_path, monkeypatch, capsys):
    def refuse(self, *args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system", str(self))
    monkeypatch.setattr(Path, "write_text", refuse)
    out = tmp_path / "sub" / "g.dot"
    assert vg.main([MODULE, "--format", "dot", "--out", str(out)]) == 1
    assert capsys.readouterr().err == f"viz.graph: error: cannot write {out}: Read-only file system\n"


def test_python_dash_m_entry_point(tmp_path):
    out = tmp_path / "g.dot"
    run = subprocess.run([sys.executable, "-m", "viz.graph", MODULE, "--format", "dot", "--out", str(out)],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert out.read_text(encoding="utf-8").startswith("digraph")


# what the picture tells a learner


def test_small_tensors_show_data_and_grad_and_large_ones_the_norm():
    # a 2×2 product is small and shows its four numbers; a 5×4 tensor is large and shows its gradient norm
    a = Tensor(np.array([[1.0, 2.0], [3.0, 4.0]]), requires_grad=True)
    b = Tensor(np.array([[0.5, -1.0], [2.0, 0.25]]), requires_grad=True)
    a.name, b.name = "a", "b"
    loss = (a @ b).sum()
    loss.backward(retain_graph=True)
    drawn = nodes(vg.draw(loss))
    key = {t.name: f"t{i}" for i, t in enumerate(GraphWalk(loss).tensors, 1) if t.name}
    # ∂/∂a = 1 · bᵀ summed per row: row sums of b = (−0.5, 2.25) in every row of a's gradient
    assert "data [1, 2]" in drawn[key["a"]] and "[3, 4]" in drawn[key["a"]]
    assert "grad [-0.5, 2.25]" in drawn[key["a"]]
    big = Tensor(np.ones((5, 4)), requires_grad=True)
    big_loss = (big * 2.0).sum()
    big_loss.backward(retain_graph=True)
    label = nodes(vg.draw(big_loss))["t1"]
    assert "data [" not in label and "grad norm = 8.944" in label  # ∂(Σ 2x)/∂x = 2 on 20 entries: 2√20


def test_matmul_inputs_are_labelled_a_and_b_and_targets_and_ids_are_constant_nodes():
    from models.lessons import bigram
    loss = bigram.demo_loss()
    g = vg.draw(loss)
    walk = GraphWalk(loss)
    key = {t.name: f"t{i}" for i, t in enumerate(walk.tensors, 1) if t.name}
    matmul = next(f"op{i}" for i, op in enumerate(walk.ops, 1) if op.name == "MatMul")
    labelled = {(m.group(1), m.group(2)): m.group(3) for line in g.body
                if (m := re.match(r"\s*(\w+) -> (\w+) \[.*label=(\w+)", line))}
    assert labelled[(matmul, key["E[cur]"])] == "A" and labelled[(matmul, key["W_U"])] == "B"
    constants = {k: v for k, v in nodes(g).items() if re.fullmatch(r"op\d+c\d+", k)}
    names = sorted(re.search(r"<B>(\w+)</B>", v).group(1) for v in constants.values())
    assert names == ["ids", "targets"]
    assert all("(36,) int64" in v for v in constants.values())
    assert "mean over 36 rows: × 1/36" in g.source  # cross-entropy's 1/B


def test_arrows_carry_the_input_names_each_op_declares():
    # a - b names x and y; concat numbers its one name x₁, x₂; softmax names z; exp's one generic x goes unsaid
    a, b = Tensor(np.ones(2), requires_grad=True), Tensor(np.ones(2), requires_grad=True)
    loss = ag.concat([(a - b).exp(), b.softmax()]).sum()
    g = vg.draw(loss)
    walk = GraphWalk(loss)
    tkey, okey = vg.node_keys(walk)
    op = {o.name: o for o in walk.ops}
    labels = {(m.group(1), m.group(2)): m.group(4) or "" for line in g.body
              if (m := re.match(r'\s*(\w+) -> (\w+)(?: \[.*?label=("?)([^\s"]+)\3)?', line))}

    def arrow(name, x):
        return labels[(okey[id(walk.output_of[id(op[name])])], tkey[id(x)])]  # an op's key is its output's

    assert arrow("Sub", a) == "x" and arrow("Sub", b) == "y"
    assert [arrow("Concat", x) for x in walk.output_of[id(op["Concat"])].inputs] == ["x₁", "x₂"]
    assert arrow("Softmax", b) == "z"
    assert arrow("Exp", walk.output_of[id(op["Sub"])]) == ""


def test_legend_lists_only_what_the_picture_holds():
    from models.lessons import bigram
    before = vg.draw(bigram.demo_loss()).source   # no module boxes, no gradients yet
    assert "a module folded into one box" not in before and "size (L2 norm)" not in before
    assert "input that needs no gradient" in before and "orange border" in before
    _, loss = vg.build_demo("models.bigram")
    after = vg.draw(loss).source
    assert "size (L2 norm)" in after
    folded = vg.draw(gpt_like_loss(), collapse=True).source
    assert "a module folded into one box" in folded
    a = Tensor(np.ones((2, 2)), requires_grad=True)
    plain = vg.draw((a @ a).sum()).source  # nothing constant, nothing saved by a leaf-free op, no modules
    assert "input that needs no gradient" not in plain and "a module folded" not in plain


def test_draw_value_is_micrographs_picture_with_local_derivatives():
    from models.lessons import neuron
    o = neuron.demo_loss()
    o.backward()
    g = vg.draw(o)
    drawn = nodes(g)
    by_label = {re.search(r"<B>([^<]+)</B>", v).group(1): v for k, v in drawn.items() if k.startswith("v")}
    assert "data 0.7071" in by_label["o"] and "grad 1.0000" in by_label["o"]
    assert "data 2.0000" in by_label["x1"] and "grad -1.5000" in by_label["x1"]
    assert "data -3.0000" in by_label["w1"] and "grad 1.0000" in by_label["w1"]
    assert "∂out/∂x = 1 − out²" in g.source and "∂out/∂a = b, ∂out/∂b = a" in g.source
    # the arrow from x1*w1's op to x1 carries ∂(x1·w1)/∂x1 = w1 = −3; to w1, x1 = 2; tanh's is 1 − o² = 0.5
    labels = sorted(m.group(1) for line in g.body if (m := re.search(r'label="× ([^"]+)"', line)))
    assert labels == sorted(["0.5", "1", "1", "1", "1", "-3", "2", "1", "0"])
    assert "where backward starts: grad = 1" in g.source and "parameter" not in g.source


def test_draw_value_writes_a_tiny_gradient_as_itself_not_as_zero():
    """A saturated tanh (micrograd's lesson on vanishing gradients): its input's gradient 1 − tanh²(−8) = 4.5e-7
    was drawn 'grad 0.0000', and one further down 'grad -0.0000', beside an arrow labelled × 4.501e-07."""
    from autograd import Value
    x, w = Value(-4.0, label="x"), Value(2.0, label="w")
    n = x * w
    n.label = "n"
    o = n.tanh()
    o.label = "o"
    o.backward()
    by_label = {re.search(r"<B>([^<]+)</B>", v).group(1): v for k, v in nodes(vg.draw(o)).items()
                if k.startswith("v")}
    assert "data -8.0000" in by_label["n"] and "grad 4.50e-07" in by_label["n"]
    assert "grad 9.00e-07" in by_label["x"] and "grad -1.80e-06" in by_label["w"]
    assert "data 0.0000" in vg.draw(Value(0.0) * 1).source  # exact zero stays 0.0000


@needs_dot
def test_cli_draws_the_lecture_neuron(tmp_path):
    out = tmp_path / "neuron.svg"
    assert vg.main(["models.neuron", "--out", str(out)]) == 0
    _, text = svg_text(out)
    for label in ("tanh", "x1*w1", "grad -1.5000", "data 0.7071", "× -3", "models.neuron.demo_loss() = 0.707107"):
        assert label in text, label


def test_grads_replaces_each_gradient_with_the_lines_given_as_the_boxs_last_lines():
    # what the trace page draws on: every box that takes a gradient ends in the lines it is handed
    a = Tensor(np.array([[1.0, 2.0], [3.0, 4.0]]), requires_grad=True)
    a.name = "a"
    loss = ag.cross_entropy(a, np.array([0, 1]))
    loss.backward(retain_graph=True)
    drawn = nodes(vg.draw(loss, grads=lambda t: [f"room for {t.name or 'the loss'}", "second line"]))
    key = {t.name: k for k, t in zip(vg.node_keys(GraphWalk(loss))[0].values(), GraphWalk(loss).tensors)}
    for label in (drawn[key["a"]], drawn[key[None]]):
        assert label.split("</FONT>>")[0].endswith("second line") and "grad [" not in label  # the label's end
    assert "room for a" in drawn[key["a"]] and "room for the loss" in drawn[key[None]]
    assert not any("room for" in v for k, v in drawn.items() if re.fullmatch(r"op\d+c\d+", k))  # targets: none
    v = Value(2.0, name="v")
    assert "room for v" in nodes(vg.draw(v * v, grads=lambda n: [f"room for {n.name}"]))["v1"]


# --double: a gradient drawn as a graph of its own

def test_gradient_of_is_the_gradient_with_a_graph_of_backwards_ops_named_by_step():
    loss = demo_module.demo_loss()
    grad = vg.gradient_of(loss)  # the first named leaf the forward read: wte.weight
    assert grad.name == "∂loss/∂wte.weight" and grad.requires_grad
    params = demo_module.parameters()
    demo_module.demo_loss(params).backward()
    np.testing.assert_allclose(grad.data, params["wte.weight"].grad, rtol=1e-5, atol=1e-7)
    scopes = {op.scope for op in GraphWalk(grad).ops}
    assert "backward 1: CrossEntropy" in scopes and "lm_head.backward 2: MatMul" in scopes
    assert any(s.startswith("block.ln.backward") and s.endswith("LayerNorm") for s in scopes)
    with pytest.raises(vg.LeafError, match="^no leaf nope below the loss; name one of its leaves: wte.weight, "):
        vg.gradient_of(demo_module.demo_loss(), "nope")  # a ValueError a notebook can catch, not a SystemExit


def test_double_takes_no_constant_for_its_leaf():
    """moons' first named leaf is α, the L2 penalty's constant, which the picture draws with no gradient."""
    from models.lessons import moons
    assert vg.gradient_of(moons.demo_loss()).name == "∂loss/∂L2.n0.b"
    with pytest.raises(vg.LeafError, match="^no leaf α below the loss; name one of its leaves: L2.n0.b, L2.n0.w1, "
                                           "L2.n0.w0, L1.n1.b, L1.n1.w1, L1.n1.w0, L1.n0.b, L1.n0.w1, L1.n0.w0$"):
        vg.gradient_of(moons.demo_loss(), "α")


CONSTANT_GRADIENT = """import numpy as np
import autograd as ag


def demo_loss():
    w = ag.Tensor(np.ones(3), requires_grad=True)
    w.name = "w"
    return (w * 3.0).sum()
"""


@pytest.mark.parametrize("command", [vg, vt])
def test_a_leaf_double_cannot_take_is_the_commands_one_line(command, tmp_path, capsys):
    """gradient_of raised SystemExit: the line came without the "viz.graph: error:" every other error has."""
    prog, out = command.__name__, tmp_path / "g.dot"
    picture = ["--out", str(out)] if command is vg else []
    assert command.main([MODULE, "--double", "nope", *picture]) == 1
    assert capsys.readouterr() == ("", f"{prog}: error: --double: no leaf nope below the loss; name one of its "
                                       "leaves: wte.weight, block.ln.bias, block.ln.weight, block.attn.weight\n")
    constant = tmp_path / "constant.py"
    constant.write_text(CONSTANT_GRADIENT, encoding="utf-8")
    assert command.main([str(constant), "--double", *picture]) == 1
    assert capsys.readouterr() == ("", f"{prog}: error: --double: ∂t4/∂w does not depend on anything that requires "
                                       "grad: it is a constant, with no graph to draw\n")
    assert not out.exists()


def test_build_double_leaves_a_hessian_vector_product_on_the_leaf():
    name, grad = vg.build_double(MODULE, "block.attn.weight")
    leaf = next(t for t in GraphWalk(grad).tensors if t.name == "block.attn.weight")
    params = demo_module.parameters(dtype=np.float64)

    def loss_of(w):
        return demo_module.demo_loss({**params, "block.attn.weight": w})
    _, hv = ag.hvp(loss_of, params["block.attn.weight"], grad.data.astype(np.float64))
    np.testing.assert_allclose(leaf.grad, hv.data, rtol=1e-4, atol=1e-6)  # ∂(½‖g‖²)/∂W = H g, float32 vs 64


def test_the_double_of_a_value_is_its_second_derivative():
    from models.lessons import neuron
    o = neuron.demo_loss()
    grad = vg.gradient_of(o, "w1")
    assert isinstance(grad, Value) and grad.name == "∂o/∂w1"
    x1, d = 2.0, 1 - o.data ** 2
    assert grad.data == pytest.approx(x1 * d, rel=1e-12)
    grad.backward()
    w1 = next(v for v in grad.topological_order() if v.name == "w1")
    assert w1.grad == pytest.approx(x1 * -2 * o.data * d * x1, rel=1e-12)  # ∂²o/∂w1² = x1²·(−2o)(1 − o²)


@needs_dot
def test_cli_double_draws_the_gradients_own_graph(tmp_path):
    out = tmp_path / "double.svg"
    assert vg.main([MODULE, "--double", "block.ln.bias", "--out", str(out)]) == 0
    _, text = svg_text(out)
    for label in ("∂loss/∂block.ln.bias", "create_graph=True", "backward 1: CrossEntropy", "AddAt",
                  "dx = g, dy = g[key]", "grad norm ="):
        assert label in text, label
    assert "no grad yet" not in text
    assert vg.main(["models.neuron", "--double", "--no-backward", "--out", str(tmp_path / "n.svg")]) == 0
    assert "no grad yet" not in svg_text(tmp_path / "n.svg")[1]  # a Value's box shows its grad, 0 before


def test_the_double_pictures_title_says_what_it_holds_in_words_a_png_draws(tmp_path):
    """The title said "boxed by step" over a Value's graph, which has no boxes, and "½‖g‖²", which a PNG's
    default font draws as "½llgll²" (the boxes write "grad norm" for that reason)."""
    def drawn(*argv):
        out = tmp_path / "double.dot"
        assert vg.main([*argv, "--double", "--out", str(out)]) == 0
        source = out.read_text(encoding="utf-8")
        return re.search(r'^\tlabel="(.*create_graph=True.*)"$', source, re.M).group(1), source

    title, source = drawn(MODULE)
    assert "backward's ops, boxed by step, are ops" in title and "subgraph cluster_" in source
    assert title.endswith("after backward (from ½ norm(g)²)") and "‖" not in title
    title, source = drawn("models.neuron")
    assert "backward's ops are ops like any other" in title and "subgraph cluster_" not in source


def test_a_values_grad_that_is_a_value_is_drawn_by_its_number():
    """After backward(create_graph=True) a Value's grad is a Value, which '{:.4f}' refused: draw() raised."""
    from autograd import Value
    from viz.graph import grad_rows
    x = Value(0.5)
    x.tanh().backward(create_graph=True)
    assert grad_rows(x, x.grad) == ["grad 0.7864"]
