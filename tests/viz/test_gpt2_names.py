"""GPT-2's intermediates by their names in every view: the picture, the folded picture and the trace."""
import html
import re

import pytest

from models.gpt import gpt2
from viz import trace as vt

vg = pytest.importorskip("viz.graph")
pytest.importorskip("graphviz", reason='pip install -e ".[viz]"')


def labels(graph):
    return html.unescape(graph.source)


def test_the_picture_shows_every_intermediate_by_name():
    source = labels(vg.draw(gpt2.demo_loss()))
    for name in ("transformer.h.0.ln_1(x)", "transformer.h.0.attn.q", "transformer.h.0.attn.k",
                 "transformer.h.0.attn.v", "transformer.h.1.attn.y", "transformer.h.0.x",
                 "transformer.h.1(x)", "transformer.ln_f(x)", "logits"):
        assert f"<B>{name}</B>" in source, name
    assert not re.search(r"<I>t\d", source)  # no tensor is left as t49, t60, …


def test_the_folded_picture_names_the_residual_stream_between_the_blocks():
    source = labels(vg.draw(gpt2.demo_loss(), collapse=True))
    for name in ("transformer.wte(ids)", "transformer.emb", "transformer.h.0(x)", "transformer.h.1(x)",
                 "transformer.ln_f(x)", "logits"):
        assert f"<B>{name}</B>" in source, name
    assert not re.search(r"<I>t\d", source)


def test_the_trace_names_what_each_step_receives_and_sends():
    text = vt.format_trace(vt.trace(gpt2.demo_loss()))
    assert "g     ∂L/∂transformer.h.1.attn.y  (2, 2, 8, 4)" in text
    for name in ("transformer.h.1.attn.q", "transformer.h.1.attn.k", "transformer.h.1.attn.v",
                 "transformer.h.0(x)", "transformer.h.0.ln_1(x)"):
        assert f"∂L/∂{name}  " in text, name
    assert not re.search(r"∂L/∂t\d", text)  # no t49, t60, …
