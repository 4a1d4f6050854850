"""Every notebook in notebooks/ runs top to bottom, its graphs render after backward, and its exercise is graded.

Each lesson notebook ends with an exercise: a VJP to write, a starter with a
deliberate mistake (gradcheck must reject it, showing why) and one answer
(gradcheck must accept it). Every picture a notebook shows is a backward
graph beside text that says gradients flow along its arrows, so each must be
drawn after backward: a box saying "no grad yet" fails the notebook. A figure
the text states (to 4 to 6 decimals) must be one a cell prints. Executing
them here is what keeps them from rotting.
"""
import json
import re
import shutil
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason='pip install -e ".[dev]" (nbformat, nbclient, ipykernel)')
nbclient = pytest.importorskip("nbclient", reason='pip install -e ".[dev]" (nbformat, nbclient, ipykernel)')

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
# What each notebook's grader prints for the starter (rejected) and for the answer (accepted).
GRADED = {
    "lesson000_bigram_softmax.ipynb": ("backward() disagrees with finite differences", "correct: backward matches"),
    "tiny_transformer.ipynb": ("backward() disagrees with finite differences",
                               "correct: backward matches finite differences; ∂L/∂logit(你) = -0.915193"),
    "gpt2_kv_cache.ipynb": ("backward() disagrees with finite differences", "correct: the forward is full "
                            "attention's last row, and backward matches finite differences"),
    "troubleshoot.ipynb": ("not yet: backward() disagrees with finite differences",
                           "correct: backward matches finite differences"),
    "second_order.ipynb": ("not yet: your Hessian differs from ag.hessian",
                           "correct: diag(p) − ppᵀ matches ag.hessian, whatever the target"),
}
FIGURE = re.compile(r"(?<![\d.])\d+\.\d{4,6}(?!\d)")  # a figure stated to 4 to 6 decimals, as the cells print them
NO_GRAD = "no grad yet"  # what viz.graph writes in a box drawn before backward
# Notebooks whose pictures show a backward pass that detect_anomaly stopped, and what each must show: the culprit's
# highlight (viz.graph.HIGHLIGHT), where the pass stopped (viz.anomaly.grad_lines) and never "backward not run"
STOPPED_PICTURES = {"troubleshoot.ipynb": ("#d62728", "no grad yet: backward stopped at step ")}


def test_every_lesson_has_its_notebook():
    assert [p.name for p in NOTEBOOKS] == sorted(GRADED)


def outputs_of(notebook):
    """(the text outputs, one string; the values displayed (text/plain); the SVG pictures)."""
    text, shown, pictures = [], [], []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            text.append(output.get("text", ""))
            if "image/svg+xml" in data:
                pictures.append(data["image/svg+xml"])
            elif "text/plain" in data:
                shown.append(data["text/plain"])
    return "\n".join(text), shown, pictures


def unprinted_figures(notebook, text):
    """The figures the notebook's prose states (4 to 6 decimals) that no cell printed in `text`."""
    prose = " ".join(cell.source for cell in notebook.cells if cell.cell_type == "markdown")
    return [figure for figure in FIGURE.findall(prose) if figure not in text]


def check_pictures(name, pictures):
    """Each picture is drawn after backward: no box waits for a gradient, and gradients are shown."""
    if name in STOPPED_PICTURES:
        marks = STOPPED_PICTURES[name]
        for i, svg in enumerate(pictures, 1):
            assert all(mark in svg for mark in marks), f"{name}: picture {i} lacks one of {marks}"
            assert "backward not run" not in svg, f"{name}: picture {i} says backward did not run, though it stopped"
        return
    for i, svg in enumerate(pictures, 1):
        assert NO_GRAD not in svg, f"{name}: picture {i} was drawn before backward ({NO_GRAD!r} in a box)"
        assert re.search(r"grad (norm = |\[|-?\d)", svg), f"{name}: picture {i} shows no gradient"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_and_grades_its_exercise(path):
    notebook = nbformat.read(path, as_version=4)
    assert not any(cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code"), \
        f"{path.name} is committed with outputs; clear them (CI runs it anyway)"
    client = nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(ROOT)}})
    client.execute()  # raises CellExecutionError, naming the cell, if any cell fails
    text, shown, pictures = outputs_of(notebook)
    rejected, accepted = GRADED[path.name]
    assert text.count(rejected) == 1 and text.count(accepted) == 1  # the starter once, then the answer once
    assert not [v for v in shown if "np." in v], f"{path.name} displays NumPy scalar reprs: {shown}"
    unprinted = unprinted_figures(notebook, text)
    assert not unprinted, f"{path.name}: its text states {unprinted}, which no cell prints"
    if shutil.which("dot"):
        assert pictures, f"{path.name}: no graph rendered inline"
        check_pictures(path.name, pictures)


def test_a_figure_the_text_states_but_no_cell_prints_is_found():
    """The tiny notebook's prose said −0.516960 where its cell printed round()'s -0.51696."""
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("rises from −0.7 to −0.516960, "
                                                                             "loss 2.467373")])
    assert unprinted_figures(notebook, "logit: -0.7 → -0.51696\nloss 2.467373") == ["0.516960"]


def test_a_picture_drawn_before_backward_fails_the_check():
    """The check above is not vacuous: the very picture viz draws before backward is refused."""
    vg = pytest.importorskip("viz.graph")
    if not shutil.which("dot"):
        pytest.skip("Graphviz's `dot` draws the pictures")
    from models.lessons import bigram
    before = vg.draw(bigram.demo_loss()).pipe(format="svg").decode()
    with pytest.raises(AssertionError, match="drawn before backward"):
        check_pictures("before", [before])
    loss = bigram.demo_loss()
    vg.keep_gradients(loss)
    check_pictures("after", [vg.draw(loss).pipe(format="svg").decode()])
