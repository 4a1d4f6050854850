"""viz.trace --html: one self-contained page, stepped through in a real headless Chromium.

The browser tests need Debian's `chromium` (.ci/run installs it where missing)
and the Python package `playwright` (the dev extra), which drives that browser
and downloads none of its own. Without either they skip, saying which.
"""
import json
import re
import shutil
import subprocess
import sys
import tempfile
from functools import reduce
from pathlib import Path

import numpy as np
import pytest

import autograd as ag
from autograd import Constant, Tensor, Value
from models.lessons import tiny
from viz import trace as vt
from viz.graph import grad_rows, keep_gradients, node_keys
from viz.loading import demo_loss_of
from viz.numbers import norm, values_text
from viz.trace_page import gradient_states, page_steps, write_page
from viz.walk import walk_of

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's `dot` is not installed")


WINDOWS = [(1000, 700), (1400, 900), (800, 600)]  # the sizes where auto-scroll used to leave the op at the edge
MARGIN = 24  # px: the least room the page keeps between the current op and the pane's edges


def write_with_the_cli(module, out):
    if shutil.which("dot") is None:
        pytest.skip("Graphviz's `dot` is not installed (apt-get install graphviz)")
    run = subprocess.run([sys.executable, "-m", "viz.trace", module, "--html", str(out)], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert f"wrote {out}" in run.stdout
    return out


@pytest.fixture(scope="module")
def page_file(tmp_path_factory):
    return write_with_the_cli("models.tiny", tmp_path_factory.mktemp("page") / "trace.html")


@pytest.fixture(scope="module")
def chromium():
    """A headless Chromium (Debian's, driven by playwright), one for the module's tests."""
    if CHROMIUM is None:
        pytest.skip("Debian's chromium is not installed (apt-get install chromium; .ci/run installs it)")
    playwright = pytest.importorskip("playwright.sync_api", reason='pip install -e ".[dev]" (playwright)')
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch_persistent_context(
            tempfile.mkdtemp(), executable_path=CHROMIUM, headless=True,
            args=["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"], viewport={"width": 1400, "height": 900})
        try:
            yield browser
        finally:
            browser.close()


def open_page(chromium, url, size=(1400, 900)):
    """A new tab on `url` at that window size; (tab, errors it reports, the addresses it asks for)."""
    page = chromium.new_page()
    page.set_viewport_size({"width": size[0], "height": size[1]})
    requests, errors = [], []
    page.on("request", lambda r: requests.append(r.url))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(url)
    return page, errors, requests


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
    assert [p.name for p in page_file.parent.iterdir()] == [page_file.name]  # no temporary file left beside it
    data = json.loads(re.search(r'<script id="trace-data" type="application/json">(.*?)</script>', text, re.S)
                      .group(1).replace("<\\/", "</"))
    assert len(data["steps"]) == 23 and data["steps"][0]["name"] == "CrossEntropy"


def numbers(text):
    return np.array([float(x) for x in re.findall(r"-?\d+(?:\.\d+)?(?:e[-+]\d+)?", text)])


IN_VIEW = """title => {  // whether the graph node with this <title> lies wholly inside the picture's visible area
  const pane = document.getElementById("graph"), box = pane.getBoundingClientRect();
  const node = [...pane.querySelectorAll("g.node")].find(g => g.querySelector("title").textContent === title);
  const r = node.getBoundingClientRect();
  return r.left >= box.left && r.top >= box.top &&
         r.right <= box.left + pane.clientWidth && r.bottom <= box.top + pane.clientHeight;
}"""


def test_page_steps_through_backward_in_chromium(page_file, chromium):
    steps, loss = engine_steps()
    page, errors, requests = open_page(chromium, page_file.as_uri())
    try:
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
        page.close()
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


# what the picture says about gradients, step by step


def test_a_summed_gradient_grows_part_by_part_as_the_engine_adds_it():
    # L = Σ (x·x + x) at x = (1, 2, 3): the add sends 1 to x (part 1 of 3), the product x·x sends x·1 twice
    x = Tensor(np.array([1.0, 2.0, 3.0]), requires_grad=True)
    x.name = "x"
    steps = vt.trace((x * x + x).sum())
    assert [s.name for s in steps] == ["Sum", "Add", "Mul"]
    assert gradient_states(steps)[id(x)] == [
        [1, ["grad (1 of 3 parts): [1, 1, 1]"], False],   # view 1 is step 2, the add
        [2, ["grad (2 of 3 parts): [2, 3, 4]"], False],   # the product's first part, x·g
        [2, ["grad (3 of 3 parts): [3, 5, 7]"], True]]    # and its second: ∂L/∂x = 2x + 1
    states = gradient_states(steps)
    assert states[id(steps.root)] == [[0, ["grad 1"], True]]  # the loss knows its gradient before step 1
    product = steps[2].output
    assert states[id(product)] == [[1, ["grad [1, 1, 1]"], True]]  # one part: no count


@needs_dot
def test_write_page_computes_the_gradient_states_once(tmp_path, monkeypatch):
    """The page's data and the picture's room for each box read the same states: one pass over the trace, not two."""
    from viz import trace_page
    calls = []
    real = trace_page.gradient_states
    monkeypatch.setattr(trace_page, "gradient_states", lambda steps: calls.append(steps) or real(steps))
    steps = vt.trace(tiny.demo_loss())
    write_page(steps, tmp_path / "trace.html", "tiny")
    assert calls == [steps]
    data = json.loads(re.search(r'<script id="trace-data" type="application/json">(.*?)</script>',
                                (tmp_path / "trace.html").read_text(encoding="utf-8"), re.S).group(1))
    assert data["grads"] == page_steps(steps)["grads"]


def test_a_values_summed_gradient_too():
    a = Value(2.0, name="a")
    steps = vt.trace(a * a + a)
    assert [lines for _, lines, _ in gradient_states(steps)[id(a)]] == [
        ["grad (1 of 3 parts): 1.0000"], ["grad (2 of 3 parts): 3.0000"], ["grad (3 of 3 parts): 5.0000"]]


@pytest.mark.parametrize("module", ["models.tiny", "models.gpt2", "models.moons"])
def test_each_boxs_last_total_is_the_engines_gradient_to_the_bit(module):
    _, loss = demo_loss_of(module)
    steps = vt.trace(loss)
    totals = {}
    for s in steps:
        for inp in s.inputs:
            if inp.grad is not None:
                totals.setdefault(id(inp.tensor), []).append(inp.grad)
    final = {id(s.output): s.grad for s in steps} | {id(leaf.tensor): leaf.grad for leaf in steps.leaves}
    for node, parts in totals.items():  # summed in the engine's order, first part first
        np.testing.assert_array_equal(reduce(lambda a, b: a + b, parts), final[node])
    data = page_steps(steps)
    tkey, _ = node_keys(walk_of(loss))
    by_key = {tkey[id(t)]: t for t in walk_of(loss).tensors}
    for key, grad in data["grads"].items():
        *_, (view, lines, complete) = grad["states"]
        assert complete and lines == [row.strip() for row in complete_rows(by_key[key], final[id(by_key[key])], grad)]


def complete_rows(node, grad, shown):
    """What the box says of a complete gradient: viz.graph's own lines, with the count when it is a sum."""
    parts = len(shown["states"])
    return grad_rows(node, grad, "grad" if parts == 1 else f"grad ({parts} of {parts} parts):")


BOXES = """keys => {  // each box's gradient: its lines from the one saying "grad" on
  const byTitle = {};
  for (const g of document.querySelectorAll("#graph g.node")) byTitle[g.querySelector("title").textContent] = g;
  return Object.fromEntries(keys.map(key => {
    const texts = [...byTitle[key].querySelectorAll("text")].map(t => t.textContent);
    return [key, texts.slice(texts.findIndex(t => t.startsWith("grad"))).filter(Boolean).join("\\n")];
  }));
}"""

PLACE = """([op, near]) => {  // the op's room to each edge of the picture's pane, and whether `near` are all in view
  const pane = document.getElementById("graph"), box = pane.getBoundingClientRect();
  const w = pane.clientWidth, h = pane.clientHeight;
  const rect = key => [...pane.querySelectorAll("g.node")].find(g => g.querySelector("title").textContent === key)
                       .getBoundingClientRect();
  const r = rect(op), others = near.map(rect);
  const all = [r, ...others];
  const [l, t] = [Math.min(...all.map(a => a.left)), Math.min(...all.map(a => a.top))];
  const [rr, b] = [Math.max(...all.map(a => a.right)), Math.max(...all.map(a => a.bottom))];
  const inside = a => a.left >= box.left && a.top >= box.top && a.right <= box.left + w && a.bottom <= box.top + h;
  return {room: [r.left - box.left, r.top - box.top, box.left + w - r.right, box.top + h - r.bottom],
          fits: rr - l + 2 * 64 <= w && b - t + 2 * 64 <= h, near: others.every(inside)};
}"""


def expected_boxes(steps, tkey):
    """For each view, what every box must say, worked out here from the trace's parts: {key: (parts so far,
    all parts, their total)}; a box missing from a view has had no part yet."""
    parts = {}
    for n, s in enumerate(steps):
        for inp in s.inputs:
            if inp.grad is not None:
                parts.setdefault(tkey[id(inp.tensor)], []).append((n, inp.grad))
    root = tkey[id(steps.root)]
    views = []
    for view in range(len(steps) + 1):
        known = {root: (1, 1, steps[0].grad)}
        for key, arrived in parts.items():
            so_far = [g for n, g in arrived if n <= view]
            if so_far:
                known[key] = (len(so_far), len(arrived), reduce(lambda a, b: a + b, so_far))
        views.append(known)
    return views


def check_box(text, node, known):
    if known is None:
        assert text == "grad —", text
        return
    k, n, total = known
    if n > 1:
        assert text.startswith(f"grad ({k} of {n} parts): "), text
        text = text.split(": ", 1)[1]
    else:
        assert text.startswith("grad ") and "parts" not in text, text
        text = text[len("grad "):]
    if isinstance(node, Value):
        np.testing.assert_allclose(numbers(text), [total], atol=5e-5)  # to 4 decimals
    elif node.data.size <= 16:
        np.testing.assert_allclose(numbers(text), np.ravel(total), rtol=6e-4)  # to 4 significant digits
    else:
        assert text.startswith("norm = ")
        np.testing.assert_allclose(numbers(text), [norm(total)], rtol=6e-4)


@pytest.mark.parametrize("module", ["models.tiny", "models.gpt2", "models.neuron"])
def test_boxes_show_only_the_gradients_known_so_far_and_the_op_stays_well_in_view(module, chromium, tmp_path):
    page_file = write_with_the_cli(module, tmp_path / "trace.html")
    _, loss = demo_loss_of(module)
    steps = vt.trace(loss)
    walk = walk_of(loss)
    tkey, okey = node_keys(walk)
    node = {tkey[id(t)]: t for t in walk.tensors}
    boxes = [k for k, t in node.items() if isinstance(t, Value) or t.requires_grad]
    views = expected_boxes(steps, tkey)
    for size in WINDOWS:
        page, errors, _ = open_page(chromium, page_file.as_uri(), size)
        try:
            for view, known in enumerate(views):
                if view:
                    page.keyboard.press("ArrowRight")
                if size == WINDOWS[0]:  # what the boxes say does not depend on the window's size
                    shown = page.evaluate(BOXES, boxes)
                    for key in boxes:
                        check_box(shown[key], node[key], known.get(key))
                if view == len(steps):
                    break  # the leaves' view: no op
                s = steps[view]
                near = [tkey[id(s.output)]] + [tkey[id(i.tensor)] for i in s.inputs]
                place = page.evaluate(PLACE, [okey[id(s.output)], near])
                assert min(place["room"]) >= MARGIN, (size, view + 1, place)
                assert place["near"] or not place["fits"], (size, view + 1, place)  # its boxes too, where they fit
                receivers = [tkey[id(i.tensor)] for i in s.inputs if i.grad is not None]
                place = page.evaluate(PLACE, [okey[id(s.output)], receivers])
                assert place["near"] or not place["fits"], (size, view + 1, place)  # at least those it sends to
            page.keyboard.press("Home")  # back to step 1: the loss and what its op sends, all else "—" again
            shown = page.evaluate(BOXES, boxes)
            assert {k for k in boxes if shown[k] != "grad —"} == set(views[0])
            for key in boxes:
                check_box(shown[key], node[key], views[0].get(key))
        finally:
            page.close()
        assert not errors, errors
    if isinstance(loss, Value):
        loss.backward()
        assert all(views[-1][tkey[id(v)]][2] == v.grad for v in walk.order)  # the last totals: backward's grads


def test_page_opens_at_its_start_step_or_the_one_its_address_names(chromium, tmp_path):
    steps = vt.trace(tiny.demo_loss())
    if shutil.which("dot") is None:
        pytest.skip("Graphviz's `dot` is not installed (apt-get install graphviz)")
    with pytest.raises(ValueError, match=r"start must be a step from 1 to 23, or 24 for the leaves' view, got 0"):
        write_page(steps, tmp_path / "no.html", "t", start=0)
    assert not list(tmp_path.iterdir())
    out = tmp_path / "trace.html"
    write_page(steps, out, "tiny", start=7)
    page, errors, _ = open_page(chromium, out.as_uri())
    try:
        assert page.inner_text("#position") == "step 7 of 23" and page.inner_text("#op-name") == steps[6].name
        assert page.url.endswith("#step=7")  # the address names the view, to copy or share
        page.keyboard.press("ArrowRight")
        assert page.url.endswith("#step=8")
    finally:
        page.close()
    for address, position in [("#step=3", "step 3 of 23"), ("#step=24", "after all 23 steps: the leaves")]:
        page, more, _ = open_page(chromium, out.as_uri() + address)
        try:
            assert page.inner_text("#position") == position
        finally:
            page.close()
        errors += more
    assert not errors, errors


def test_markup_in_a_name_a_module_and_the_title_shows_as_typed_and_never_runs(chromium, tmp_path):
    """A module named `<…>` was taken for DOT's HTML syntax: dot failed, and no page was written at all."""
    if shutil.which("dot") is None:
        pytest.skip("Graphviz's `dot` is not installed (apt-get install graphviz)")
    name = """<img src=x onerror="document.title='ran'"></script><script>document.title='ran'</script>"""
    x = Tensor(np.ones(2), requires_grad=True)
    x.name = name + "\\N"  # Graphviz would draw \\N as the node's name
    with ag.name_scope(name):
        loss = (x * 2.0).sum()
    out = tmp_path / "trace.html"
    write_page(vt.trace(loss), out, name)
    page, errors, requests = open_page(chromium, out.as_uri() + "#step=2")
    try:
        assert page.title() == page.inner_text("#caption") == name
        assert page.inner_text("#op-name") == "Mul" and page.inner_text("#step .muted") == f"in {name}"
        assert f"∂L/∂({name}\\N) (x)" in page.inner_text("#step")  # bracketed: the name holds spaces
        assert page.text_content("#graph g.node:has(> title:text-is('t1')) text") == name + "\\N"
        assert page.locator("#graph g.cluster text").all_text_contents() == [name]
        assert page.locator("img, #step script, #graph script").count() == 0
    finally:
        page.close()
    assert not errors, errors
    assert requests == [out.as_uri()], requests  # the page alone: no <img src=x> was fetched


def test_a_constants_box_keeps_its_data_and_gets_no_gradient_written_over_it(chromium, tmp_path):
    """Value.backward sends a Constant (a data point, the 1 of x + 1) its gradient too, but its box has no line for
    one (viz.graph draws it as data only): the page wrote the gradient over the data line, past the box's edge."""
    if shutil.which("dot") is None:
        pytest.skip("Graphviz's `dot` is not installed (apt-get install graphviz)")
    a, c = Value(2.0, name="a"), Constant(-0.25, name="c")
    loss = a * c
    steps = vt.trace(loss)
    assert [i.grad for i in steps[0].inputs] == [-0.25, None]  # the trace, as the picture, gives c none
    assert id(c) not in gradient_states(steps)
    tkey, _ = node_keys(walk_of(loss))
    out = tmp_path / "trace.html"
    write_page(steps, out, "a constant")
    page, errors, _ = open_page(chromium, out.as_uri())
    texts = """key => [...[...document.querySelectorAll("#graph g.node")]
                .find(g => g.querySelector("title").textContent === key).querySelectorAll("text")].map(t => t.textContent)"""
    try:
        for key in ("End", "Home", "End"):
            page.keyboard.press(key)
            assert page.evaluate(texts, tkey[id(c)]) == ["c", "data -0.2500"]
            assert page.evaluate(texts, tkey[id(a)])[-1] == "grad -0.2500"
        leaves = page.inner_text("#step")  # the leaves that get a gradient, as the text trace lists them
        assert "a.grad" in leaves and "c.grad" not in leaves
    finally:
        page.close()
    assert not errors, errors


def test_the_panel_notes_what_the_text_trace_notes(page_file, chromium):
    """A gradient the engine summed back over broadcast axes, and a leaf's sum of contributions: the text
    trace says so beside the numbers, and so must the page."""
    steps = vt.trace(tiny.demo_loss())
    text = vt.format_trace(steps)
    broadcast = [(n, i) for n, s in enumerate(steps) for i in s.inputs if i.returned_shape is not None]
    summed = [leaf for leaf in steps.leaves if leaf.contributions > 1]
    assert broadcast and summed  # b_1, b_2 and E in the tiny model
    page, errors, _ = open_page(chromium, page_file.as_uri())
    try:
        for n, inp in broadcast:
            note = f"summed from {inp.returned_shape} over broadcast axes"
            assert note in text
            page.goto(f"{page_file.as_uri()}#step={n + 1}")
            assert f"∂L/∂{inp.label} ({inp.role}, {note})" in page.inner_text("#step")
        page.keyboard.press("End")
        for leaf in summed:
            assert f"{leaf.label}.grad (sum of {leaf.contributions} contributions)" in page.inner_text("#step")
    finally:
        page.close()
    assert not errors, errors


def test_a_narrow_window_scrolls_a_long_row_inside_its_block_and_keys_leave_the_browsers_shortcuts(page_file,
                                                                                                 chromium):
    page, errors, _ = open_page(chromium, page_file.as_uri(), (800, 600))
    try:
        # step 1's p is one row of six numbers, wider than the 800 px window's panel
        widths = page.evaluate("""() => [...document.querySelectorAll("#step pre")].map(p => [p.scrollWidth,
                                  p.clientWidth, p.getBoundingClientRect().right])""")
        panel = page.evaluate("""() => { const p = document.getElementById("panel");
                                 return [p.scrollWidth, p.clientWidth, p.getBoundingClientRect().right]; }""")
        assert any(scroll > client for scroll, client, _ in widths)  # the row is wider than its block …
        assert panel[0] <= panel[1]  # … but the panel does not scroll sideways: the block does, on its own
        assert all(right <= panel[2] for *_, right in widths)
        page.keyboard.press("Alt+ArrowRight")  # the browser's forward, not the page's: no step taken
        page.keyboard.press("Control+End")
        assert page.inner_text("#position") == "step 1 of 23"
        page.keyboard.press("ArrowRight")
        assert page.inner_text("#position") == "step 2 of 23"
    finally:
        page.close()
    assert not errors, errors


@pytest.mark.parametrize("module", ["models.tiny", "models.gpt2"])
def test_the_leaves_view_scrolls_the_picture_to_the_leaves(module, chromium, tmp_path):
    """The leaves' view lit the leaves but left the picture where it was: opened at it (a shared #step=N+1), the
    pane showed an empty corner of the picture, with not one box in it, let alone a leaf."""
    page_file = write_with_the_cli(module, tmp_path / "trace.html")
    _, loss = demo_loss_of(module)
    steps = vt.trace(loss)
    tkey, _ = node_keys(walk_of(loss))
    first, leaves = tkey[id(steps.leaves[0].tensor)], [tkey[id(leaf.tensor)] for leaf in steps.leaves]
    for size in WINDOWS:
        page, errors, _ = open_page(chromium, f"{page_file.as_uri()}#step={len(steps) + 1}", size)
        try:
            for reached in ("by its address", "by End from step 1"):
                if reached == "by End from step 1":
                    page.keyboard.press("Home")
                    page.keyboard.press("End")
                assert page.inner_text("#position") == f"after all {len(steps)} steps: the leaves"
                place = page.evaluate(PLACE, [first, leaves])  # the panel's first leaf, the others where they fit
                assert min(place["room"]) >= MARGIN, (size, reached, place)
                assert place["near"] or not place["fits"], (size, reached, place)
        finally:
            page.close()
        assert not errors, errors


def test_a_long_dotted_name_wraps_inside_the_panel_of_a_narrow_window(chromium, tmp_path):
    """GPT-2's leaves are named transformer.h.0.attn.c_attn.weight: with no space to break at, the name ran past
    the panel's edge in a 600 px window, cut off, and the whole panel scrolled sideways."""
    page_file = write_with_the_cli("models.gpt2", tmp_path / "trace.html")
    page, errors, _ = open_page(chromium, page_file.as_uri(), (600, 800))
    try:
        page.keyboard.press("End")  # the leaves' view: GPT-2's parameters, by their full names
        assert "transformer.h.0.attn.c_attn.weight.grad" in page.inner_text("#step")
        panel = page.evaluate("""() => { const p = document.getElementById("panel");
                                 return [p.scrollWidth, p.clientWidth, p.getBoundingClientRect().left + p.clientWidth]; }""")
        rights = page.evaluate("""() => [...document.querySelectorAll("#step .label")]
                                  .map(l => l.getBoundingClientRect().right)""")
        assert panel[0] <= panel[1], panel  # the panel does not scroll sideways …
        assert max(rights) <= panel[2], (max(rights), panel)  # … and every name ends inside it
    finally:
        page.close()
    assert not errors, errors
