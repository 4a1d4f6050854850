"""viz.anomaly: detect_anomaly's pictures, the graph with the culprit in red and the trace page opening at its step."""
import json
import re
import shutil

import numpy as np
import pytest

import autograd as ag
from autograd import Tensor
from viz.anomaly import pictures
from viz.graph import HIGHLIGHT

pytest.importorskip("graphviz")
needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")


@needs_dot
def test_a_backward_anomaly_gets_the_graph_and_the_trace_page_at_its_step(tmp_path):
    x = Tensor(np.array([1.0, 0.0, 2.0], dtype=np.float32), requires_grad=True)
    with ag.name_scope("layer"):
        loss = (x.sqrt() * 3.0).sum()
    with pytest.raises(ag.AnomalyError) as caught, ag.detect_anomaly(pictures=pictures(tmp_path / "pics")):
        loss.backward()
    message = str(caught.value)
    assert message.splitlines()[0] == "detect_anomaly: backward of Sqrt (step 3 of backward) returned NaN/inf as the gradient for x"
    assert message.endswith(f"\n  graph: {tmp_path / 'pics' / 'anomaly_graph.svg'}\n"
                            f"  trace page: {tmp_path / 'pics' / 'anomaly_trace.html'}")
    svg = (tmp_path / "pics" / "anomaly_graph.svg").read_text()
    sqrt_node = re.search(r'<g id="node\d+" class="node">\s*<title>op\d+</title>(?:(?!</g>).)*Sqrt', svg, re.S)
    assert sqrt_node and f'stroke="{HIGHLIGHT}"' in sqrt_node.group(0) and 'stroke-width="5"' in sqrt_node.group(0)
    # backward ran and stopped at the culprit: the gradient that came into it, and the one it sent x, the
    # non-finite one the title names (x's box said "no grad yet": the picture showed the NaN/inf nowhere)
    assert "backward not run" not in svg
    assert "g into Sqrt: shape (3,) float32, min 3, max 3, 0 NaN, 0 inf" in svg
    assert "g from Sqrt: shape (3,) float32, min 1.061, max inf, 0 NaN, 1 inf" in svg
    assert "no grad yet" not in svg  # nothing below x
    page = (tmp_path / "pics" / "anomaly_trace.html").read_text()
    data = json.loads(re.search(r'<script id="trace-data" type="application/json">(.*?)</script>', page, re.S).group(1))
    assert data["start"] == 3  # the page opens at the culprit's step
    assert data["steps"][2]["name"] == "Sqrt" and data["steps"][2]["scope"] == "layer"


@needs_dot
def test_a_forward_anomaly_gets_the_graph_only(tmp_path):
    x = Tensor(np.array([1.0, 0.0], dtype=np.float32), requires_grad=True)
    with pytest.raises(ag.AnomalyError) as caught, ag.detect_anomaly(pictures=pictures(tmp_path)):
        (x * 2.0).log()
    assert caught.value.anomaly.files == {"graph": str(tmp_path / "anomaly_graph.svg")}
    assert "forward anomaly: Log (red border); output went non&#45;finite" in (tmp_path / "anomaly_graph.svg").read_text()


def test_without_dot_it_writes_the_source_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    x = Tensor(np.array([0.0], dtype=np.float32), requires_grad=True)
    with pytest.raises(ag.AnomalyError) as caught, ag.detect_anomaly(pictures=pictures(tmp_path)):
        x.log()
    assert str(caught.value).endswith(
        f"\n  graph source (install Graphviz's dot to render it): {tmp_path / 'anomaly_graph.dot'}")
    assert (tmp_path / "anomaly_graph.dot").read_text().startswith("digraph backward")


@needs_dot
def test_after_a_checkpoint_the_trace_page_walks_the_whole_pass_to_the_culprit(tmp_path):
    """A checkpoint's backward runs a pass of its recompute inside the outer one: the page is still the outer pass's."""
    import nn

    class Twice(nn.Module):
        def forward(self, t):
            return t * 2.0

    x = Tensor(np.array([1.0, 0.0, 2.0], dtype=np.float32), requires_grad=True)
    loss = (ag.checkpoint(Twice(), x.sqrt()) * 3.0 + 1.0).sum()
    with pytest.raises(ag.AnomalyError) as caught, ag.detect_anomaly(pictures=pictures(tmp_path)):
        loss.backward()
    assert "backward of Sqrt (step 5 of backward)" in str(caught.value)
    assert "trace page: " in str(caught.value) and "not written" not in str(caught.value)
    page = (tmp_path / "anomaly_trace.html").read_text()
    data = json.loads(re.search(r'<script id="trace-data" type="application/json">(.*?)</script>', page, re.S).group(1))
    assert data["start"] == 5
    assert [s["name"] for s in data["steps"]] == ["Sum", "Add", "Mul", "Checkpoint", "Sqrt"]
