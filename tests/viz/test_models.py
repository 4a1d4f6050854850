"""viz on the real model modules' demo_loss(): skipped for a module that cannot be imported yet."""
import importlib

import numpy as np
import pytest

from autograd import topological_order
from viz import trace as vt


def demo(name):
    try:
        module = importlib.import_module(name)
    except ImportError as exc:
        pytest.skip(f"{name} cannot be imported: {exc}")
    if not hasattr(module, "demo_loss"):
        pytest.skip(f"{name} defines no demo_loss() yet")
    return module.demo_loss


@pytest.mark.parametrize("name", ["models.bigram", "models.tiny", "models.gpt2"])
def test_trace_matches_the_engine(name):
    loss = demo(name)()
    steps = vt.trace(loss)
    assert [s.op for s in steps] == [t.op for t in topological_order(loss) if t.op is not None]
    loss.backward()
    assert steps.leaves
    for leaf in steps.leaves:
        np.testing.assert_array_equal(leaf.grad, leaf.tensor.grad)
    assert "Leaves:" in vt.format_trace(steps)


@pytest.mark.parametrize("name", ["models.bigram", "models.tiny", "models.gpt2"])
def test_draw(name):
    vg = pytest.importorskip("viz.graph")
    pytest.importorskip("graphviz", reason='pip install -e ".[viz]"')
    loss = demo(name)()
    full, folded = vg.draw(loss), vg.draw(loss, collapse=True)
    assert "dz = p − y" in full.source
    assert len(folded.body) <= len(full.body)
