"""What the pictures say: constants drawn and named as constants, NaN boxes counted, every mark in the legend, the
tiny transformer's intermediates named as the article writes them."""
import re

import numpy as np
import pytest

import autograd as ag
from autograd import Constant, Tensor
from models.lessons import moons, tiny
from viz.graph import CONSTANT, HIGHLIGHT, NONFINITE, draw
from viz.walk import GraphWalk

pytest.importorskip("graphviz")


def node_label(source, name):
    """The HTML label of the node whose bold name is `name`, in a Graphviz source."""
    match = re.search(r'\[label=<(<B>' + re.escape(name) + r'</B>.*?)> [^\n]*\n', source)
    assert match, f"no node named {name}"
    return match.group(0)


def test_the_moons_loss_draws_its_data_labels_and_hyper_parameters_as_named_constants():
    loss = moons.demo_loss()
    loss.backward()
    source = draw(loss).source
    for name, value in (("x1", "0.5000"), ("x2", "-0.2500"), ("−y", "-1.0000"), ("1/n", "1.0000"),
                        ("α", "0.0001")):
        label = node_label(source, name)
        assert f"data {value}" in label and "grad" not in label, label
        assert f'fillcolor="{CONSTANT[0]}"' in label and "dashed" in label, label
    assert node_label(source, "L1.n0.w0").count("grad ") == 1  # a parameter keeps its gradient
    assert not re.search(r"<I>v\d+</I><BR/><FONT[^>]*>data 0\.5000", source)  # no data point as an unnamed leaf


def test_numbers_written_in_a_formula_are_constants():
    w = ag.Value(2.0, name="w")
    out = (1 - w) * 3
    assert [type(x) for x in out.a.inputs] == [Constant, ag.Value] and isinstance(out.b, Constant)


def test_the_tiny_transformers_attention_names_every_intermediate():
    walk = GraphWalk(tiny.demo_loss())
    attention = [walk.label(t) for t in walk.tensors if t.op is not None and t.op.scope == "attn"]
    assert {"Kᵀ", "QKᵀ", "scores"} <= set(attention)
    assert not [label for label in (walk.label(t) for t in walk.tensors) if re.fullmatch(r"t\d+", label)]
    assert "√d" in [walk.label(t) for t in walk.constants]


def test_a_nan_box_counts_its_nans_and_the_legend_names_the_red_border():
    x = Tensor(np.array([1.0, 0.0, -1.0], dtype=np.float32), requires_grad=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        bad = (x * 2.0).log()
    source = draw(bad, highlight=(bad.op,)).source
    assert "1 NaN · 1 inf of 3" in source
    assert f'fillcolor="{NONFINITE[0]}"' in source
    assert "thick red border: the op this picture is about (detect_anomaly's first NaN/inf" in source
    assert "where backward starts" not in source  # the non-finite box is not called a loss
    assert re.search(r'op\d+ \[label=<<B>Log</B>[^\n]* color="' + HIGHLIGHT + '"[^\n]* penwidth=5', source)
