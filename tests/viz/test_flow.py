"""Gradient shares (viz.flow), checked on the tiny transformer against a separate backward pass through each
branch, and drawn: on the graph's arrows, on GPT-2's collapsed blocks and in the trace page."""
import re
from decimal import Decimal

import numpy as np
import pytest

pytest.importorskip("graphviz", reason='the Python package graphviz is not installed: pip install -e ".[viz]"')

import models.gpt.gpt2 as gpt2  # noqa: E402
import models.lessons.bigram as bigram  # noqa: E402
import models.lessons.tiny as tiny  # noqa: E402
from autograd import Tensor, topological_order  # noqa: E402
from tests.viz.test_graph import needs_dot  # noqa: E402
from viz import graph as vg  # noqa: E402
from viz.flow import Flow, share, shares_text  # noqa: E402
from viz.trace import trace  # noqa: E402
from viz.trace_page import page_steps  # noqa: E402


def summed(loss, flow):
    return [t for t in topological_order(loss) if len(flow.parts(t)) > 1]


def through_one_branch(loss, t, keep):
    """∂L/∂t by a backward pass of its own in which every op reading `t` but `keep` reads a detached copy:
    the gradient that reaches t through that branch alone."""
    readers = [x.op for x in topological_order(loss) if x.op is not None and any(i is t for i in x.op.inputs)]
    saved = {id(op): op.inputs for op in readers}
    cut = t.detach()
    for op in readers:
        if op is not keep:
            op.inputs = tuple(cut if i is t else i for i in op.inputs)
    for x in topological_order(loss):
        x.grad = None
    if not t.is_leaf:
        t.retain_grad()
    try:
        loss.backward(retain_graph=True)
    finally:
        for op in readers:
            op.inputs = saved[id(op)]
    return t.grad


def test_each_part_on_the_tiny_transformer_is_a_backward_pass_through_its_branch_alone():
    loss = tiny.demo_loss()
    flow = Flow(loss)
    sums = summed(loss, flow)
    assert {t.name for t in sums} == {"E", "H0", "H1"}  # the tied table, and the two residual streams
    for t in sums:
        for op, part in flow.parts(t):
            np.testing.assert_array_equal(part, through_one_branch(loss, t, op))
        assert abs(sum(s for _, s in flow.shares(t)) - 1) < 1e-12


def test_the_tiny_transformers_shares_a_learner_can_check():
    loss = tiny.demo_loss()
    flow = Flow(loss)
    by_name = {t.name: t for t in summed(loss, flow)}
    parts = {op.name: part for op, part in flow.parts(by_name["E"])}
    # 你 is not in the input: its row of ∂L/∂E comes through the tied head alone, the article's (p(你) − 1)·h
    assert not parts["Embedding"][tiny.TARGET_ID].any()
    np.testing.assert_allclose(parts["Transpose"][tiny.TARGET_ID], [-0.915189, 0.915189], atol=5e-7)
    shares = {op.name: s for op, s in flow.shares(by_name["E"])}
    # the lookup's part crossed two LayerNorms over d = 2, which pass almost nothing: the head carries it all
    assert shares["Transpose"] > 1 - 1e-9 and 0 < shares["Embedding"] < 1e-9
    skip = [s for op, s in flow.shares(by_name["H0"]) if op.name == "Add"]
    assert skip[0] > 1  # the skip carries more than the total: the attention's parts cancel some of it


def test_shares_add_up_to_one_and_cancellation_is_negative():
    x = Tensor(np.array([1.0, 2.0]), requires_grad=True)
    loss = (x * 3.0 + x * -1.0).sum()  # parts 3 and −1 of a total 2
    assert [s for _, s in Flow(loss).shares(x)] == [1.5, -0.5]
    assert share(np.zeros(2), np.zeros(2)) is None and shares_text([None, None]) == ["—", "—"]


def test_the_shares_of_a_sum_are_written_to_one_place_so_that_the_parts_shown_add_up_to_1():
    # GPT-2's block 0 (3 significant digits each read "skip 1 · attn -0.000559 · mlp 0.00102", 1.000461)
    assert shares_text([0.9995342579446457, -0.0005588250740405824, 0.0010245675603180306]) == [
        "0.999534", "-0.000559", "0.001025"]
    # tiny's H0: at the smallest part's third digit, the 5th place, they show 0.99999; the 6th adds up
    assert shares_text([1.2328700692935701, -0.010405791714082473, -0.0025759728486433125,
                        -0.21988830473084436]) == ["1.232870", "-0.010406", "-0.002576", "-0.219888"]
    # a part under the 6th place is written apart, not as 0; three thirds cannot add up at any place
    assert shares_text([0.9999999999179127, 8.208720307098638e-11]) == ["1.000", "8.21e-11"]  # no 0.000000 for it
    assert shares_text([5e-7, 0.9999995]) == ["5e-07", "1.000000"]  # it rounds to 0.000000: not written so
    assert shares_text([0.573, 0.427]) == ["0.573", "0.427"] and shares_text([1 / 3] * 3) == ["0.333333"] * 3


def test_the_arrows_say_each_parts_share_and_the_path_to_the_leaf_is_red():
    loss = tiny.demo_loss()
    vg.keep_gradients(loss)
    flow = Flow(loss)
    e = next(t for t in summed(loss, flow) if t.name == "E")
    graph = vg.draw(loss, flow=flow, flow_to=e)
    labels = {}
    for line in graph.body:
        m = re.match(r"\s*(\w+) -> (\w+) \[.*label=\"([^\"]*)\"", line)
        if m and "share" in m.group(3):
            labels.setdefault(m.group(2), []).append(float(m.group(3).rsplit("share ", 1)[1]))
    assert len(labels) == 3  # E, H0, H1
    for values in labels.values():
        assert abs(sum(values) - 1) < 1e-6  # written to one place, the parts shown add up to 1
    red = [(a, b) for line in graph.body if vg.HIGHLIGHT in line and "penwidth=3" in line
           for a, b in [re.match(r"\s*(\w+) -> (\w+)", line).groups()]]
    assert len(red) == 2 * len(flow.path(e)) == 8  # loss → CrossEntropy → … → Transpose → E: four ops
    assert [op.name for op, _ in flow.path(e)] == ["CrossEntropy", "GetItem", "MatMul", "Transpose"]


def test_gpt2s_blocks_split_into_skip_attention_and_mlp_exactly():
    loss = gpt2.demo_loss()
    flow = Flow(loss)
    blocks = flow.blocks()
    assert list(blocks) == ["transformer.h.0", "transformer.h.1"]
    for x, shares in blocks.values():
        assert set(shares) == {"skip", "attn", "mlp"}
        assert abs(sum(shares.values()) - 1) < 1e-6
    # the split of block 1's input, from the parts the engine added: skip = ∂L/∂(block output), attn = what
    # ln_1 sent the input, mlp = what ln_2 sent the stream after attention
    x, shares = blocks["transformer.h.1"]
    parts = {op.scope: part for op, part in flow.parts(x)}
    assert shares["attn"] == share(parts["transformer.h.1.ln_1"], flow.total(x))
    wte = next(t for t in topological_order(loss) if t.name == "transformer.wte.weight")
    tied = {op.scope: s for op, s in flow.shares(wte)}
    assert set(tied) == {"transformer.wte", "lm_head"} and abs(sum(tied.values()) - 1) < 1e-6


def test_the_collapsed_gpt2_picture_names_each_blocks_split_and_the_tied_tables_shares():
    loss = gpt2.demo_loss()
    vg.keep_gradients(loss)
    source = vg.draw(loss, collapse=True, flow=True).source
    splits = re.findall(r"into the block's input: skip ([\d.]+) · attn ([-\d.]+) · mlp ([-\d.]+)", source)
    assert splits == [("0.98587", "0.00420", "0.00993"), ("0.999534", "-0.000559", "0.001025")]
    for shown in splits:  # what docs/jacobian_diverge_flow.md quotes: shown to one place, they add up to 1
        assert sum(map(Decimal, shown)) == 1
    assert len(re.findall(r'-> t\d+ \[label="W · share [\d.]+"', source)) == 1  # the lookup's arrow into wte
    assert re.search(r'label="share [\d.]+"', source)  # the head's


@needs_dot
def test_the_command_draws_the_flow_to_a_leaf(tmp_path, capsys):
    out = tmp_path / "flow.svg"
    assert vg.main(["models.tiny", "--flow", "E", "--out", str(out)]) == 0
    svg = out.read_text()
    assert "the path to E in red" in svg and "share 1" in svg


def test_the_flow_picture_is_named_apart_from_the_plain_graph(tmp_path, monkeypatch):
    """Drawn one after the other with their default names, the flow picture does not replace the plain graph."""
    monkeypatch.chdir(tmp_path)
    assert vg.main(["models.tiny", "--format", "dot"]) == 0
    assert vg.main(["models.tiny", "--flow", "E", "--format", "dot"]) == 0
    assert sorted(f.name for f in tmp_path.iterdir()) == ["flow_tiny.dot", "graph_tiny.dot"]
    assert "share" in (tmp_path / "flow_tiny.dot").read_text() and "share" not in (tmp_path / "graph_tiny.dot").read_text()


def test_a_leaf_the_graph_lacks_is_refused_with_the_names_it_has(capsys):
    assert vg.main(["models.tiny", "--flow", "Z", "--format", "dot", "--out", "/dev/null"]) == 1
    err = capsys.readouterr().err
    assert "--flow Z: no tensor of that name" in err and "W_Q" in err


def test_flow_without_backward_is_refused_at_parse_time(capsys):
    with pytest.raises(SystemExit):
        vg.main(["models.tiny", "--flow", "--no-backward"])
    assert "drop --no-backward" in capsys.readouterr().err


def test_the_trace_pages_parts_carry_their_shares():
    loss = tiny.demo_loss()
    data = page_steps(trace(loss))
    by_tensor = {}
    for step in data["steps"]:
        for entry in step["inputs"]:
            if "part" in entry and entry["part"][1] > 1:
                by_tensor.setdefault(entry["key"], []).append(float(entry["share"]))
    assert len(by_tensor) == 3
    for values in by_tensor.values():
        assert abs(sum(values) - 1) < 1e-6  # the parts of a sum written as the picture writes them


def test_a_graph_with_no_summed_gradient_says_so_in_its_legend_rather_than_explain_shares_it_lacks():
    """The bigram's tensors each feed one op: no arrow has a share, so its legend explains no 'share 0.7'."""
    loss = bigram.demo_loss()
    vg.keep_gradients(loss)
    source = vg.draw(loss, flow=True).source
    assert not re.search(r'label="[^"]*share \d', source)
    assert "share 0.7" not in source and "no gradient here is a sum of parts" in source
    loss = tiny.demo_loss()
    vg.keep_gradients(loss)
    source = vg.draw(loss, flow=True).source
    assert "share 0.7" in source and "no gradient here is a sum of parts" not in source
