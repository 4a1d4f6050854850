"""viz.trace --html: one self-contained page, stepped through in a real headless Chromium.

The browser test needs Debian's `chromium` (.ci/run installs it where missing)
and the Python package `playwright` (the dev extra), which drives that browser
and downloads none of its own. Without either it skips, saying which.
"""
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from models import tiny
from viz import trace as vt
from viz.graph import keep_gradients
from viz.numbers import values_text
from viz.trace_page import page_steps

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's `dot` is not installed")


@pytest.fixture(scope="module")
def page_file(tmp_path_factory):
    if shutil.which("dot") is None:
        pytest.skip("Graphviz's `dot` is not installed (apt-get install graphviz)")
    out = tmp_path_factory.mktemp("page") / "trace.html"
    run = subprocess.run([sys.executable, "-m", "viz.trace", "models.tiny", "--html", str(out)], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert f"wrote {out}" in run.stdout
    return out


def engine_steps():
    """The engine's own walk of the tiny model's backward, and the gradients backward leaves."""
    loss = tiny.demo_loss()
    steps = vt.trace(loss)
    keep_gradients(loss)
    return steps, loss


def test_page_data_is_the_engines_walk():
    steps = vt.trace(tiny.demo_loss())
    data = page_steps(steps)
    assert [s["name"] for s in data["steps"]] == [s.name for s in steps]
    for shown, step in zip(data["steps"], steps):
        assert shown["grad"]["text"] == values_text(step.grad)
        assert [i["grad"]["text"] for i in shown["inputs"] if "grad" in i] == \
               [values_text(i.grad) for i in step.inputs if i.grad is not None]
        assert [v["name"] for v in shown["saved"]] == [name for name, _ in step.saved]
        assert [i["role"] for i in shown["inputs"]] == [i.role for i in step.inputs]
    matmul = next(s for s in data["steps"] if s["name"] == "MatMul")
    assert [i["role"] for i in matmul["inputs"]] == ["A", "B"]
    with pytest.raises(TypeError, match=r"expected a trace, viz.trace.trace\(loss\), got Tensor"):
        page_steps(tiny.demo_loss())


def test_the_page_reads_a_trace_and_never_imports_the_trace_module():
    # imports go one way: viz.trace writes the page through viz.trace_page, never the other way round
    code = "import sys, viz.trace_page; print('viz.trace' in sys.modules)"
    run = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "False"


@needs_dot
def test_page_is_one_self_contained_file(page_file):
    text = page_file.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>") and "<svg" in text and 'id="trace-data"' in text
    assert not re.search(r"""(src|href)\s*=\s*["'](https?:|//)""", text)  # nothing fetched
    assert "<link" not in text and "@import" not in text
    assert not list(page_file.parent.glob("*.part"))
    data = json.loads(re.search(r'<script id="trace-data" type="application/json">(.*?)</script>', text, re.S)
                      .group(1).replace("<\\/", "</"))
    assert len(data["steps"]) == 23 and data["steps"][0]["name"] == "CrossEntropy"


def numbers(text):
    return np.array([float(x) for x in re.findall(r"-?\d+\.\d+(?:e[-+]\d+)?|-?\d+", text)])


IN_VIEW = """title => {  // whether the graph node with this <title> lies wholly inside the picture's visible area
  const pane = document.getElementById("graph"), box = pane.getBoundingClientRect();
  const node = [...pane.querySelectorAll("g.node")].find(g => g.querySelector("title").textContent === title);
  const r = node.getBoundingClientRect();
  return r.left >= box.left && r.top >= box.top &&
         r.right <= box.left + pane.clientWidth && r.bottom <= box.top + pane.clientHeight;
}"""


def test_page_steps_through_backward_in_chromium(page_file):
    if CHROMIUM is None:
        pytest.skip("Debian's chromium is not installed (apt-get install chromium; .ci/run installs it)")
    playwright = pytest.importorskip("playwright.sync_api", reason='pip install -e ".[dev]" (playwright)')
    steps, loss = engine_steps()
    requests, errors = [], []
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch_persistent_context(
            tempfile.mkdtemp(), executable_path=CHROMIUM, headless=True,
            args=["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"], viewport={"width": 1400, "height": 900})
        try:
            page = browser.new_page()
            page.on("request", lambda r: requests.append(r.url))
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.goto(page_file.as_uri())
            assert page.inner_text("#position") == f"step 1 of {len(steps)}"  # as the text trace counts
            assert page.evaluate(IN_VIEW, "legend")  # the first view keeps the legend whole, not scrolled past
            assert page.inner_text("#caption") == page.title()
            for n, step in enumerate(steps):
                if n:
                    page.keyboard.press("ArrowRight")
                assert page.inner_text("#op-name") == step.name
                assert page.get_attribute("g.node.current", "id") is not None
                assert page.text_content("g.node.current > title") == f"op{n + 1}"  # ops drawn in backward's order
                assert page.evaluate(IN_VIEW, f"op{n + 1}")
                blocks = page.locator("#step pre").all_inner_texts()
                np.testing.assert_allclose(numbers(blocks[0]), np.ravel(step.grad), atol=5e-7)  # incoming g
                assert blocks[1] == step.rule
                shown = blocks[2:]
                expected = [a for _, a in step.saved] + [i.grad for i in step.inputs if i.grad is not None]
                assert len(shown) == len(expected)
                for text, array in zip(shown, expected):
                    if array.size <= 16:
                        np.testing.assert_allclose(numbers(text), np.ravel(array), atol=5e-7)
                assert page.locator("g.node.outgoing").count() == len(
                    {id(i.tensor) for i in step.inputs if i.grad is not None})
            page.keyboard.press("ArrowRight")  # the last view: the leaves' gradients
            assert "Leaves" in page.inner_text("#step")
            leaf_blocks = page.locator("#step pre").all_inner_texts()
            for leaf, text in zip(steps.leaves, leaf_blocks):
                np.testing.assert_allclose(numbers(text), np.ravel(leaf.tensor.grad), atol=5e-7)
            page.keyboard.press("ArrowRight")  # past the end: stays
            assert page.inner_text("#position") == f"after all {len(steps)} steps: the leaves"
            page.keyboard.press("ArrowLeft")
            assert page.inner_text("#op-name") == steps[-1].name
            page.click("#first")
            assert page.inner_text("#op-name") == "CrossEntropy"
            page.click("#next")
            assert page.inner_text("#op-name") == steps[1].name
            page.click("#prev")
            page.keyboard.press("End")
            assert "Leaves" in page.inner_text("#step")
            page.keyboard.press("Home")
            assert page.inner_text("#position").startswith("step 1 of")
        finally:
            browser.close()
    assert not errors, errors
    assert all(url.startswith("file:") for url in requests), requests
    assert loss.item() == pytest.approx(2.467373, abs=1e-6)


def test_html_needs_dot_and_says_so_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(vt.shutil, "which", lambda name: None)
    with pytest.raises(SystemExit) as exit_:
        vt.main(["models.tiny", "--html", str(tmp_path / "t.html")])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "needs Graphviz's `dot`" in err and err.count("\n") == 1
    assert not list(tmp_path.iterdir())


def test_trace_of_a_value_module_points_to_the_picture():
    with pytest.raises(SystemExit, match="models.neuron.demo_loss\\(\\) is a Value.*python -m viz.graph models.neuron"):
        vt.main(["models.neuron"])
